//! Whole checkpoints saved and loaded on every GPU at once: the engine's
//! steps (the parent module) driven by worker threads, a few a GPU, each
//! with its own device scratch and page-locked buffer. While one worker
//! seals or opens on its GPU, the others do the host's part (writing or
//! reading packs: one copy through host memory each, the bound of a save
//! or a load). The Python package and `gvault bench checkpoint` both call
//! [`save`] and [`load`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::Scope;
use std::time::Instant;

use rayon::prelude::*;

use super::{
    chunk_sources, load_group_on_device, read_segment, seal_plan_on_device, ChunkRef, Opened, Plan,
    SaveStats, Saver, Source, StepSeconds, JOB_BYTES, SCRATCH_BYTES,
};
use crate::accel_jobs::IdChunk;
use crate::work_queue::{serve, WorkQueue};
use crate::{Error, Repository, Result};
use gvault_accel::{Backend, DeviceAllocation, DeviceSlice, PinnedBuffer};

/// How a save or load runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Worker threads a GPU; None: [`workers_per_gpu`].
    pub workers_per_gpu: Option<usize>,
}

/// Worker threads a GPU by default: half the cores shared among the GPUs
/// in use, 4 to 16 a GPU.
pub fn workers_per_gpu(gpus: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(8, |n| n.get());
    (cores / (2 * gpus.max(1))).clamp(4, 16)
}

/// Seconds per step, summed over the workers (their device steps) and the
/// driver's own phases: where a save's or a load's time went.
pub type Trace = BTreeMap<&'static str, f64>;

