//! Space and shape after each command: value-log files whose records are
//! all in tables are dropped (at once when they hold no value frame), the
//! discard ratio counts flushed commit frames as garbage, `close` leaves
//! level 0 under its trigger however many short-lived processes ran, a
//! re-encryption pass with nothing to do reads no data and does not sleep,
//! and `compact_all` shrinks a store with garbage.
//!
//! Space amplification here is the bytes of every file in the store's
//! directory (tables, value log, manifest, pointer file, key registry,
//! lock file) divided by the live data: the sum over the keys a full scan
//! returns of key length plus value length.

mod common;

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{small_options, value_for, Mode};
use gvault_store::env::{FileLock, RandomAccessFile, WritableFile};
use gvault_store::{FileSystem, Options, OsFs, ReadOptions, Store, WriteBatch, WriteOptions};

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

fn count_files(dir: &Path, ext: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == ext)
        })
        .count()
}

/// Key plus value bytes of every live key, and the number of keys.
fn live_bytes(s: &Store) -> (u64, u64) {
    let mut bytes = 0;
    let mut keys = 0;
    for item in s.scan(&ReadOptions::default(), None, None, false).unwrap() {
        let (k, v) = item.unwrap();
        bytes += (k.len() + v.len()) as u64;
        keys += 1;
    }
    (bytes, keys)
}

fn key(i: u64) -> String {
    format!("user{i:012}")
}

/// Writes `n` records of ~100-byte values in batches of about 1 MiB, as
/// `gvault import` does (the last batch synced), and closes the store.
fn import(dir: &Path, opts: Options, n: u64, version: u64) {
    let s = Store::open(dir, opts).unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..n {
        batch.put(key(i), value_for(i, version, 90 + (i % 21) as usize));
        if batch.approximate_bytes() >= 1 << 20 {
            s.write(&WriteOptions::default(), std::mem::take(&mut batch))
                .unwrap();
        }
    }
    s.write(&WriteOptions::SYNC, batch).unwrap();
    s.close().unwrap();
}

fn check_amplification(dir: &Path, opts: Options, n: u64, what: &str) -> f64 {
    let s = Store::open(dir, opts).unwrap();
    let (live, keys) = live_bytes(&s);
    assert_eq!(keys, n, "{what}: keys lost");
    for i in (0..n).step_by(997) {
        let v = s.get(key(i)).unwrap();
        assert_eq!(v, Some(value_for(i, 1, 90 + (i % 21) as usize)), "{what}");
    }
    s.close().unwrap();
    let on_disk = dir_bytes(dir);
    let amp = on_disk as f64 / live as f64;
    println!("{what}: {on_disk} bytes on disk for {live} live bytes: {amp:.3}x");
    assert!(
        amp <= 1.3,
        "{what}: {on_disk} bytes on disk for {live} live bytes ({amp:.3}x > 1.3x)"
    );
    amp
}

/// 56 MB of small values through the default options, with value-log files
/// of 16 MiB so that some fill up and fall behind the replay pointer while
/// the import runs, and the last one is left when it closes.
fn import_of_small_values_is_at_most_1_3x(mode: Mode) {
    let d = tempfile::tempdir().unwrap();
    let opts = || Options {
        vlog_file_size: 16 << 20,
        encryption: mode.encryption(),
        ..Options::default()
    };
    let n = 560_000;
    import(d.path(), opts(), n, 1);
    let amp = check_amplification(d.path(), opts(), n, "after the import");
    // The value log holds nothing the tables hold: at most the empty head
    // (and, after the reopen above, the one before it).
    assert!(count_files(d.path(), "vlog") <= 2, "{amp}");
    // Overwriting every key once leaves the old versions to compaction;
    // the bound still holds after the command.
    import(d.path(), opts(), n, 1);
    check_amplification(d.path(), opts(), n, "after importing again");
}

both_modes!(
    import_of_small_values,
    import_of_small_values_is_at_most_1_3x
);

