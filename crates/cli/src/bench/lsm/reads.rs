//! readrandom and readseq on N threads against a cached, fully compacted
//! store (issue 30: reads that scale with cores). One store per value size
//! and mode is filled, compacted (`compact_range(None, None)`, then the
//! background work settles), measured for space, closed and opened again
//! (the compaction's reads leave the replaced tables' blocks in the block
//! cache), warmed by one untimed scan (block cache and page cache), and
//! then serves every (workload, thread count) of the run in turn, so that
//! each thread count reads the same files from the same caches.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use gvault_store::{Options, ReadOptions, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::data::{
    process_cpu_secs, settle, write_back_dirty_pages, Keys, StoreFiles, ThreadProbe, ThreadTimes,
    Values,
};
use super::encrypt::Backends;
use super::workloads::{fill, get, Case, Outcome, Workload};

/// Operations between two looks at the clock and the stop flag.
const CHECK_EVERY: u64 = 16;

/// The store after the fill and the full compaction.
#[derive(Clone, Debug, Default)]
pub struct Space {
    /// Key + value bytes the fill wrote, each key once.
    pub live_bytes: u64,
    /// The files in the store's directory, by kind, while it is open.
    pub files: StoreFiles,
    /// Bytes of the tables and value-log files the store's current
    /// version holds (files on disk beyond these await deletion).
    pub version_table_bytes: u64,
    pub version_vlog_bytes: u64,
    /// Bytes of the store's files once it was closed and opened again.
    pub reopened_bytes: u64,
    pub fill_secs: f64,
    /// `compact_range(None, None)` until background work settled.
    pub compact_secs: f64,
    /// Block cache bytes in use after the warm-up scan of the reopened
    /// store: the live tables' blocks, decoded.
    pub cache_used_bytes: usize,
}

/// Fills one store for `cases` (all of one value size, count, cache and
/// mode: `Case::same_store`), compacts it, measures its space, opens it
/// again (so the block cache holds no blocks of the tables the compaction
/// replaced), warms it, and runs each case's timed part on it, in order;
/// the store is removed afterwards.
pub fn run(
    base: &Path,
    cases: &[&Case],
    run: usize,
    backends: &Backends,
) -> Result<(Space, Vec<Outcome>), String> {
    let first = *cases.first().ok_or("no read workloads to run")?;
    if let Some(c) = cases
        .iter()
        .find(|c| !c.same_store(first) || c.encrypt != first.encrypt)
    {
        return Err(format!(
            "{} ({} bytes, encrypt {}) cannot share a store with {} ({} bytes, encrypt {})",
            c.workload.name(),
            c.value_bytes,
            c.encrypt.name(),
            first.workload.name(),
            first.value_bytes,
            first.encrypt.name()
        ));
    }
    let dir = base.join(format!(
        "reads-{}-{}-{run}",
        first.value_bytes,
        first.encrypt.name()
    ));
    // One set of options for both opens: an encrypted store's master key.
    let result = fill_then_read(&dir, first.options(backends), cases);
    let removed =
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()));
    let out = result?;
    removed?;
    Ok(out)
}

fn fill_then_read(
    dir: &Path,
    opts: Options,
    cases: &[&Case],
) -> Result<(Space, Vec<Outcome>), String> {
    let open = |opts: Options| {
        Store::open(dir, opts).map_err(|e| format!("opening a store in {}: {e}", dir.display()))
    };
    let first = cases[0];
    let mut values = Values::new(first.value_bytes)?;
    let store = open(opts.clone())?;
    let filled = fill_and_compact(&store, dir, first, &mut values);
    let closed = store.close().map_err(|e| format!("closing the store: {e}"));
    let mut space = filled?;
    closed?;
    space.reopened_bytes = StoreFiles::of(dir)?.total();

    let store = open(opts)?;
    let read = warm_and_read(&store, cases, &values, &mut space);
    let closed = store
        .close()
        .map_err(|e| format!("closing the reopened store: {e}"));
    let outcomes = read?;
    closed?;
    Ok((space, outcomes))
}