fn add_steps(trace: &mut Trace, steps: &[(&'static str, f64)]) {
    for &(k, v) in steps {
        *trace.entry(k).or_default() += v;
    }
}

fn add_since(trace: &mut Trace, step: &'static str, t: Instant) {
    *trace.entry(step).or_default() += t.elapsed().as_secs_f64();
}

/// Bytes and copies that crossed the link between host and GPU memory
/// (the plaintext never does on the device path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub d2h_bytes: u64,
    pub d2h_copies: u64,
    pub h2d_bytes: u64,
    pub h2d_copies: u64,
}

/// A saved checkpoint: its snapshot, what the save did, and its trace.
#[derive(Debug)]
pub struct Saved {
    pub snapshot: String,
    pub stats: SaveStats,
    pub trace: Trace,
    pub moved: Moved,
}

/// Where a loaded segment goes: host memory or one GPU's, exactly the
/// segment's length (the same places a save reads from).
pub type Target = Source;

/// Worker threads a GPU for a save or load over `places`.
fn per_gpu(opts: &Options, places: &[Source]) -> usize {
    let gpus: std::collections::BTreeSet<u32> = places.iter().filter_map(|s| s.device()).collect();
    opts.workers_per_gpu
        .unwrap_or_else(|| workers_per_gpu(gpus.len()))
        .max(1)
}

/// One worker's buffers, made on its first item.
struct Buffers {
    scratch: DeviceAllocation,
    pinned: PinnedBuffer,
}

impl Buffers {
    fn new(backend: &dyn Backend, device: u32) -> Result<Buffers> {
        let none = || Error::Accel("no GPU for a device-resident checkpoint".into());
        let scratch = backend
            .alloc_on_device(device, SCRATCH_BYTES)
            .ok_or_else(none)?
            .map_err(|e| Error::Accel(format!("device scratch on GPU {device}: {e}")))?;
        let pinned = backend.alloc_host(SCRATCH_BYTES).ok_or_else(none)?;
        Ok(Buffers { scratch, pinned })
    }

    fn scratch(&self) -> Result<DeviceSlice> {
        self.scratch
            .slice(0, self.scratch.len())
            .ok_or_else(|| Error::Accel("device scratch has no slice".into()))
    }
}

type WorkFn<'env, In, Out> = dyn Fn(&mut Buffers, In) -> Result<(Out, StepSeconds)> + Sync + 'env;

/// Worker threads a GPU, started on the first item for that GPU; the first
/// error stops the items not yet begun.
struct Workers<'scope, 'env, In: Send + 'env, Out: Send + 'env> {
    scope: &'scope Scope<'scope, 'env>,
    backend: &'env dyn Backend,
    per_gpu: usize,
    work: &'env WorkFn<'env, In, Out>,
    stop: &'env AtomicBool,
    queues: BTreeMap<u32, WorkQueue<In, (Out, StepSeconds)>>,
}

impl<'scope, 'env, In: Send + 'env, Out: Send + 'env> Workers<'scope, 'env, In, Out> {
    fn new(
        scope: &'scope Scope<'scope, 'env>,
        backend: &'env dyn Backend,
        per_gpu: usize,
        work: &'env WorkFn<'env, In, Out>,
        stop: &'env AtomicBool,
    ) -> Self {
        Workers {
            scope,
            backend,
            per_gpu,
            work,
            stop,
            queues: BTreeMap::new(),
        }
    }

    fn submit(&mut self, device: u32, item: In) -> Result<()> {
        if !self.queues.contains_key(&device) {
            let (queue, (rx, tx)) = WorkQueue::new(2 * self.per_gpu);
            for _ in 0..self.per_gpu {
                let ends = (rx.clone(), tx.clone());
                let (backend, work, stop) = (self.backend, self.work, self.stop);
                self.scope.spawn(move || {
                    let bufs: RefCell<Option<Buffers>> = RefCell::new(None);
                    serve(ends, |item| {
                        if stop.load(Ordering::Relaxed) {
                            return Err(Error::Accel("stopped after an earlier error".into()));
                        }
                        let mut slot = bufs.borrow_mut();
                        let b = match slot.as_mut() {
                            Some(b) => b,
                            None => slot.insert(Buffers::new(backend, device)?),
                        };
                        work(b, item)
                    })
                });
            }
            self.queues.insert(device, queue);
        }
        let q = self
            .queues
            .get_mut(&device)
            .ok_or_else(|| Error::Accel("worker queue missing".into()))?;
        q.send(item)
    }

    /// The finished items' outputs, their steps added to `trace` (`wait`:
    /// every item, and the workers end); the first error, if any.
    fn collect(&mut self, wait: bool, trace: &mut Trace) -> Result<Vec<Out>> {
        let mut out = Vec::new();
        let mut first = None;
        for q in self.queues.values_mut() {
            if wait {
                q.close();
            }
            for r in q.collect(wait) {
                match r {
                    Ok((o, steps)) => {
                        add_steps(trace, &steps);
                        out.push(o);
                    }
                    Err(e) => {
                        self.stop.store(true, Ordering::Relaxed);
                        first.get_or_insert(e);
                    }
                }
            }
        }
        first.map_or(Ok(out), Err)
    }
}

/// Seals host plans here and hands device plans to their GPU's workers.
fn route_plans(
    saver: &mut Saver,
    workers: &mut Workers<'_, '_, Plan, Sealed>,
    plans: Vec<Plan>,
) -> Result<()> {
    for plan in plans {
        match plan.device {
            None => {
                let p = saver.seal_host(&plan)?;
                saver.put(p)?;
            }
            Some(device) => workers.submit(device, plan)?,
        }
    }
    Ok(())
}

/// A segment's chunks, with the segment's place in its batch.
type Placed = (usize, Vec<IdChunk>);

/// Chunks a batch of device sources, each GPU's on a thread of its own
/// (every GPU at once); the chunk lists in batch order.
fn chunk_by_device(
    repo: &Repository,
    backend: &dyn Backend,
    batch: &[Source],
) -> Result<Vec<Vec<IdChunk>>> {
    let mut by_device: BTreeMap<Option<u32>, Vec<usize>> = BTreeMap::new();
    for (i, s) in batch.iter().enumerate() {
        by_device.entry(s.device()).or_default().push(i);
    }
    let found: Vec<Result<Vec<Placed>>> = std::thread::scope(|s| {
        let handles: Vec<_> = by_device
            .values()
            .map(|idx| {
                s.spawn(move || {
                    let srcs: Vec<Source> = idx.iter().map(|&i| batch[i]).collect();
                    let chunks = chunk_sources(repo, backend, &srcs)?;
                    Ok(idx.iter().copied().zip(chunks).collect())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Accel("a chunking thread panicked".into())))
            })
            .collect()
    });
    let mut out = vec![Vec::new(); batch.len()];
    for r in found {
        for (i, chunks) in r? {
            out[i] = chunks;
        }
    }
    Ok(out)
}

/// Saves `sources` as checkpoint `name`: segment 0 is the manifest, in a
/// pack of its own. Host segments are chunked and sealed by the
/// repository's accelerator; device segments are chunked on their GPU
/// (every GPU at once) and sealed there by worker threads through
/// `backend`, which must reach those GPUs.
///
/// # Safety
/// Every source is valid memory of its length (host, or that GPU's) and
/// stays unchanged until this returns.
pub unsafe fn save(
    repo: &Arc<Repository>,
    backend: &dyn Backend,
    name: &str,
    sources: &[Source],
    opts: &Options,
) -> Result<Saved> {
    super::ckpt_path(name)?;
    let Some(manifest) = sources.first() else {
        return Err(Error::InvalidArgument(
            "a checkpoint needs its manifest".into(),
        ));
    };
    if manifest.device().is_some() {
        return Err(Error::InvalidArgument(
            "a checkpoint's manifest must be in host memory".into(),
        ));
    }
    let mut saver = Saver::new(repo.clone())?;
    let per_gpu = per_gpu(opts, sources);
    let gpus: std::collections::BTreeSet<u32> = sources.iter().filter_map(|s| s.device()).collect();
    let batch_cap = JOB_BYTES * gpus.len().max(1) as u64;
    let stop = AtomicBool::new(false);
    let seal = |b: &mut Buffers, plan: Plan| {
        let scratch = b.scratch()?;
        // SAFETY: the sources are the caller's promise (the saver's
        // segments are `sources`, added in order); the scratch and the
        // page-locked buffer are this worker's alone.
        let (pack, steps) =
            unsafe { seal_plan_on_device(repo, backend, &plan, sources, scratch, &mut b.pinned)? };
        Ok(((pack, plan.scratch_len), steps))
    };
    let mut trace = Trace::new();
    let mut moved = Moved::default();
    let snapshot = std::thread::scope(|s| {
        let mut workers = Workers::new(s, backend, per_gpu, &seal, &stop);
        let mut run = SaveRun {
            saver: &mut saver,
            workers: &mut workers,
            trace: &mut trace,
            moved: &mut moved,
        };
        let r = run.save(repo, backend, name, sources, batch_cap);
        if r.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        r
    })?;
    Ok(Saved {
        snapshot,
        stats: saver.stats.clone(),
        trace,
        moved,
    })
}

/// A pack a worker sealed and wrote, and the bytes it copied back.
type Sealed = (super::WrittenPack, u64);

/// A save's state while its workers run.
struct SaveRun<'r, 'scope, 'env> {
    saver: &'r mut Saver,
    workers: &'r mut Workers<'scope, 'env, Plan, Sealed>,
    trace: &'r mut Trace,
    moved: &'r mut Moved,
}