#[test]
fn the_default_value_log_file_size_leaves_no_garbage_at_close() {
    // One 128 MiB head holds the whole import: only `close` can retire it.
    let d = tempfile::tempdir().unwrap();
    let n = 200_000;
    import(d.path(), Options::default(), n, 1);
    check_amplification(d.path(), Options::default(), n, "default options");
}

#[test]
fn flushed_value_log_files_without_values_are_dropped_while_running() {
    let d = tempfile::tempdir().unwrap();
    let opts = Options {
        vlog_gc_every_flushes: 0, // no periodic GC: the drop is not GC
        ..small_options()
    };
    let s = Store::open(d.path(), opts).unwrap();
    // ~2 MB of inline values: ~30 value-log files of 64 KiB.
    for i in 0..40_000u64 {
        s.put(key(i), value_for(i, 1, 40)).unwrap();
    }
    s.flush().unwrap();
    // Everything but the head (and the file the replay pointer is in) is
    // flushed and holds no value frame.
    let st = s.stats();
    assert!(st.vlog_files <= 2, "{st}");
    assert!(st.vlog_bytes <= 2 * (64 << 10) + 4096, "{st}");
    for i in (0..40_000u64).step_by(101) {
        assert_eq!(s.get(key(i)).unwrap(), Some(value_for(i, 1, 40)));
    }
    s.close().unwrap();
}

#[test]
fn a_full_range_compaction_drops_a_head_of_flushed_inline_records() {
    // Default options: one 128 MiB head holds every commit record; after
    // a compaction over all keys only tables (and a new, empty head) are
    // left, with the store still open, and reads and writes go on.
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(d.path(), Options::default()).unwrap();
    let n = 50_000u64;
    for i in 0..n {
        s.put(key(i), value_for(i, 1, 100)).unwrap();
    }
    let before = s.stats().vlog_bytes;
    s.compact_range(None, None).unwrap();
    let st = s.stats();
    assert!(before > 5 << 20, "{before} bytes of value log before");
    assert!(st.vlog_files <= 1 && st.vlog_bytes <= 4096, "{st}");
    for i in (0..n).step_by(97) {
        assert_eq!(s.get(key(i)).unwrap(), Some(value_for(i, 1, 100)));
    }
    s.put(key(n), value_for(n, 1, 100)).unwrap();
    s.close().unwrap();
    let s = Store::open(d.path(), Options::default()).unwrap();
    assert_eq!(s.get(key(n)).unwrap(), Some(value_for(n, 1, 100)));
    assert_eq!(s.get(key(7)).unwrap(), Some(value_for(7, 1, 100)));
    s.close().unwrap();
}

#[test]
fn the_discard_ratio_counts_flushed_commit_frames_as_garbage() {
    let d = tempfile::tempdir().unwrap();
    let opts = Options {
        vlog_gc_every_flushes: 0, // GC only when asked, below
        ..small_options()
    };
    let s = Store::open(d.path(), opts).unwrap();
    // One value frame (200 bytes, all live) among ~60 KiB of inline
    // values: counting value bytes only, the file is 0% garbage; it is
    // more than 99% garbage once its flushed commit frames count.
    let big = value_for(7, 7, 200);
    s.put("big", &big).unwrap();
    for i in 0..3000u64 {
        s.put(key(i), value_for(i, 1, 30)).unwrap();
    }
    s.flush().unwrap();
    let report = s.gc_value_log().unwrap();
    assert_eq!(report.values_rewritten, 1, "{report:?}");
    assert!(report.files_dropped >= 1, "{report:?}");
    assert_eq!(s.get("big").unwrap(), Some(big.clone()));
    s.close().unwrap();
    let s = Store::open(d.path(), small_options()).unwrap();
    assert_eq!(s.get("big").unwrap(), Some(big));
    let v = s.verify().unwrap();
    assert!(v.is_clean(), "{v}");
}