/// Fills every key once in random order, compacts the whole key range and
/// waits for background work; the space it then takes.
fn fill_and_compact(
    store: &Store,
    dir: &Path,
    case: &Case,
    values: &mut Values,
) -> Result<Space, String> {
    let num = case.num;
    let mut rng = StdRng::seed_from_u64(0xdb_be4c);
    let t = Instant::now();
    fill(store, &Keys::Decimal16, values, num, &mut rng)?;
    store.flush().map_err(|e| format!("flush: {e}"))?;
    let fill_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    store
        .compact_range(None, None)
        .map_err(|e| format!("compact_range: {e}"))?;
    settle(store)?;
    let compact_secs = t.elapsed().as_secs_f64();
    let st = store.stats();
    if gvault_accel::tuning::tuning().bench_shape {
        eprintln!(
            "reads {} B {}: levels {:?}, value log {} files {} bytes",
            case.value_bytes,
            case.encrypt.name(),
            st.levels,
            st.vlog_files,
            st.vlog_bytes
        );
    }
    Ok(Space {
        live_bytes: num * (16 + case.value_bytes as u64),
        files: StoreFiles::of(dir)?,
        version_table_bytes: st.levels.iter().map(|l| l.1).sum(),
        version_vlog_bytes: st.vlog_bytes,
        reopened_bytes: 0,
        fill_secs,
        compact_secs,
        cache_used_bytes: 0,
    })
}

/// One untimed scan of everything (every data block into the block cache,
/// every value-log page into the page cache), then each case's timed part.
fn warm_and_read(
    store: &Store,
    cases: &[&Case],
    values: &Values,
    space: &mut Space,
) -> Result<Vec<Outcome>, String> {
    let num = cases[0].num;
    write_back_dirty_pages();
    let (seen, _) = scan(store, values, 0, num, None, &AtomicBool::new(false))?;
    if seen != num {
        return Err(format!("the warm-up scan saw {seen} of {num} entries"));
    }
    space.cache_used_bytes = store.stats().block_cache_bytes;
    let mut outcomes = Vec::with_capacity(cases.len());
    for case in cases {
        outcomes.push(
            timed(store, case, values).map_err(|e| {
                format!("{} on {} threads: {e}", case.workload.name(), case.threads)
            })?,
        );
    }
    Ok(outcomes)
}

/// Lets the workers go together once all are ready, or tells them to quit.
struct Gate {
    state: Mutex<(usize, Option<bool>)>,
    cv: Condvar,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            state: Mutex::new((0, None)),
            cv: Condvar::new(),
        }
    }

    /// A worker: ready; waits for the verdict (true: go).
    fn arrive(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        loop {
            if let Some(go) = s.1 {
                return go;
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The timer: waits until `workers` are ready.
    fn wait_ready(&self, workers: usize) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while s.0 < workers {
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The verdict for every worker, waiting or still to come.
    fn decide(&self, go: bool) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.1 = Some(go);
        self.cv.notify_all();
    }
}

/// Thread `t` of `threads`'s share of `total` operations.
pub fn share(total: u64, threads: usize, t: usize) -> u64 {
    let n = threads as u64;
    total / n + u64::from((t as u64) < total % n)
}

/// Thread `t` of `threads`'s key-index range [lo, hi) of `num` entries:
/// contiguous, disjoint, together all of 0..num.
pub fn range(num: u64, threads: usize, t: usize) -> (u64, u64) {
    let at = |i: usize| (num as u128 * i as u128 / threads as u128) as u64;
    (at(t), at(t + 1))
}

/// One timed part: `case.threads` workers start together; readrandom
/// threads each do their share of the gets (or get until the deadline),
/// readseq threads each scan their own key range (over and over until the
/// deadline).
fn timed(store: &Store, case: &Case, values: &Values) -> Result<Outcome, String> {
    let threads = case.threads.max(1);
    let num = case.num;
    let total = match case.workload {
        Workload::ReadRandom => case.reads.unwrap_or(num),
        _ => num,
    };
    let keys = Keys::Decimal16;
    let gate = Gate::new();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let mut workers = Vec::with_capacity(threads);
        for t in 0..threads {
            let (keys, gate, stop) = (&keys, &gate, &stop);
            let worker = move || {
                if !gate.arrive() {
                    return Ok((0, 0, ThreadTimes::default()));
                }
                let probe = ThreadProbe::start();
                let deadline = case.duration.map(|d| Instant::now() + d);
                let r = match case.workload {
                    Workload::ReadRandom => random_gets(
                        store,
                        keys,
                        values,
                        num,
                        share(total, threads, t),
                        t as u64,
                        deadline,
                        stop,
                    ),
                    _ => {
                        let (lo, hi) = range(num, threads, t);
                        scan(store, values, lo, hi, deadline, stop)
                    }
                };
                if r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                r.map(|(ops, bytes)| (ops, bytes, probe.finish()))
            };
            match std::thread::Builder::new()
                .name(format!("bench-reader-{t}"))
                .spawn_scoped(s, worker)
            {
                Ok(h) => workers.push(h),
                Err(e) => {
                    gate.decide(false);
                    return Err(format!("starting reader thread {t}: {e}"));
                }
            }
        }
        gate.wait_ready(threads);
        // The clocks start before the first worker can: every worker's
        // time lies within the run's.
        let cpu0 = process_cpu_secs();
        let start = Instant::now();
        gate.decide(true);
        let mut out = Outcome::default();
        let mut times = Vec::with_capacity(threads);
        let mut first_err = None;
        for w in workers {
            match w.join() {
                Ok(Ok((ops, bytes, t))) => {
                    out.ops += ops;
                    out.bytes_read += bytes;
                    times.push(t);
                }
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some("a reader thread panicked".into())),
            }
        }
        out.secs = start.elapsed().as_secs_f64();
        out.process_cpu_secs = cpu0.zip(process_cpu_secs()).map(|(a, b)| b - a);
        out.workers = ThreadTimes::sum(times);
        match first_err {
            Some(e) => Err(e),
            None if out.ops == 0 => Err("the readers completed no operation".into()),
            None => Ok(out),
        }
    })
}

