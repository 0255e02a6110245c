//! One run of one workload in a fresh store: db_bench's fillseq,
//! fillrandom, overwrite, readwhilewriting, and seed 000 §4.5's insert,
//! search and remove (readrandom and readseq: `reads`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gvault_store::{Options, ReadOptions, Store, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::data::{
    process_bytes_written, process_cpu_secs, settle, write_back_dirty_pages, Keys, ThreadProbe,
    ThreadTimes, Values,
};
use super::encrypt::{Backends, Encrypt};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    FillSeq,
    FillRandom,
    Overwrite,
    ReadRandom,
    ReadSeq,
    ReadWhileWriting,
    SeedInsert,
    SeedSearch,
    SeedRemove,
}

impl Workload {
    pub const ALL: [Workload; 9] = [
        Workload::FillSeq,
        Workload::FillRandom,
        Workload::Overwrite,
        Workload::ReadRandom,
        Workload::ReadSeq,
        Workload::ReadWhileWriting,
        Workload::SeedInsert,
        Workload::SeedSearch,
        Workload::SeedRemove,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::FillSeq => "fillseq",
            Workload::FillRandom => "fillrandom",
            Workload::Overwrite => "overwrite",
            Workload::ReadRandom => "readrandom",
            Workload::ReadSeq => "readseq",
            Workload::ReadWhileWriting => "readwhilewriting",
            Workload::SeedInsert => "seed000-insert",
            Workload::SeedSearch => "seed000-search",
            Workload::SeedRemove => "seed000-remove",
        }
    }

    pub fn is_seed000(self) -> bool {
        matches!(
            self,
            Workload::SeedInsert | Workload::SeedSearch | Workload::SeedRemove
        )
    }

    /// Workloads whose timed part writes nothing: `--sync` does not apply.
    pub fn is_read_only(self) -> bool {
        matches!(
            self,
            Workload::ReadRandom | Workload::ReadSeq | Workload::SeedSearch
        )
    }

    /// readrandom and readseq: run on N threads against one filled, fully
    /// compacted store per value size and mode (`reads`).
    pub fn is_scaling(self) -> bool {
        matches!(self, Workload::ReadRandom | Workload::ReadSeq)
    }

    /// Workloads that run on `--threads` threads.
    pub fn is_threaded(self) -> bool {
        self.is_scaling() || self == Workload::ReadWhileWriting
    }
}

pub struct Case {
    pub workload: Workload,
    /// Value (db_bench) or object (seed 000) size in bytes.
    pub value_bytes: usize,
    /// None for read-only workloads.
    pub sync: Option<bool>,
    /// Entries written or read in the timed part (readwhilewriting: reads
    /// over all reader threads).
    pub num: u64,
    /// readrandom: timed gets over the `num` entries (db_bench --reads);
    /// None: `num`.
    pub reads: Option<u64>,
    /// Worker threads: readrandom and readseq split their work between
    /// them; readwhilewriting's readers. 1 elsewhere.
    pub threads: usize,
    pub encrypt: Encrypt,
    /// The stores' block cache budget; None: the store's default.
    pub cache_bytes: Option<usize>,
    /// readrandom and readseq: each thread works until this much time has
    /// passed instead of doing its share of a count.
    pub duration: Option<Duration>,
}

impl Case {
    /// Same workload, size, count and sync: the cases that differ only in
    /// their encryption mode, whose runs take turns.
    pub fn same_cell(&self, other: &Case) -> bool {
        (
            self.workload,
            self.value_bytes,
            self.sync,
            self.num,
            self.reads,
            self.threads,
        ) == (
            other.workload,
            other.value_bytes,
            other.sync,
            other.num,
            other.reads,
            other.threads,
        )
    }

    /// readrandom and readseq cases that can share one filled store: same
    /// value size, entry count and cache (any workload, threads, mode).
    pub fn same_store(&self, other: &Case) -> bool {
        self.workload.is_scaling()
            && other.workload.is_scaling()
            && (self.value_bytes, self.num, self.cache_bytes)
                == (other.value_bytes, other.num, other.cache_bytes)
    }

