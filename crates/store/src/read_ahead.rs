//! Pipelined read-ahead of value-log values for a forward iteration of an
//! encrypted store. A worker thread of the iterator walks a second cursor
//! (the scout) over the same pinned tables and memtables ahead of the
//! user's cursor, reads the frames of the next values and opens them in one
//! batch spread over cores, and queues the batch. The iterating thread only
//! takes finished values: while it consumes batch k, batch k+1 waits in the
//! queue and k+2 is being built, so neither the scout's walk, the reads nor
//! the decryption (nor their hand-off to the pool) are on its path: it
//! copies each value out of the batch.
//!
//! Correctness does not rest on the worker being in step with the cursor:
//! both walk internal keys in order, an entry is matched by its exact
//! internal key and pointer bytes, a pointer names an immutable frame, and
//! the frame is checked against the key, so a hit returns exactly what a
//! direct read would. Anything not matched is read directly. Each entry
//! keeps its own result, so a damaged frame ahead fails only its own entry.
//!
//! Memory: at most four batches (the one being consumed, one queued, one
//! being built, one on its way back to be refilled) of about
//! `MAX_BATCH_BYTES` each; consumed batches are reused, not freed. A seek, a step back or a
//! change of direction moves to a new generation: the worker drops what it
//! was building at its next check, and stale batches are thrown away.

use std::cmp::Ordering as CmpOrdering;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::db::DbInner;
use crate::error::Result;
use crate::format::{compare_internal, parse_internal_key, ValuePointer, ValueType};
use crate::iterator::{InternalIterator, MergingIterator};

/// Frame bytes of the first batch after a start; each further batch
/// doubles up to `MAX_BATCH_BYTES`, so a short scan reads little ahead.
const FIRST_BATCH_BYTES: usize = 128 << 10;
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Values per batch at most (bounds the bookkeeping of small values).
const MAX_BATCH_VALUES: usize = 512;
/// Internal entries the scout looks at per batch at most (inline values,
/// deletions and hidden versions take no room in a batch).
const MAX_SCOUTED: usize = 4 * MAX_BATCH_VALUES;

/// A batch that scouted `MAX_SCOUTED` entries and found fewer frame bytes
/// than this (a stretch of inline values) ends the run: the worker would
/// walk the tables a second time for nothing.
const SPARSE_BATCH_BYTES: usize = 64 << 10;
/// Entries read directly after a sparse batch, before starting again.
const SPARSE_BACK_OFF: usize = 4096;

/// Values read directly after a seek (or the iterator's start) before a
/// run starts: a short scan never pays for a worker thread, a first batch
/// it would not use, or the join when it is dropped.
const WARM_UP: usize = 4;

/// Where a worker's time went, printed to stderr when it ends if
/// `GVAULT_READ_AHEAD_STATS` is set (for tuning on a given host).
#[derive(Default)]
struct WorkerStats {
    batches: u64,
    values: u64,
    scout: std::time::Duration,
    read: std::time::Duration,
    open: std::time::Duration,
    send_wait: std::time::Duration,
}

impl WorkerStats {
    fn report(&self) {
        if !gvault_accel::tuning::tuning().read_ahead_stats || self.values == 0 {
            return;
        }
        let per = |d: std::time::Duration| d.as_nanos() as f64 / self.values as f64;
        eprintln!(
            "read-ahead: {} batches, {} values; per value: scout {:.0} ns, reads {:.0} ns, opening {:.0} ns, waiting for the cursor {:.0} ns",
            self.batches,
            self.values,
            per(self.scout),
            per(self.read),
            per(self.open),
            per(self.send_wait)
        );
    }
}

/// Builds the scout's cursor (on the worker).
pub(crate) type ScoutSource = Box<dyn FnOnce() -> Result<MergingIterator> + Send>;

/// One value read ahead; ranges into its batch's buffers.
struct Ahead {
    ikey: Range<usize>,
    /// The entry's stored value: the encoded pointer.
    pointer: Range<usize>,
    value: Result<Range<usize>>,
}