fn should_stop(deadline: Option<Instant>, stop: &AtomicBool) -> bool {
    stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d)
}

/// `share` random gets (or gets until `deadline`); (ops, value bytes).
#[allow(clippy::too_many_arguments)]
fn random_gets(
    store: &Store,
    keys: &Keys,
    values: &Values,
    num: u64,
    share: u64,
    thread: u64,
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Result<(u64, u64), String> {
    let mut rng = StdRng::seed_from_u64(0x4ead_0000 + thread);
    let (mut ops, mut bytes) = (0u64, 0u64);
    while deadline.is_some() || ops < share {
        if ops % CHECK_EVERY == 0 && should_stop(deadline, stop) {
            break;
        }
        bytes += get(store, keys, values, rng.gen_range(0..num))?;
        ops += 1;
    }
    Ok((ops, bytes))
}

/// Scans key indices [lo, hi) forward with one iterator, checking that
/// every entry comes, in order, with its value; with a deadline, scans the
/// range again and again until it passes. (ops, key + value bytes).
fn scan(
    store: &Store,
    values: &Values,
    lo: u64,
    hi: u64,
    deadline: Option<Instant>,
    stop: &AtomicBool,
) -> Result<(u64, u64), String> {
    if lo >= hi {
        return Ok((0, 0));
    }
    let keys = Keys::Decimal16;
    let mut it = store
        .iter(&ReadOptions::default())
        .map_err(|e| format!("iterator: {e}"))?;
    let (mut ops, mut bytes) = (0u64, 0u64);
    loop {
        it.seek(keys.key(lo).as_ref());
        let mut want = lo;
        while it.valid() {
            let index = std::str::from_utf8(it.key())
                .ok()
                .and_then(|k| k.parse::<u64>().ok())
                .ok_or_else(|| format!("unexpected key {:?}", it.key()))?;
            if index != want {
                return Err(format!(
                    "iterator gave key index {index} where {want} was due"
                ));
            }
            let v = it
                .value_pinned()
                .map_err(|e| format!("iterator value: {e}"))?;
            values.check(index, &v)?;
            bytes += (it.key().len() + v.len()) as u64;
            ops += 1;
            want += 1;
            if want == hi {
                break;
            }
            if ops % CHECK_EVERY == 0 && should_stop(deadline, stop) {
                return Ok((ops, bytes));
            }
            it.next();
        }
        it.status().map_err(|e| format!("iterator: {e}"))?;
        if want != hi {
            return Err(format!(
                "iterator ended at key index {want}; the range {lo}..{hi} is in the store"
            ));
        }
        if deadline.is_none() || should_stop(deadline, stop) {
            return Ok((ops, bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_ranges_cover_the_work_once() {
        for (total, threads) in [(10u64, 3usize), (2, 5), (1_000_003, 16), (0, 2)] {
            let shares: Vec<u64> = (0..threads).map(|t| share(total, threads, t)).collect();
            assert_eq!(shares.iter().sum::<u64>(), total, "{total} {threads}");
            let (lo, hi) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(hi - lo <= 1, "even shares: {shares:?}");
            let ranges: Vec<(u64, u64)> = (0..threads).map(|t| range(total, threads, t)).collect();
            assert_eq!(ranges[0].0, 0);
            assert_eq!(ranges[threads - 1].1, total);
            for w in ranges.windows(2) {
                assert_eq!(w[0].1, w[1].0, "contiguous: {ranges:?}");
            }
            assert!(ranges.iter().all(|(a, b)| a <= b), "{ranges:?}");
        }
        assert_eq!(range(u64::MAX / 2, 1024, 1023).1, u64::MAX / 2);
    }
}
