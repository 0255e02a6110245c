//! What the LSM benchmark writes and how it checks what it reads back:
//! keys (db_bench's 16-byte decimal keys, or seed 000's random 64-bit
//! keys), self-describing values, and the process's write counter.

use std::path::Path;
use std::time::{Duration, Instant};

use gvault_store::Store;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// Bytes of the header every value starts with: key index, generation.
pub const VALUE_HEADER: usize = 16;
/// Payloads start at one of this many offsets into the random pool.
const POOL_WINDOW: usize = 64 << 10;

/// The keys of one workload.
pub enum Keys {
    /// db_bench: `format!("{:016}", i)`, so key order is index order.
    Decimal16,
    /// Seed 000 §4.5: random 64-bit keys (the seed's key-value pair is 128
    /// bits: a 64-bit key and a 64-bit object pointer), big-endian.
    Random64(Vec<u64>),
}

impl Keys {
    /// `n` distinct random 64-bit keys, reproducible from `seed`.
    pub fn random64(n: usize, seed: u64) -> Keys {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen = std::collections::HashSet::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        while keys.len() < n {
            let k = rng.next_u64();
            if seen.insert(k) {
                keys.push(k);
            }
        }
        Keys::Random64(keys)
    }

    pub fn key(&self, i: u64) -> KeyBuf {
        let mut b = KeyBuf {
            bytes: [0; 16],
            len: 16,
        };
        match self {
            Keys::Decimal16 => {
                // The last 16 digits of `i`, written in place: no allocation
                // per key in the readers' loops.
                let mut n = i;
                for d in b.bytes.iter_mut().rev() {
                    *d = b'0' + (n % 10) as u8;
                    n /= 10;
                }
            }
            Keys::Random64(keys) => {
                b.bytes[..8].copy_from_slice(&keys[i as usize].to_be_bytes());
                b.len = 8;
            }
        }
        b
    }
}

pub struct KeyBuf {
    bytes: [u8; 16],
    len: usize,
}

impl AsRef<[u8]> for KeyBuf {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Values of one size: `[key index u64][generation u64][payload]`, the
/// payload a slice of a random pool at an offset fixed by (index,
/// generation), so a reader can check any value it gets without a model.
pub struct Values {
    pub size: usize,
    pool: Vec<u8>,
    buf: Vec<u8>,
}

impl Values {
    pub fn new(size: usize) -> Result<Values, String> {
        if size < VALUE_HEADER {
            return Err(format!(
                "value size {size} is below the {VALUE_HEADER}-byte header every benchmark value carries"
            ));
        }
        let mut pool = vec![0u8; size - VALUE_HEADER + POOL_WINDOW];
        StdRng::seed_from_u64(0x6776_6175_6c74).fill_bytes(&mut pool);
        Ok(Values {
            size,
            pool,
            buf: vec![0; size],
        })
    }

    fn payload(&self, index: u64, generation: u64) -> &[u8] {
        let off = (mix(index ^ generation.rotate_left(32)) % POOL_WINDOW as u64) as usize;
        &self.pool[off..off + self.size - VALUE_HEADER]
    }

    /// The value of `index` at `generation` (valid until the next call).
    pub fn make(&mut self, index: u64, generation: u64) -> &[u8] {
        let off = (mix(index ^ generation.rotate_left(32)) % POOL_WINDOW as u64) as usize;
        self.buf[..8].copy_from_slice(&index.to_le_bytes());
        self.buf[8..16].copy_from_slice(&generation.to_le_bytes());
        self.buf[VALUE_HEADER..].copy_from_slice(&self.pool[off..off + self.size - VALUE_HEADER]);
        &self.buf
    }