impl SaveRun<'_, '_, '_> {
    /// Records the packs the workers finished (`wait`: all of them).
    fn record(&mut self, wait: bool) -> Result<()> {
        for (pack, bytes) in self.workers.collect(wait, self.trace)? {
            self.moved.d2h_bytes += bytes;
            self.moved.d2h_copies += 1;
            self.saver.written_pack(pack)?;
        }
        Ok(())
    }

    fn save(
        &mut self,
        repo: &Repository,
        backend: &dyn Backend,
        name: &str,
        sources: &[Source],
        batch_cap: u64,
    ) -> Result<String> {
        let t = Instant::now();
        let chunks = chunk_sources(repo, &*repo.accel, &sources[..1])?;
        let mut plans = self.saver.add(sources[..1].to_vec(), chunks)?;
        plans.extend(self.saver.take_rest());
        route_plans(self.saver, self.workers, plans)?;
        add_since(self.trace, "chunk", t);
        let mut i = 1;
        while i < sources.len() {
            let on_gpu = sources[i].device().is_some();
            let (mut j, mut bytes) = (i, 0u64);
            while j < sources.len() && sources[j].device().is_some() == on_gpu {
                bytes += sources[j].len();
                j += 1;
                if bytes >= batch_cap {
                    break;
                }
            }
            let batch = &sources[i..j];
            let t = Instant::now();
            let chunks = if on_gpu {
                chunk_by_device(repo, backend, batch)?
            } else {
                chunk_sources(repo, &*repo.accel, batch)?
            };
            add_since(self.trace, "chunk", t);
            let t = Instant::now();
            let plans = self.saver.add(batch.to_vec(), chunks)?;
            route_plans(self.saver, self.workers, plans)?;
            self.record(false)?;
            add_since(self.trace, "add", t);
            i = j;
        }
        let rest = self.saver.take_rest();
        route_plans(self.saver, self.workers, rest)?;
        let t = Instant::now();
        self.record(true)?;
        add_since(self.trace, "join", t);
        let t = Instant::now();
        let snap = self.saver.commit(name)?;
        add_since(self.trace, "commit", t);
        Ok(snap)
    }
}