/// How a run of batches ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum End {
    /// The scout reached the end (or damage, which the cursor will meet).
    Exhausted,
    /// Too few value-log values to be worth it (see `SPARSE_BATCH_BYTES`).
    Sparse,
}

/// A batch of values read ahead. Batches go back to the worker once
/// consumed and are refilled: no buffer is allocated on one thread and
/// freed on another (that contended on the allocator's arena locks).
struct Batch {
    generation: u64,
    /// Internal keys and pointers of the entries, back to back.
    keys: Vec<u8>,
    /// The frames, opened; each value lies somewhere in its frame.
    values: Vec<u8>,
    entries: Vec<Ahead>,
    end: Option<End>,
}

impl Batch {
    fn empty() -> Batch {
        Batch {
            generation: 0,
            keys: Vec::new(),
            values: Vec::new(),
            entries: Vec::new(),
            end: None,
        }
    }
}

/// Asks the worker for a run of batches after the entry `from`.
struct Start {
    generation: u64,
    from: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    /// No run: the next value starts one (after `direct` direct reads).
    Idle,
    /// A run of the current generation is under way.
    Running,
    /// The current run ended at the end of the scout's range.
    Exhausted,
}

struct Worker {
    starts: Sender<Start>,
    batches: Receiver<Batch>,
    /// Consumed batches, back to the worker to refill.
    spent: Sender<Batch>,
    handle: JoinHandle<()>,
}

pub(crate) struct ReadAhead {
    /// Shared with the worker: a change tells it to drop its batch.
    generation: Arc<AtomicU64>,
    state: State,
    /// The batch being consumed, and its next entry.
    window: Option<Batch>,
    at: usize,
    /// Entries still to read directly (after a seek, or a sparse batch).
    direct: usize,
    worker: Option<Worker>,
    /// False once the worker could not be started or went away.
    usable: bool,
    /// Values handed out from batches (for tests and diagnostics).
    hits: u64,
}