    /// Checks that `v` is a value this generator made for `index` (any
    /// generation); a mismatch is a store bug, reported as an error.
    pub fn check(&self, index: u64, v: &[u8]) -> Result<(), String> {
        if v.len() != self.size {
            return Err(format!(
                "key index {index}: value is {} bytes, wrote {}",
                v.len(),
                self.size
            ));
        }
        let got = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
        if got != index {
            return Err(format!(
                "key index {index}: got the value of key index {got}"
            ));
        }
        let generation = u64::from_le_bytes(v[8..16].try_into().expect("8 bytes"));
        if v[VALUE_HEADER..] != *self.payload(index, generation) {
            return Err(format!(
                "key index {index}: value payload differs from what was written"
            ));
        }
        Ok(())
    }
}

/// splitmix64's finaliser: spreads (index, generation) over the pool.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Bytes this process has passed to write(2) and friends so far (Linux
/// `/proc/self/io` `wchar`, every thread included); None elsewhere.
pub fn process_bytes_written() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// This thread's time on a CPU and waiting for one (runnable, queued), in
/// seconds, from the scheduler's statistics; None where they are not
/// available. Wall time above the two is time the thread slept (locks,
/// I/O, hand-offs to other threads).
pub fn thread_sched_secs() -> Option<(f64, f64)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut f = s.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (run, wait) = (f.next()??, f.next()??);
    Some((run as f64 / 1e9, wait as f64 / 1e9))
}

/// What a thread did over a stretch of time: its wall time and, where
/// the kernel reports them, its time on a CPU, queued for one, and its
/// voluntary (it blocked) and involuntary (it was preempted) context
/// switches. Summed over the worker threads of one timed part.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadTimes {
    pub wall_secs: f64,
    /// (on a CPU, runnable but queued) seconds.
    pub sched: Option<(f64, f64)>,
    /// (voluntary, involuntary) context switches.
    pub switches: Option<(u64, u64)>,
}

impl ThreadTimes {
    /// The sum over threads (none: all zero, figures lacking).
    pub fn sum(times: impl IntoIterator<Item = ThreadTimes>) -> ThreadTimes {
        times
            .into_iter()
            .reduce(ThreadTimes::add)
            .unwrap_or_default()
    }

    /// The sum of two threads' times; a figure one of them lacks is lacking.
    pub fn add(self, o: ThreadTimes) -> ThreadTimes {
        ThreadTimes {
            wall_secs: self.wall_secs + o.wall_secs,
            sched: self.sched.zip(o.sched).map(|(a, b)| (a.0 + b.0, a.1 + b.1)),
            switches: self
                .switches
                .zip(o.switches)
                .map(|(a, b)| (a.0 + b.0, a.1 + b.1)),
        }
    }
}

/// Started on the thread it measures; `finish` on the same thread.
pub struct ThreadProbe {
    start: Instant,
    sched: Option<(f64, f64)>,
    switches: Option<(u64, u64)>,
}

impl ThreadProbe {
    pub fn start() -> ThreadProbe {
        ThreadProbe {
            sched: thread_cpu_and_queued_secs(),
            switches: thread_switches(),
            start: Instant::now(),
        }
    }

    pub fn finish(self) -> ThreadTimes {
        let wall_secs = self.start.elapsed().as_secs_f64();
        ThreadTimes {
            wall_secs,
            sched: self
                .sched
                .zip(thread_cpu_and_queued_secs())
                .map(|(a, b)| (b.0 - a.0, b.1 - a.1)),
            switches: self
                .switches
                .zip(thread_switches())
                .map(|(a, b)| (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
        }
    }
}

/// This thread's CPU time, to the nanosecond (`CLOCK_THREAD_CPUTIME_ID`:
/// schedstat's run time is brought up to date only at scheduler events,
/// so a short run on a CPU reads as none), and its time queued for a CPU
/// (schedstat), in seconds.
fn thread_cpu_and_queued_secs() -> Option<(f64, f64)> {
    // SAFETY: clock_gettime writes one `timespec` into the zeroed struct.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let cpu = ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9;
    Some((cpu, thread_sched_secs()?.1))
}

/// This thread's (voluntary, involuntary) context switches so far, from
/// `/proc/thread-self/status`; None where it is not available.
pub fn thread_switches() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/status").ok()?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((
        field("voluntary_ctxt_switches:")?,
        field("nonvoluntary_ctxt_switches:")?,
    ))
}