/// One device item of a load: chunks [start, end) of a segment, the
/// first at segment offset `first`.
struct Group {
    seg: usize,
    start: usize,
    end: usize,
    first: u64,
}

/// Loads the segments of `opened` into `targets` (one a segment, each
/// exactly its length): host targets read on the host (in parallel),
/// device targets fetched as ciphertext, opened and re-hashed on their GPU
/// by worker threads through `backend`. Every chunk is checked against
/// its id.
///
/// # Safety
/// Every target is valid memory of its length (host, or that GPU's),
/// distinct from the others, and nothing else touches it until this
/// returns.
pub unsafe fn load(
    repo: &Repository,
    backend: &dyn Backend,
    opened: &Opened,
    targets: &[Target],
    opts: &Options,
) -> Result<(Trace, Moved)> {
    let segs = &opened.segments;
    if targets.len() != segs.len() {
        return Err(Error::InvalidArgument(format!(
            "{} targets for {} segments",
            targets.len(),
            segs.len()
        )));
    }
    for (i, (t, chunks)) in targets.iter().zip(segs).enumerate() {
        let len: u64 = chunks.iter().map(|c| c.len as u64).sum();
        if t.len() != len {
            return Err(Error::InvalidArgument(format!(
                "segment {i} is {len} bytes; its target {}",
                t.len()
            )));
        }
    }
    let per_gpu = per_gpu(opts, targets);
    let stop = AtomicBool::new(false);
    let open = |b: &mut Buffers, g: Group| {
        let Target::Device(out) = targets[g.seg] else {
            return Err(Error::Accel("a host segment in a device group".into()));
        };
        let chunks: &[ChunkRef] = &segs[g.seg][g.start..g.end];
        let scratch = b.scratch()?;
        // SAFETY: the target is the caller's promise; each group writes its
        // own chunks' range of it; scratch and pinned are this worker's.
        unsafe { load_group_on_device(repo, backend, chunks, g.first, &mut b.pinned, scratch, out) }
    };
    let mut trace = Trace::new();
    let mut moved = Moved::default();
    std::thread::scope(|s| {
        let mut workers = Workers::new(s, backend, per_gpu, &open, &stop);
        let r = (|| -> Result<()> {
            for (seg, t) in targets.iter().enumerate() {
                if let Target::Device(d) = t {
                    let mut first = 0;
                    for (start, end) in super::groups(&segs[seg], SCRATCH_BYTES as u64) {
                        let group = Group {
                            seg,
                            start,
                            end,
                            first,
                        };
                        first += segs[seg][start..end]
                            .iter()
                            .map(|c| c.len as u64)
                            .sum::<u64>();
                        workers.submit(d.device(), group)?;
                    }
                }
            }
            let t = Instant::now();
            targets
                .par_iter()
                .zip(segs.par_iter())
                .try_for_each(|(t, chunks)| match *t {
                    Target::Host { ptr, len } => {
                        // SAFETY: a live, distinct host buffer of this
                        // length (the caller's promise).
                        let out: &mut [u8] = if len == 0 {
                            &mut []
                        } else {
                            unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len) }
                        };
                        read_segment(repo, chunks, out)
                    }
                    Target::Device(_) => Ok(()),
                })?;
            add_since(&mut trace, "read_host", t);
            let t = Instant::now();
            for bytes in workers.collect(true, &mut trace)? {
                moved.h2d_bytes += bytes;
                moved.h2d_copies += 1;
            }
            add_since(&mut trace, "join", t);
            Ok(())
        })();
        if r.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        r
    })?;
    Ok((trace, moved))
}