#[test]
fn close_collects_the_head_when_few_of_its_bytes_are_values() {
    // A head with a few large values among many inline ones qualifies for
    // GC as soon as it is flushed: `close` rewrites the values and drops
    // the file rather than leave the inline copies behind.
    let d = tempfile::tempdir().unwrap();
    let opts = || Options {
        write_buffer_size: 64 << 10,
        value_threshold: 400,
        ..Options::default()
    };
    let s = Store::open(d.path(), opts()).unwrap();
    let mut live = 0u64;
    for i in 0..20_000u64 {
        let len = if i % 1000 == 0 { 500 } else { 60 };
        s.put(key(i), value_for(i, 1, len)).unwrap();
        live += (key(i).len() + len) as u64;
    }
    s.close().unwrap();
    let on_disk = dir_bytes(d.path());
    assert!(
        (on_disk as f64) <= 1.3 * live as f64,
        "{on_disk} bytes on disk for {live} live bytes"
    );
    let s = Store::open(d.path(), opts()).unwrap();
    for i in (0..20_000u64).step_by(250) {
        let len = if i % 1000 == 0 { 500 } else { 60 };
        assert_eq!(s.get(key(i)).unwrap(), Some(value_for(i, 1, len)));
    }
}

#[test]
fn values_overwritten_by_a_later_process_are_collected_at_its_close() {
    // Large values live only in the value log. A second process overwrites
    // them all: the files of the first are unknown to it, but its
    // compactions see the old pointers dropped, and `close` collects them.
    let d = tempfile::tempdir().unwrap();
    let opts = || Options {
        vlog_file_size: 256 << 10,
        ..Options::default()
    };
    let n = 1000u64;
    let mut live = 0;
    for version in 1..=3u64 {
        let s = Store::open(d.path(), opts()).unwrap();
        for i in 0..n {
            s.put(key(i), value_for(i, version, 2000)).unwrap();
        }
        s.close().unwrap();
        let s = Store::open(d.path(), opts()).unwrap();
        let (bytes, keys) = live_bytes(&s);
        assert_eq!(keys, n);
        assert_eq!(s.get(key(7)).unwrap(), Some(value_for(7, version, 2000)));
        live = bytes;
        drop(s);
    }
    let on_disk = dir_bytes(d.path());
    assert!(
        on_disk as f64 <= 1.3 * live as f64,
        "{on_disk} bytes on disk for {live} live bytes"
    );
}

/// Each process overwrites a third of the large values at random: every
/// value-log file ends about a third garbage, under the background's 0.5
/// ratio, so only `close`'s lower ratio keeps the store within 1.3x.
#[test]
fn random_partial_overwrites_stay_within_1_3x_after_each_close() {
    let d = tempfile::tempdir().unwrap();
    let opts = || Options {
        vlog_file_size: 256 << 10,
        ..Options::default()
    };
    let n = 1200u64;
    let mut current = vec![0u64; n as usize];
    let mut x = 0x9e37_79b9u64;
    for round in 0..5u64 {
        let s = Store::open(d.path(), opts()).unwrap();
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if round == 0 || x.is_multiple_of(3) {
                current[i as usize] = round;
                s.put(key(i), value_for(i, round, 2000)).unwrap();
            }
        }
        s.close().unwrap();
        let s = Store::open(d.path(), opts()).unwrap();
        let (live, keys) = live_bytes(&s);
        assert_eq!(keys, n);
        for i in (0..n).step_by(101) {
            let want = value_for(i, current[i as usize], 2000);
            assert_eq!(s.get(key(i)).unwrap(), Some(want), "round {round}");
        }
        drop(s);
        let on_disk = dir_bytes(d.path());
        assert!(
            on_disk as f64 <= 1.3 * live as f64,
            "round {round}: {on_disk} bytes on disk for {live} live bytes"
        );
    }
}