/// CPU seconds (user + system) of every thread of this process so far,
/// exited ones included (`getrusage(RUSAGE_SELF)`); None where it fails.
pub fn process_cpu_secs() -> Option<f64> {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(ru.ru_utime) + secs(ru.ru_stime))
}

/// Bytes of the regular files directly under `dir` (a store's files).
pub fn dir_bytes(dir: &Path) -> Result<u64, String> {
    Ok(StoreFiles::of(dir)?.total())
}

/// Bytes of a store's files by kind, as its directory lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreFiles {
    /// `*.sst`
    pub tables: u64,
    /// `*.vlog`
    pub vlog: u64,
    /// Everything else: manifests, CURRENT, the lock and key files.
    pub other: u64,
}

impl StoreFiles {
    /// Lists `dir`; a file that an open store deletes meanwhile is not
    /// counted.
    pub fn of(dir: &Path) -> Result<StoreFiles, String> {
        let mut f = StoreFiles::default();
        let err = |e: std::io::Error| format!("listing {}: {e}", dir.display());
        for e in std::fs::read_dir(dir).map_err(err)? {
            let e = e.map_err(err)?;
            let m = match e.metadata() {
                Ok(m) if m.is_file() => m,
                Ok(_) => continue,
                Err(x) if x.kind() == std::io::ErrorKind::NotFound => continue,
                Err(x) => {
                    return Err(format!("reading {}: {x}", e.path().display()));
                }
            };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".sst") {
                f.tables += m.len();
            } else if name.ends_with(".vlog") {
                f.vlog += m.len();
            } else {
                f.other += m.len();
            }
        }
        Ok(f)
    }

    pub fn total(&self) -> u64 {
        self.tables + self.vlog + self.other
    }
}

/// Writes every dirty page of the host's filesystems back (`sync`), so a
/// timed run does not start with the previous run's gigabyte still being
/// written back: the kernel throttles a writer by the dirty pages of the
/// whole device, so one run's leftovers slowed the next one's puts (H100
/// host: fillseq 64 KiB runs slept 27-35 us an op beyond
/// their CPU, and paired ratios of one mode spread 0.56-0.95). Best
/// effort: without a `sync` program the run goes on as before.
pub fn write_back_dirty_pages() {
    let _ = std::process::Command::new("sync").status();
}

/// Flushes the memtable and waits until the store's background work
/// (flushes, compactions, value-log GC) has stopped writing, so that a
/// workload's write amplification includes the compaction debt it left.
pub fn settle(store: &Store) -> Result<(), String> {
    store.flush().map_err(|e| format!("flush: {e}"))?;
    let poll = Duration::from_millis(50);
    let deadline = Instant::now() + Duration::from_secs(300);
    let probe = |s: &Store| {
        let st = s.stats();
        (process_bytes_written(), st.levels, st.immutable_memtables)
    };
    let mut last = probe(store);
    let mut quiet = 0;
    while quiet < 3 {
        if Instant::now() > deadline {
            return Err("background work did not settle within 300 s".into());
        }
        std::thread::sleep(poll);
        let now = probe(store);
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
    }
    Ok(())
}