impl ReadAhead {
    pub fn new() -> Self {
        ReadAhead {
            generation: Arc::new(AtomicU64::new(0)),
            state: State::Idle,
            window: None,
            at: 0,
            direct: WARM_UP,
            worker: None,
            usable: true,
            hits: 0,
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Drops what was read ahead (a seek, a step back, a change of
    /// direction); the worker abandons its batch at its next check.
    pub fn reset(&mut self) {
        if self.state == State::Running {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.state = State::Idle;
        self.recycle();
        self.direct = WARM_UP;
    }

    /// The value of the pointer entry under the user's cursor, whose
    /// internal key is `ikey`; `None` when it was not read ahead (the
    /// caller reads it directly). `scout` builds the worker's cursor on
    /// first use.
    pub fn value(
        &mut self,
        inner: &Arc<DbInner>,
        seq: u64,
        ikey: &[u8],
        pointer: &[u8],
        scout: impl FnOnce() -> ScoutSource,
    ) -> Option<Result<Vec<u8>>> {
        loop {
            if let Some(b) = self.window.as_mut() {
                while let Some(e) = b.entries.get_mut(self.at) {
                    match compare_internal(&b.keys[e.ikey.clone()], ikey) {
                        // The cursor passed it (or it was a hidden version).
                        CmpOrdering::Less => self.at += 1,
                        CmpOrdering::Equal => {
                            self.at += 1;
                            if b.keys[e.pointer.clone()] != *pointer {
                                return None;
                            }
                            self.hits += 1;
                            let value = std::mem::replace(&mut e.value, Ok(0..0));
                            return Some(value.map(|r| b.values[r].to_vec()));
                        }
                        // Not in the scout's stream (asked twice, or skipped).
                        CmpOrdering::Greater => return None,
                    }
                }
            }
            self.recycle();
            match self.state {
                State::Exhausted => return None,
                State::Idle => {
                    if self.direct > 0 {
                        self.direct -= 1;
                    } else {
                        self.start(inner, seq, ikey, scout);
                    }
                    // This entry is read directly while the run starts.
                    return None;
                }
                State::Running => self.receive()?,
            }
        }
    }

    /// Takes the next batch of the current run into the window.
    fn receive(&mut self) -> Option<()> {
        let current = self.generation.load(Ordering::Acquire);
        loop {
            let Some(batch) = self.worker.as_ref().map(|w| w.batches.recv()) else {
                self.state = State::Idle;
                return None;
            };
            let Ok(batch) = batch else {
                // The worker is gone (it cannot be, short of a panic).
                self.usable = false;
                self.state = State::Idle;
                return None;
            };
            if batch.generation != current {
                self.give_back(batch); // built before a seek
                continue;
            }
            let end = batch.end;
            self.window = Some(batch);
            self.at = 0;
            match end {
                None => {}
                Some(End::Exhausted) => self.state = State::Exhausted,
                Some(End::Sparse) => {
                    self.state = State::Idle;
                    self.direct = SPARSE_BACK_OFF;
                }
            }
            return Some(());
        }
    }

    /// Hands the consumed batch back to the worker to refill.
    fn recycle(&mut self) {
        if let Some(b) = self.window.take() {
            self.give_back(b);
        }
        self.at = 0;
    }

    fn give_back(&self, batch: Batch) {
        if let Some(w) = &self.worker {
            // A worker that is gone needs no buffers.
            let _ = w.spent.send(batch);
        }
    }

    /// Starts a run of batches after the entry `ikey`.
    fn start(
        &mut self,
        inner: &Arc<DbInner>,
        seq: u64,
        ikey: &[u8],
        scout: impl FnOnce() -> ScoutSource,
    ) {
        if !self.usable {
            return;
        }
        if self.worker.is_none() {
            match spawn_worker(inner.clone(), seq, scout(), self.generation.clone()) {
                Some(w) => self.worker = Some(w),
                None => {
                    self.usable = false;
                    return;
                }
            }
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        let sent = self.worker.as_ref().map(|w| {
            w.starts.send(Start {
                generation,
                from: ikey.to_vec(),
            })
        });
        if matches!(sent, Some(Ok(()))) {
            self.state = State::Running;
        } else {
            self.usable = false;
        }
    }
}

impl Drop for ReadAhead {
    /// Stops the worker: it drops its batch at its next check, and a send
    /// or a wait for a start fails once the channels are gone. Joined, so
    /// no read of the store outlives the iterator.
    fn drop(&mut self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        if let Some(Worker {
            starts,
            batches,
            spent,
            handle,
        }) = self.worker.take()
        {
            drop(starts);
            drop(batches);
            drop(spent);
            let _ = handle.join();
        }
    }
}

fn spawn_worker(
    inner: Arc<DbInner>,
    seq: u64,
    scout: ScoutSource,
    generation: Arc<AtomicU64>,
) -> Option<Worker> {
    let (starts, start_rx) = mpsc::channel::<Start>();
    // One finished batch queued while the cursor consumes another.
    let (batch_tx, batches) = mpsc::sync_channel::<Batch>(1);
    let (spent, spent_rx) = mpsc::channel::<Batch>();
    let channels = WorkerChannels {
        starts: start_rx,
        out: batch_tx,
        spent: spent_rx,
    };
    let handle = std::thread::Builder::new()
        .name("gvault-read-ahead".into())
        .spawn(move || run_worker(&inner, seq, scout, &generation, &channels))
        .ok()?;
    Some(Worker {
        starts,
        batches,
        spent,
        handle,
    })
}

/// The worker's ends of the channels.
struct WorkerChannels {
    starts: Receiver<Start>,
    out: SyncSender<Batch>,
    spent: Receiver<Batch>,
}

fn run_worker(
    inner: &DbInner,
    seq: u64,
    scout: ScoutSource,
    generation: &AtomicU64,
    ch: &WorkerChannels,
) {
    let mut stats = WorkerStats::default();
    run_batches(inner, seq, scout, generation, ch, &mut stats);
    stats.report();
}

fn run_batches(
    inner: &DbInner,
    seq: u64,
    scout: ScoutSource,
    generation: &AtomicU64,
    ch: &WorkerChannels,
    stats: &mut WorkerStats,
) {
    let (starts, out) = (&ch.starts, &ch.out);
    // The scout's own errors are not reported: the cursor meets the same
    // damage when it gets there, and reads it directly.
    let mut scout = scout().ok();
    'runs: while let Ok(mut start) = starts.recv() {
        while let Ok(newer) = starts.try_recv() {
            start = newer;
        }
        let live = || generation.load(Ordering::Acquire) == start.generation;
        let Some(scout) = scout.as_mut() else {
            let end = Batch {
                generation: start.generation,
                end: Some(End::Exhausted),
                ..Batch::empty()
            };
            if out.send(end).is_err() {
                return;
            }
            continue;
        };
        scout.seek(&start.from);
        if scout.valid() && scout.key() == &start.from[..] {
            scout.next();
        }
        let mut budget = FIRST_BATCH_BYTES;
        loop {
            if !live() {
                continue 'runs;
            }
            // At most four batches exist: one consumed, one queued, one
            // being built, one on its way back.
            let mut batch = ch.spent.try_recv().unwrap_or_else(|_| Batch::empty());
            if !build_batch(inner, seq, scout, budget, &live, &mut batch, stats) {
                continue 'runs;
            }
            batch.generation = start.generation;
            let ended = batch.end.is_some();
            stats.batches += 1;
            stats.values += batch.entries.len() as u64;
            let t = std::time::Instant::now();
            if out.send(batch).is_err() {
                return; // the iterator is gone
            }
            stats.send_wait += t.elapsed();
            if ended {
                continue 'runs;
            }
            budget = (budget * 2).min(MAX_BATCH_BYTES);
        }
    }
}

/// Scouts up to `budget` frame bytes from the scout's position and reads
/// them into `batch` (its buffers reused); false when the run was
/// abandoned meanwhile.
fn build_batch(
    inner: &DbInner,
    seq: u64,
    scout: &mut MergingIterator,
    budget: usize,
    live: &dyn Fn() -> bool,
    batch: &mut Batch,
    stats: &mut WorkerStats,
) -> bool {
    let t = std::time::Instant::now();
    batch.keys.clear();
    batch.entries.clear();
    let mut wanted: Vec<(ValuePointer, Range<usize>)> = Vec::new();
    let (mut bytes, mut scouted) = (0usize, 0usize);
    // At least two values per batch, or a batch of one big value would
    // have nothing to spread over cores.
    while scout.valid()
        && scouted < MAX_SCOUTED
        && wanted.len() < MAX_BATCH_VALUES
        && (bytes < budget || wanted.len() < 2)
    {
        scouted += 1;
        if let Some(p) = parse_internal_key(scout.key()) {
            if p.seq <= seq && p.value_type == ValueType::Pointer {
                // A malformed pointer is left to the cursor to report.
                if let Some(ptr) = ValuePointer::decode(scout.value()) {
                    bytes += ptr.frame.len as usize;
                    let keys = &mut batch.keys;
                    let at = keys.len();
                    keys.extend_from_slice(scout.key());
                    let user_key = at..at + p.user_key.len();
                    let ikey = at..keys.len();
                    keys.extend_from_slice(scout.value());
                    let pointer = ikey.end..keys.len();
                    batch.entries.push(Ahead {
                        ikey,
                        pointer,
                        value: Ok(0..0),
                    });
                    wanted.push((ptr, user_key));
                }
            }
        }
        scout.next();
    }
    batch.end = if !scout.valid() {
        Some(End::Exhausted)
    } else if scouted >= MAX_SCOUTED && bytes < SPARSE_BATCH_BYTES {
        Some(End::Sparse)
    } else {
        None
    };
    if !live() {
        return false;
    }
    let t = {
        stats.scout += t.elapsed();
        std::time::Instant::now()
    };
    let requests: Vec<(ValuePointer, &[u8])> = wanted
        .iter()
        .map(|(p, k)| (*p, &batch.keys[k.clone()]))
        .collect();
    let mut opened_at = t;
    let values = inner
        .vlog
        .read_many(&requests, &mut batch.values, Some(&mut opened_at));
    stats.read += opened_at - t;
    stats.open += opened_at.elapsed();
    drop(requests);
    for (e, v) in batch.entries.iter_mut().zip(values) {
        e.value = v;
    }
    true
}