#[test]
fn one_shot_processes_keep_level_0_under_its_trigger() {
    let d = tempfile::tempdir().unwrap();
    let trigger = Options::default().l0_compaction_trigger;
    let started = Instant::now();
    for i in 0..1000u64 {
        // Keys spread over the key space, so level-0 tables overlap.
        let k = key(i * 7919 % 1000);
        let s = Store::open(d.path(), Options::default()).unwrap();
        // `close` left level 0 under the trigger; the open may have added
        // the table of the writes it replayed.
        let l0 = s.stats().levels[0].0;
        assert!(l0 <= trigger, "cycle {i}: {l0} level-0 tables at open");
        s.put(&k, value_for(i, 1, 100)).unwrap();
        s.close().unwrap();
    }
    println!("1000 open/put/close cycles in {:?}", started.elapsed());
    let s = Store::open(d.path(), Options::default()).unwrap();
    let st = s.stats();
    assert!(st.levels[0].0 <= trigger, "{st}");
    assert!(st.vlog_files <= 2, "{st}");
    assert_eq!(live_bytes(&s).1, 1000);
    for i in (0..1000u64).step_by(37) {
        assert_eq!(
            s.get(key(i * 7919 % 1000)).unwrap(),
            Some(value_for(i, 1, 100))
        );
    }
}

#[test]
fn an_open_brings_level_0_under_its_trigger() {
    // Processes that end without `close` leave their writes to the next
    // open, which flushes them to level 0; the open then compacts.
    let d = tempfile::tempdir().unwrap();
    let trigger = Options::default().l0_compaction_trigger;
    for i in 0..(3 * trigger as u64) {
        let s = Store::open(d.path(), Options::default()).unwrap();
        s.put(key(i), value_for(i, 1, 100)).unwrap();
        drop(s);
    }
    let s = Store::open(d.path(), Options::default()).unwrap();
    let st = s.stats();
    assert!(st.levels[0].0 <= trigger, "{st}");
    assert_eq!(live_bytes(&s).1, 3 * trigger as u64);
}

#[test]
fn compact_all_drops_garbage_and_keeps_data() {
    let d = tempfile::tempdir().unwrap();
    let opts = Options {
        vlog_gc_every_flushes: 0,
        vlog_gc_discard_ratio: 0.9, // the background would leave most
        block_size: 4096,
        ..small_options()
    };
    let s = Store::open(d.path(), opts).unwrap();
    for round in 0..3u64 {
        for i in 0..2000u64 {
            let len = if i % 2 == 0 { 300 } else { 30 };
            s.put(key(i), value_for(i, round, len)).unwrap();
        }
    }
    for i in (0..2000u64).step_by(3) {
        s.delete(key(i)).unwrap();
    }
    let r = s.compact_all().unwrap();
    println!("{r:?}");
    assert!(r.bytes_after * 2 < r.bytes_before, "{r:?}");
    assert!(r.gc.files_dropped > 0, "{r:?}");
    let st = s.stats();
    assert_eq!(st.levels[0].0, 0, "{st}");
    let (live, keys) = live_bytes(&s);
    assert_eq!(keys, 2000 - 667);
    assert!(
        r.bytes_after as f64 <= 1.3 * live as f64,
        "{r:?}, {live} live bytes"
    );
    for i in 0..2000u64 {
        let len = if i % 2 == 0 { 300 } else { 30 };
        let want = (i % 3 != 0).then(|| value_for(i, 2, len));
        assert_eq!(s.get(key(i)).unwrap(), want, "key {i}");
    }
    let v = s.verify().unwrap();
    assert!(v.is_clean(), "{v}");
}

/// Counts what passes through to the real file system: bytes read (and
/// the largest single read), files created, bytes appended, renames.
#[derive(Debug, Default)]
struct Counts {
    reads: AtomicU64,
    read_bytes: AtomicU64,
    largest_read: AtomicU64,
    creates: AtomicU64,
    appended: AtomicU64,
    renames: AtomicU64,
}

#[derive(Debug)]
struct CountingFs {
    counts: Arc<Counts>,
}

struct CountingReader {
    inner: Arc<dyn RandomAccessFile>,
    counts: Arc<Counts>,
}