/// The filesystem type and device under `dir`, from /proc/mounts (the
/// longest mount point that is a prefix of the directory).
pub fn filesystem_of(dir: &Path) -> Option<(String, String)> {
    let dir = dir.canonicalize().ok()?;
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (dev, mnt, ty) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(mnt)
                .then(|| (mnt.len(), ty.to_string(), dev.to_string()))
        })
        .max_by_key(|(len, _, _)| *len)
        .map(|(_, ty, dev)| (ty, dev))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that sleeps gains wall time and voluntary switches, not
    /// CPU time; sums add up field by field.
    #[test]
    fn a_probe_sees_sleep_as_wall_time_off_the_cpu() {
        let p = ThreadProbe::start();
        std::thread::sleep(Duration::from_millis(30));
        let t = p.finish();
        assert!(t.wall_secs >= 0.03, "{t:?}");
        if let Some((cpu, _)) = t.sched {
            assert!(cpu < 0.02, "{t:?}");
        }
        if let Some((voluntary, _)) = t.switches {
            assert!(voluntary >= 1, "{t:?}");
        }
        let two = ThreadTimes::sum([t, t]);
        assert_eq!(two.wall_secs, 2.0 * t.wall_secs);
        assert_eq!(two.switches, t.switches.map(|(v, i)| (2 * v, 2 * i)));
        // A fraction of a millisecond of work shows, though no scheduler
        // tick is likely to fall within it.
        let p = ThreadProbe::start();
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_micros(200) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        if let Some((cpu, _)) = p.finish().sched {
            assert!(cpu > 0.0, "{cpu}");
        }
        let lacking = t.add(ThreadTimes { sched: None, ..t });
        assert_eq!(lacking.sched, None);
        if cfg!(target_os = "linux") {
            assert!(process_cpu_secs().is_some_and(|s| s > 0.0));
        }
    }

    #[test]
    fn store_files_are_counted_by_kind() {
        let d = tempfile::tempdir().unwrap();
        for (name, len) in [
            ("000005.sst", 10),
            ("000007.sst", 5),
            ("000006.vlog", 100),
            ("MANIFEST-000002", 3),
            ("CURRENT", 1),
        ] {
            std::fs::write(d.path().join(name), vec![0u8; len]).unwrap();
        }
        std::fs::create_dir(d.path().join("sub.sst")).unwrap();
        let f = StoreFiles::of(d.path()).unwrap();
        assert_eq!(
            f,
            StoreFiles {
                tables: 15,
                vlog: 100,
                other: 4
            }
        );
        assert_eq!(f.total(), 119);
        assert_eq!(dir_bytes(d.path()).unwrap(), 119);
        assert!(StoreFiles::of(&d.path().join("missing")).is_err());
    }

    #[test]
    fn values_check_what_they_made_and_reject_others() {
        let mut v = Values::new(100).unwrap();
        let a = v.make(7, 3).to_vec();
        v.check(7, &a).unwrap();
        assert!(v.check(8, &a).is_err(), "another key's value");
        let mut bad = a.clone();
        bad[50] ^= 1;
        assert!(v.check(7, &bad).is_err(), "flipped payload bit");
        assert!(v.check(7, &a[..99]).is_err(), "short value");
        assert!(Values::new(15).is_err());
    }

    /// A thread that computes gains CPU time and little else; one that
    /// sleeps gains neither (where the kernel keeps scheduler statistics).
    #[test]
    fn thread_sched_time_counts_this_threads_work() {
        let Some(before) = thread_sched_secs() else {
            return; // no /proc/thread-self/schedstat here
        };
        let start = Instant::now();
        let mut x = 1u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        let busy = thread_sched_secs().expect("still readable");
        assert!(busy.0 - before.0 > 0.005, "{before:?} -> {busy:?}");
        std::thread::sleep(Duration::from_millis(50));
        let slept = thread_sched_secs().expect("still readable");
        assert!(slept.0 - busy.0 < 0.025, "{busy:?} -> {slept:?}");
    }

    #[test]
    fn keys_have_db_bench_and_seed_shapes() {
        assert_eq!(Keys::Decimal16.key(42).as_ref(), b"0000000000000042");
        assert_eq!(Keys::Decimal16.key(0).as_ref(), b"0000000000000000");
        assert_eq!(
            Keys::Decimal16.key(1_234_567_890_123_456_789).as_ref(),
            b"4567890123456789",
            "the last 16 digits"
        );
        let k = Keys::random64(1000, 1);
        assert_eq!(k.key(999).as_ref().len(), 8);
    }
}
