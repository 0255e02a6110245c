//! One run of one workload in a fresh store: db_bench's fillseq,
//! fillrandom, overwrite, readrandom, readseq, readwhilewriting, and seed
//! 000 §4.5's insert, search and remove.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gvault_store::{ReadOptions, Store, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::data::{
    process_bytes_written, settle, thread_sched_secs, write_back_dirty_pages, Keys, Values,
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
    pub threads: usize,
    pub encrypt: Encrypt,
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
    /// The timed thread's seconds on a CPU and queued for one (see
    /// `thread_sched_secs`).
    pub thread_sched: Option<(f64, f64)>,
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
    let store = Store::open(&dir, backends.options(case.encrypt))
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
    if std::env::var_os("GVAULT_BENCH_SHAPE").is_some() {
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
    let sched0 = thread_sched_secs();
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
        Workload::ReadRandom => {
            let reads = case.reads.unwrap_or(num);
            out.ops = reads;
            for _ in 0..reads {
                out.bytes_read += get(store, &keys, &values, rng.gen_range(0..num))?;
            }
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
        Workload::ReadSeq => out.bytes_read = read_seq(store, &values, num)?,
        Workload::ReadWhileWriting => read_while_writing(store, case, &keys, &values, &mut out)?,
    }
    out.secs = start.elapsed().as_secs_f64();
    out.thread_sched = match (sched0, thread_sched_secs()) {
        (Some(a), Some(b)) => Some((b.0 - a.0, b.1 - a.1)),
        _ => None,
    };
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
fn fill(
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
fn get(store: &Store, keys: &Keys, values: &Values, i: u64) -> Result<u64, String> {
    match store.get(keys.key(i)).map_err(|e| format!("get: {e}"))? {
        Some(v) => {
            values.check(i, &v)?;
            Ok(v.len() as u64)
        }
        None => Err(format!("key index {i} is missing from the store")),
    }
}

/// Iterates the whole store forward, checking every entry is in order.
fn read_seq(store: &Store, values: &Values, num: u64) -> Result<u64, String> {
    let mut it = store
        .iter(&ReadOptions::default())
        .map_err(|e| format!("iterator: {e}"))?;
    it.seek_to_first();
    let (mut seen, mut bytes) = (0u64, 0u64);
    while it.valid() {
        let index = std::str::from_utf8(it.key())
            .ok()
            .and_then(|k| k.parse::<u64>().ok())
            .ok_or_else(|| format!("unexpected key {:?}", it.key()))?;
        if index != seen {
            return Err(format!(
                "iterator gave key index {index} where {seen} was due"
            ));
        }
        let v = it.value().map_err(|e| format!("iterator value: {e}"))?;
        values.check(index, &v)?;
        bytes += (it.key().len() + v.len()) as u64;
        seen += 1;
        it.next();
    }
    it.status().map_err(|e| format!("iterator: {e}"))?;
    if seen != num {
        return Err(format!("iterator gave {seen} entries, the store has {num}"));
    }
    Ok(bytes)
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
                    let mut rng = StdRng::seed_from_u64(0x4ead + t);
                    let mut bytes = 0u64;
                    for _ in 0..share {
                        bytes += get(store, keys, values, rng.gen_range(0..num))?;
                    }
                    Ok::<u64, String>(bytes)
                })
            })
            .collect();
        let mut first_err = None;
        for r in readers {
            match r
                .join()
                .map_err(|_| "a reader thread panicked".to_string())?
            {
                Ok(b) => out.bytes_read += b,
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let puts = writer
            .join()
            .map_err(|_| "the writer thread panicked".to_string())??;
        out.writer_ops = Some(puts);
        out.user_bytes_written = puts * (keys.key(0).as_ref().len() + case.value_bytes) as u64;
        first_err.map_or(Ok(()), Err)
    })
}