    /// Store options of the case's mode, with its cache budget.
    pub fn options(&self, backends: &Backends) -> Options {
        let base = backends.options(self.encrypt);
        Options {
            block_cache_bytes: self.cache_bytes.unwrap_or(base.block_cache_bytes),
            ..base
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub ops: u64,
    pub secs: f64,
    /// Key + value bytes the timed part asked the store to write.
    pub user_bytes_written: u64,
    /// Bytes the timed part got back (values for gets, keys + values for
    /// the iterator).
    pub bytes_read: u64,
    /// `wchar` growth from the start of the timed part until background
    /// work settled; None where the counter is not available.
    pub process_bytes_written: Option<u64>,
    /// readwhilewriting: puts the writer completed while readers ran.
    pub writer_ops: Option<u64>,
    /// The working threads' times, summed: the timing thread of a
    /// single-threaded workload, the readers of readrandom, readseq and
    /// readwhilewriting.
    pub workers: ThreadTimes,
    /// CPU seconds of the whole process over the timed part (background
    /// flushes and compactions, read-ahead workers, a writer included).
    pub process_cpu_secs: Option<f64>,
}

/// Runs `case` once in a fresh store under `base`, deleted afterwards.
pub fn run_case(
    base: &Path,
    case: &Case,
    run: usize,
    backends: &Backends,
) -> Result<Outcome, String> {
    let dir = base.join(format!(
        "{}-{}-{}-{}-{run}",
        case.workload.name(),
        case.value_bytes,
        case.encrypt.name(),
        match case.sync {
            Some(true) => "sync",
            Some(false) => "nosync",
            None => "read",
        }
    ));
    let store = Store::open(&dir, case.options(backends))
        .map_err(|e| format!("opening a store in {}: {e}", dir.display()))?;
    let result = run_in(&store, case);
    let closed = store.close().map_err(|e| format!("closing the store: {e}"));
    let removed =
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()));
    let outcome = result?;
    closed?;
    removed?;
    Ok(outcome)
}