impl RandomAccessFile for CountingReader {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let n = buf.len() as u64;
        self.counts.reads.fetch_add(1, Ordering::SeqCst);
        self.counts.read_bytes.fetch_add(n, Ordering::SeqCst);
        self.counts.largest_read.fetch_max(n, Ordering::SeqCst);
        self.inner.read_exact_at(buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

struct CountingWriter {
    inner: Box<dyn WritableFile>,
    counts: Arc<Counts>,
}

impl WritableFile for CountingWriter {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        self.counts
            .appended
            .fetch_add(data.len() as u64, Ordering::SeqCst);
        self.inner.append(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
}

impl FileSystem for CountingFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        OsFs.create_dir_all(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.counts.creates.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(CountingWriter {
            inner: OsFs.create(path)?,
            counts: self.counts.clone(),
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(CountingReader {
            inner: OsFs.open_read(path)?,
            counts: self.counts.clone(),
        }))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let v = OsFs.read_all(path)?;
        self.counts.reads.fetch_add(1, Ordering::SeqCst);
        self.counts
            .read_bytes
            .fetch_add(v.len() as u64, Ordering::SeqCst);
        self.counts
            .largest_read
            .fetch_max(v.len() as u64, Ordering::SeqCst);
        Ok(v)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.counts.renames.fetch_add(1, Ordering::SeqCst);
        OsFs.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        OsFs.remove(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        OsFs.truncate(path, len)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsFs.list(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        OsFs.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        OsFs.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        OsFs.lock(path)
    }
}

#[test]
fn reencrypt_with_nothing_to_do_reads_no_data_and_does_not_wait() {
    let d = tempfile::tempdir().unwrap();
    let enc = Mode::Encrypted;
    let s = Store::open(
        d.path(),
        Options {
            reencrypt_bytes_per_sec: u64::MAX,
            ..enc.options()
        },
    )
    .unwrap();
    for i in 0..6000u64 {
        let len = if i % 4 == 0 { 400 } else { 60 };
        s.put(key(i), value_for(i, 1, len)).unwrap();
    }
    s.flush().unwrap();
    s.compact_range(None, None).unwrap();
    s.rotate_data_key().unwrap();
    let first = s.reencrypt().unwrap();
    assert!(first.tables_rewritten > 0, "{first:?}");
    // A compaction that sealed its tables before the rotation and
    // installed them after the pass listed the tables is left for a
    // later pass.
    for _ in 0..5 {
        if s.key_status().unwrap().stale_files() == 0 {
            break;
        }
        s.reencrypt().unwrap();
    }
    s.close().unwrap();

    // Reopened at the slowest rate: a pass that charged its rate limit for
    // the tables it skips would sleep for a minute or more.
    let counts = Arc::new(Counts::default());
    let s = Store::open(
        d.path(),
        Options {
            reencrypt_bytes_per_sec: 4096,
            fs: Arc::new(CountingFs {
                counts: counts.clone(),
            }),
            ..enc.options()
        },
    )
    .unwrap();
    let status = s.key_status().unwrap();
    assert_eq!(status.stale_files(), 0, "{status:?}");
    let table_bytes: u64 = s.stats().levels.iter().map(|(_, b)| b).sum();
    assert!(table_bytes > 240 << 10, "{table_bytes} bytes of tables");
    let before = (
        counts.read_bytes.load(Ordering::SeqCst),
        counts.creates.load(Ordering::SeqCst),
        counts.appended.load(Ordering::SeqCst),
        counts.renames.load(Ordering::SeqCst),
    );
    counts.largest_read.store(0, Ordering::SeqCst);
    let reads_before = counts.reads.load(Ordering::SeqCst);
    let started = Instant::now();
    let report = s.reencrypt().unwrap();
    let took = started.elapsed();
    assert_eq!(report, Default::default());
    // Only file headers (24 bytes each) were read; nothing was written.
    let largest = counts.largest_read.load(Ordering::SeqCst);
    assert!(largest <= 24, "a read of {largest} bytes");
    let reads = counts.reads.load(Ordering::SeqCst) - reads_before;
    let read = counts.read_bytes.load(Ordering::SeqCst) - before.0;
    assert!(read <= 24 * reads, "{read} bytes in {reads} reads");
    assert_eq!(counts.creates.load(Ordering::SeqCst), before.1);
    assert_eq!(counts.appended.load(Ordering::SeqCst), before.2);
    assert_eq!(counts.renames.load(Ordering::SeqCst), before.3);
    // At 4 KiB/s the tables alone would cost over a minute of sleep.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}