fn run_in(store: &Store, case: &Case) -> Result<Outcome, String> {
    let num = case.num;
    let keys = if case.workload.is_seed000() {
        Keys::random64(num as usize, 0x5eed_0000)
    } else {
        Keys::Decimal16
    };
    let mut values = Values::new(case.value_bytes)?;
    let wopts = WriteOptions {
        sync: case.sync.unwrap_or(false),
    };
    let mut rng = StdRng::seed_from_u64(0xdb_be4c);
    let key_len = keys.key(0).as_ref().len() as u64;
    let entry = key_len + case.value_bytes as u64;
    let put = |values: &mut Values, i: u64, generation: u64| {
        store
            .put_opt(&wopts, keys.key(i), values.make(i, generation))
            .map_err(|e| format!("put: {e}"))
    };

    if !matches!(
        case.workload,
        Workload::FillSeq | Workload::FillRandom | Workload::SeedInsert
    ) {
        fill(store, &keys, &mut values, num, &mut rng)?;
        settle(store)?;
    }
    if gvault_accel::tuning::tuning().bench_shape {
        let st = store.stats();
        eprintln!(
            "{} {}: levels {:?}, block cache {} bytes",
            case.workload.name(),
            case.encrypt.name(),
            st.levels,
            st.block_cache_bytes
        );
    }
    write_back_dirty_pages();
    let w0 = process_bytes_written();
    let cpu0 = process_cpu_secs();
    let probe = ThreadProbe::start();
    let start = Instant::now();
    let mut out = Outcome {
        ops: num,
        ..Outcome::default()
    };
    match case.workload {
        Workload::FillSeq | Workload::SeedInsert => {
            for i in 0..num {
                put(&mut values, i, 0)?;
            }
            out.user_bytes_written = num * entry;
        }
        Workload::FillRandom => {
            for _ in 0..num {
                put(&mut values, rng.gen_range(0..num), 0)?;
            }
            out.user_bytes_written = num * entry;
        }
        Workload::Overwrite => {
            for _ in 0..num {
                put(&mut values, rng.gen_range(0..num), 1)?;
            }
            out.user_bytes_written = num * entry;
        }
        Workload::SeedSearch => {
            for i in shuffled(num, &mut rng) {
                out.bytes_read += get(store, &keys, &values, i)?;
            }
        }
        Workload::SeedRemove => {
            for i in shuffled(num, &mut rng) {
                store
                    .delete_opt(&wopts, keys.key(i))
                    .map_err(|e| format!("delete: {e}"))?;
            }
            out.user_bytes_written = num * key_len;
        }
        Workload::ReadRandom | Workload::ReadSeq => {
            return Err(format!(
                "{} runs through the read benchmark of a compacted store",
                case.workload.name()
            ))
        }
        Workload::ReadWhileWriting => read_while_writing(store, case, &keys, &values, &mut out)?,
    }
    out.secs = start.elapsed().as_secs_f64();
    out.process_cpu_secs = cpu0.zip(process_cpu_secs()).map(|(a, b)| b - a);
    let main = probe.finish();
    if case.workload != Workload::ReadWhileWriting {
        out.workers = main;
    }
    if out.user_bytes_written > 0 {
        settle(store)?;
        out.process_bytes_written = match (w0, process_bytes_written()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
    }
    Ok(out)
}

/// Untimed fill: every key 0..num once, in random order, in ~1 MiB batches.
pub fn fill(
    store: &Store,
    keys: &Keys,
    values: &mut Values,
    num: u64,
    rng: &mut StdRng,
) -> Result<(), String> {
    let mut batch = WriteBatch::new();
    for i in shuffled(num, rng) {
        batch.put(keys.key(i), values.make(i, 0));
        if batch.approximate_bytes() >= 1 << 20 {
            store
                .write(&WriteOptions::default(), std::mem::take(&mut batch))
                .map_err(|e| format!("fill: {e}"))?;
        }
    }
    if !batch.is_empty() {
        store
            .write(&WriteOptions::default(), batch)
            .map_err(|e| format!("fill: {e}"))?;
    }
    Ok(())
}

fn shuffled(num: u64, rng: &mut StdRng) -> Vec<u64> {
    let mut v: Vec<u64> = (0..num).collect();
    v.shuffle(rng);
    v
}

/// Gets key `i`, which must exist, checks its value; returns its length.
/// The value is pinned where the store holds it (db_bench reads into a
/// `PinnableSlice`), not copied.
pub fn get(store: &Store, keys: &Keys, values: &Values, i: u64) -> Result<u64, String> {
    match store
        .get_pinned(&ReadOptions::default(), keys.key(i))
        .map_err(|e| format!("get: {e}"))?
    {
        Some(v) => {
            values.check(i, &v)?;
            Ok(v.len() as u64)
        }
        None => Err(format!("key index {i} is missing from the store")),
    }
}

/// `threads` readers split `num` random gets between them while one writer
/// overwrites random keys until the last reader is done (db_bench reports
/// the readers; the writer's puts are counted separately).
fn read_while_writing(
    store: &Store,
    case: &Case,
    keys: &Keys,
    values: &Values,
    out: &mut Outcome,
) -> Result<(), String> {
    let num = case.num;
    let threads = case.threads.max(1) as u64;
    let stop = AtomicBool::new(false);
    let wopts = WriteOptions {
        sync: case.sync.unwrap_or(false),
    };
    let mut writer_values = Values::new(case.value_bytes)?;
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut rng = StdRng::seed_from_u64(0x5717e);
            let mut puts = 0u64;
            // At least one put, even when the readers finish before this
            // thread is first scheduled (tiny runs on a loaded machine).
            loop {
                let i = rng.gen_range(0..num);
                store
                    .put_opt(&wopts, keys.key(i), writer_values.make(i, puts + 1))
                    .map_err(|e| format!("writer put: {e}"))?;
                puts += 1;
                if stop.load(Ordering::Relaxed) {
                    break;
                }
            }
            Ok::<u64, String>(puts)
        });
        let readers: Vec<_> = (0..threads)
            .map(|t| {
                let share = num / threads + u64::from(t < num % threads);
                s.spawn(move || {
                    let probe = ThreadProbe::start();
                    let mut rng = StdRng::seed_from_u64(0x4ead + t);
                    let mut bytes = 0u64;
                    for _ in 0..share {
                        bytes += get(store, keys, values, rng.gen_range(0..num))?;
                    }
                    Ok::<_, String>((bytes, probe.finish()))
                })
            })
            .collect();
        let mut first_err = None;
        let mut times = Vec::with_capacity(readers.len());
        for r in readers {
            match r
                .join()
                .map_err(|_| "a reader thread panicked".to_string())?
            {
                Ok((b, t)) => {
                    out.bytes_read += b;
                    times.push(t);
                }
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        out.workers = ThreadTimes::sum(times);
        stop.store(true, Ordering::Relaxed);
        let puts = writer
            .join()
            .map_err(|_| "the writer thread panicked".to_string())??;
        out.writer_ops = Some(puts);
        out.user_bytes_written = puts * (keys.key(0).as_ref().len() + case.value_bytes) as u64;
        first_err.map_or(Ok(()), Err)
    })
}
