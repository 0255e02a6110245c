//! Many processes, one store: writers wait for the lock instead of failing,
//! readers share it (`Options::read_only`), a read-only open writes nothing,
//! and a failed open of a directory that is not a store leaves it as it was.

mod common;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{capturing, value_for, Mode};
use gvault_store::env::{FileLock, RandomAccessFile, WritableFile};
use gvault_store::{
    Error, FileSystem, Options, OsFs, ReadOptions, Store, WriteBatch, WriteOptions,
};

fn read_only(mode: Mode) -> Options {
    Options {
        read_only: true,
        ..mode.options()
    }
}

fn waiting(opts: Options, timeout: Duration) -> Options {
    Options {
        lock_timeout: timeout,
        ..opts
    }
}

/// Every entry below `dir` with its bytes (`None` for a directory).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.insert(p.clone(), None);
                todo.push(p);
            } else {
                out.insert(p.clone(), Some(std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn all(s: &Store) -> Vec<(Vec<u8>, Vec<u8>)> {
    s.scan(&ReadOptions::default(), None, None, false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

// ---------------------------------------------------------------------------
// Processes

/// Child side of the tests below: `GVAULT_TEST_ROLE` says what to do.
#[test]
fn multiprocess_child() {
    let Ok(role) = std::env::var("GVAULT_TEST_ROLE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var("GVAULT_TEST_DIR").unwrap());
    let mode = Mode::from_name(&std::env::var("GVAULT_TEST_MODE").unwrap()).unwrap();
    let rounds: u64 = std::env::var("GVAULT_TEST_ROUNDS")
        .unwrap()
        .parse()
        .unwrap();
    let wait = Duration::from_secs(60);
    if role == "messy" {
        let s = Store::open(&dir, mode.options()).unwrap();
        messy_writes(Some(&s));
        // A crash: nothing closes the store.
        std::process::abort();
    }
    if let Some(id) = role.strip_prefix("writer") {
        // One open per write, as a shell loop of `gvault put` does.
        for i in 0..rounds {
            let s = Store::open(
                &dir,
                Options {
                    create_if_missing: false,
                    ..waiting(mode.options(), wait)
                },
            )
            .unwrap_or_else(|e| panic!("writer {id} round {i}: {e}"));
            s.put(format!("w{id}-{i:04}"), written(id, i)).unwrap();
            s.close().unwrap();
        }
    } else {
        // A reader sees the writers' keys only grow, each with its value.
        let mut seen = 0;
        for i in 0..rounds {
            let s = Store::open(&dir, waiting(read_only(mode), wait))
                .unwrap_or_else(|e| panic!("reader round {i}: {e}"));
            let entries = all(&s);
            for (k, v) in &entries {
                let k = String::from_utf8(k.clone()).unwrap();
                let (id, n) = k[1..].split_once('-').unwrap();
                let n: u64 = n.parse().unwrap();
                assert_eq!(v, &written(id, n), "reader round {i}: wrong value for {k}");
            }
            assert!(entries.len() >= seen, "reader round {i}: keys vanished");
            seen = entries.len();
        }
    }
}

/// The value writer `id` puts in its round `i`: every third one large
/// enough to live in the value log.
fn written(id: &str, i: u64) -> Vec<u8> {
    let len = if i.is_multiple_of(3) { 300 } else { 20 };
    value_for(i, id.len() as u64, len)
}

fn spawn_child(dir: &Path, mode: Mode, role: &str, rounds: u64) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "multiprocess_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GVAULT_TEST_ROLE", role)
        .env("GVAULT_TEST_DIR", dir)
        .env("GVAULT_TEST_MODE", mode.name())
        .env("GVAULT_TEST_ROUNDS", rounds.to_string())
        .spawn()
        .unwrap()
}

both_modes!(
    writer_processes_wait_for_each_other,
    writer_processes_wait_for_each_other_in
);

fn writer_processes_wait_for_each_other_in(mode: Mode) {
    const WRITERS: usize = 3;
    const ROUNDS: u64 = 25;
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), mode.options())
        .unwrap()
        .close()
        .unwrap();
    // Writer ids of different lengths, so their values differ.
    let mut children: Vec<_> = (0..WRITERS)
        .map(|w| {
            spawn_child(
                dir.path(),
                mode,
                &format!("writer{}", "x".repeat(w + 1)),
                ROUNDS,
            )
        })
        .collect();
    children.push(spawn_child(dir.path(), mode, "reader", ROUNDS));
    for mut c in children {
        assert!(
            c.wait().unwrap().success(),
            "a child failed (see its output)"
        );
    }
    let s = Store::open(dir.path(), mode.options()).unwrap();
    let keys: Vec<String> = all(&s)
        .into_iter()
        .map(|(k, _)| String::from_utf8(k).unwrap())
        .collect();
    let mut want: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..ROUNDS).map(move |i| format!("wx{}-{i:04}", "x".repeat(w))))
        .collect();
    want.sort();
    assert_eq!(keys, want);
}

// ---------------------------------------------------------------------------
// Readers and writers in one process (a flock is per open file, so two
// handles in one process contend as two processes do)

both_modes!(readers_share_the_store, readers_share_the_store_in);

fn readers_share_the_store_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), mode.options()).unwrap();
    for i in 0..200u64 {
        s.put(format!("k{i:03}"), value_for(i, 0, (i as usize * 7) % 400))
            .unwrap();
    }
    s.close().unwrap();

    let readers: Vec<Store> = (0..4)
        .map(|_| {
            Store::open(
                dir.path(),
                waiting(read_only(mode), Duration::from_secs(10)),
            )
            .unwrap()
        })
        .collect();
    let threads: Vec<_> = readers
        .into_iter()
        .map(|r| {
            std::thread::spawn(move || {
                assert!(r.is_read_only());
                for i in (0..200u64).rev() {
                    let want = value_for(i, 0, (i as usize * 7) % 400);
                    assert_eq!(r.get(format!("k{i:03}")).unwrap(), Some(want));
                }
                assert_eq!(all(&r).len(), 200);
                r
            })
        })
        .collect();
    let readers: Vec<Store> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    // While readers hold it, a writer is refused at once...
    let e = Store::open(dir.path(), mode.options()).err().unwrap();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    // ...and another reader is not.
    Store::open(
        dir.path(),
        waiting(read_only(mode), Duration::from_secs(10)),
    )
    .unwrap();
    drop(readers);
    // Free once the readers close. Opens here may wait a moment: a child
    // process another test starts meanwhile holds a copy of every open
    // descriptor, the lock's included, from its fork until its exec.
    Store::open(dir.path(), waiting(mode.options(), Duration::from_secs(10))).unwrap();
}

both_modes!(
    opens_wait_for_an_incompatible_holder,
    opens_wait_for_an_incompatible_holder_in
);

/// A reader waits for a writer and a writer for a reader, for as long as
/// `lock_timeout` allows.
fn opens_wait_for_an_incompatible_holder_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let hold = Duration::from_millis(300);
    let patience = Duration::from_secs(30);

    let writer = Store::open(dir.path(), mode.options()).unwrap();
    writer.put("k", "by the writer").unwrap();
    let path = dir.path().to_owned();
    let reader = std::thread::spawn(move || {
        let r = Store::open(&path, waiting(read_only(mode), patience)).unwrap();
        (Instant::now(), r.get("k").unwrap())
    });
    std::thread::sleep(hold);
    // The write the writer made last before it let go is visible.
    writer.put("k", "last").unwrap();
    let released = Instant::now();
    writer.close().unwrap();
    let (opened, got) = reader.join().unwrap();
    assert!(
        opened > released,
        "the reader opened while the writer held the store"
    );
    assert_eq!(got.as_deref(), Some(&b"last"[..]));

    let reader = Store::open(dir.path(), read_only(mode)).unwrap();
    let path = dir.path().to_owned();
    let writer = std::thread::spawn(move || {
        let w = Store::open(&path, waiting(mode.options(), patience)).unwrap();
        let opened = Instant::now();
        w.put("k", "again").unwrap();
        opened
    });
    std::thread::sleep(hold);
    assert_eq!(reader.get("k").unwrap().as_deref(), Some(&b"last"[..]));
    let released = Instant::now();
    drop(reader);
    let opened = writer.join().unwrap();
    assert!(
        opened > released,
        "the writer opened while a reader held the store"
    );
    let s = Store::open(dir.path(), read_only(mode)).unwrap();
    assert_eq!(s.get("k").unwrap().as_deref(), Some(&b"again"[..]));
}

both_modes!(lock_wait_times_out, lock_wait_times_out_in);

fn lock_wait_times_out_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), mode.options()).unwrap();
    let timeout = Duration::from_millis(300);
    for opts in [mode.options(), read_only(mode)] {
        let t = Instant::now();
        let e = Store::open(dir.path(), waiting(opts, timeout))
            .err()
            .unwrap();
        let took = t.elapsed();
        assert!(took >= timeout, "gave up after {took:?}");
        assert!(took < Duration::from_secs(10), "waited {took:?}");
        match &e {
            Error::Locked { waited, .. } => assert_eq!(*waited, timeout),
            e => panic!("expected Locked, got {e}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("0.3 s"), "{msg}");
        assert!(msg.contains("--wait"), "{msg}");
    }
    // Without a timeout the message says nothing of a wait.
    let e = Store::open(dir.path(), mode.options()).err().unwrap();
    assert!(
        e.to_string().contains("is locked by another process"),
        "{e}"
    );
    writer.close().unwrap();
}

// ---------------------------------------------------------------------------
// A read-only open writes nothing

/// A file system on which nothing can be written: every call that would
/// change the directory fails and is recorded. Shared locks pass through to
/// the real `flock` (on `LOCK` opened for reading, never created), so lock
/// acquisition is the real one.
#[derive(Debug, Default)]
struct NoWriteFs {
    refused: Mutex<Vec<String>>,
}

impl NoWriteFs {
    fn refuse<T>(&self, what: &str, path: &Path) -> io::Result<T> {
        let call = format!("{what} {}", path.display());
        self.refused.lock().unwrap().push(call.clone());
        Err(io::Error::new(io::ErrorKind::PermissionDenied, call))
    }
    fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }
}

impl FileSystem for NoWriteFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.refuse("create_dir_all", dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.refuse("create", path)
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        OsFs.open_read(path)
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        OsFs.read_all(path)
    }
    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        self.refuse("rename", from)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.refuse("remove", path)
    }
    fn truncate(&self, path: &Path, _len: u64) -> io::Result<()> {
        self.refuse("truncate", path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        OsFs.list(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        OsFs.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.refuse("sync_dir", dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        // An exclusive lock creates LOCK when it is missing.
        self.refuse("lock", path)
    }
    fn lock_shared(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        OsFs.lock_shared(path)
    }
}

fn vlog_files(dir: &Path) -> Vec<(u64, PathBuf)> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let n = p
                .file_name()?
                .to_str()?
                .strip_suffix(".vlog")?
                .parse()
                .ok()?;
            Some((n, p))
        })
        .collect();
    v.sort();
    v
}

/// A store as a crash leaves it: tables, unflushed writes (large values
/// in the value log, small ones inline, deletions), a torn last group, a
/// stray temporary pointer file and an orphan table. Returns the expected
/// contents.
/// The writes of `messy_store`, to `s` (when given) and to the model.
fn messy_writes(s: Option<&Store>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut model = BTreeMap::new();
    let put = |k: String, v: Vec<u8>, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        if let Some(s) = s {
            s.put(&k, &v).unwrap();
        }
        model.insert(k.into_bytes(), v);
    };
    for i in 0..1500u64 {
        put(
            format!("k{i:05}"),
            value_for(i, 1, (i as usize * 13) % 500),
            &mut model,
        );
    }
    if let Some(s) = s {
        s.flush().unwrap();
    }
    // Unflushed: overwrites, deletions, a batch.
    for i in (0..1500u64).step_by(7) {
        put(
            format!("k{i:05}"),
            value_for(i, 2, (i as usize * 31) % 700),
            &mut model,
        );
    }
    let mut b = WriteBatch::new();
    for i in (3..1500u64).step_by(11) {
        b.delete(format!("k{i:05}"));
        model.remove(format!("k{i:05}").as_bytes());
    }
    // At most the first of these fills the memtable and sends it to a
    // flush; the rest stay in the value log only.
    if let Some(s) = s {
        s.write(&WriteOptions::SYNC, b).unwrap();
    }
    for i in 0..5u64 {
        put(format!("u{i}"), value_for(i, 3, 40), &mut model);
    }
    // The last group will be torn: never acknowledged as durable.
    if let Some(s) = s {
        s.put_opt(&WriteOptions::SYNC, "torn", vec![7u8; 300])
            .unwrap();
    }
    model
}

/// A store as a crash leaves it: written by a child process that then
/// aborts (no close, so the head's size is not recorded), its last group
/// torn, a half-written pointer and an orphan table beside it.
fn messy_store(dir: &Path, mode: Mode) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let status = spawn_child(dir, mode, "messy", 0).wait().unwrap();
    assert!(
        !status.success(),
        "the child must abort, not close the store"
    );
    let (_, head) = vlog_files(dir).pop().unwrap();
    let len = std::fs::metadata(&head).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&head).unwrap();
    f.set_len(len - 10).unwrap();
    std::fs::write(dir.join("CURRENT.tmp"), b"half-written pointer").unwrap();
    std::fs::write(dir.join("999999.sst"), b"table of a flush cut short").unwrap();
    messy_writes(None)
}

fn check_read_only_open_writes_nothing(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let model = messy_store(dir.path(), mode);
    let before = snapshot(dir.path());

    let fs = Arc::new(NoWriteFs::default());
    let (opts, warnings) = capturing(Options {
        fs: fs.clone() as Arc<dyn FileSystem>,
        ..read_only(mode)
    });
    // Several at once, each replaying the unflushed writes.
    let stores: Vec<Store> = (0..3)
        .map(|_| Store::open(dir.path(), opts.clone()).unwrap())
        .collect();
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.iter()
            .any(|m| m.contains("skipping") && m.contains("never completed")),
        "{w:?}"
    );
    for s in &stores {
        assert_eq!(s.is_encrypted(), mode != Mode::Plain);
        let got: BTreeMap<Vec<u8>, Vec<u8>> = all(s).into_iter().collect();
        assert!(got == model, "scan differs from the model");
        for (k, v) in model.iter().step_by(17) {
            assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        }
        assert_eq!(s.get("torn").unwrap(), None);
        assert_eq!(s.get("k00003").unwrap(), None);
        let report = s.verify().unwrap();
        assert!(report.is_clean(), "{report}");
        assert_eq!(report.live_keys as usize, model.len());
        assert!(
            s.stats().memtable_bytes > 0,
            "unflushed writes are replayed"
        );
        if mode != Mode::Plain {
            let st = s.key_status().unwrap();
            assert_eq!(st.current, 1);
        }
    }

    // Everything that would change the store says why it cannot.
    let s = &stores[0];
    let key = gvault_store::Encryption::with_key(gvault_store::keys::generate_key());
    let attempts: Vec<(&str, Error)> = vec![
        ("put", s.put("new", "v").unwrap_err()),
        ("delete", s.delete("k00000").unwrap_err()),
        (
            "write",
            s.write(&WriteOptions::SYNC, WriteBatch::new()).unwrap_err(),
        ),
        ("flush", s.flush().unwrap_err()),
        ("compact", s.compact_range(None, None).unwrap_err()),
        ("gc", s.gc_value_log().unwrap_err()),
        ("rotate", s.rotate_data_key().unwrap_err()),
        ("rotate master", s.rotate_master_key(&key).unwrap_err()),
        ("reencrypt", s.reencrypt().unwrap_err()),
    ];
    for (what, e) in attempts {
        assert!(matches!(e, Error::ReadOnly { .. }), "{what}: {e}");
        assert!(e.to_string().contains("read-only"), "{what}: {e}");
    }
    assert_eq!(s.get("new").unwrap(), None);
    drop(stores);

    assert_eq!(fs.refused(), Vec::<String>::new());
    assert!(snapshot(dir.path()) == before, "the directory changed");

    // The file system does refuse writes: a read-write open fails on it.
    let e = Store::open(
        dir.path(),
        Options {
            fs: fs.clone() as Arc<dyn FileSystem>,
            ..mode.options()
        },
    );
    assert!(e.is_err());
    assert!(!fs.refused().is_empty());
    assert!(snapshot(dir.path()) == before, "the directory changed");

    // A read-write open afterwards cuts the tail and keeps every write. It
    // may wait a moment: a process another test forks at the wrong time
    // holds a copy of the lock's descriptor until it execs.
    let s = Store::open(dir.path(), waiting(mode.options(), Duration::from_secs(10))).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = all(&s).into_iter().collect();
    assert!(
        got == model,
        "scan differs from the model after a read-write open"
    );
}

#[test]
fn read_only_open_writes_nothing_plain() {
    check_read_only_open_writes_nothing(Mode::Plain);
}

#[test]
fn read_only_open_writes_nothing_encrypted() {
    check_read_only_open_writes_nothing(Mode::Encrypted);
}

#[test]
fn read_only_open_writes_nothing_index_only() {
    check_read_only_open_writes_nothing(Mode::IndexOnly);
}

both_modes!(
    read_only_open_without_a_lock_file,
    read_only_open_without_a_lock_file_in
);

/// A store copied without its `LOCK` file (or on read-only media) opens
/// read-only without one, and none is created.
fn read_only_open_without_a_lock_file_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), mode.options()).unwrap();
    s.put("k", "v").unwrap();
    s.close().unwrap();
    std::fs::remove_file(dir.path().join("LOCK")).unwrap();
    let before = snapshot(dir.path());
    let fs = Arc::new(NoWriteFs::default());
    let (opts, warnings) = capturing(Options {
        fs: fs.clone() as Arc<dyn FileSystem>,
        ..read_only(mode)
    });
    let s = Store::open(dir.path(), opts).unwrap();
    assert_eq!(s.get("k").unwrap().as_deref(), Some(&b"v"[..]));
    drop(s);
    let w = warnings.lock().unwrap().clone();
    assert!(w.iter().any(|m| m.contains("without a lock")), "{w:?}");
    assert_eq!(fs.refused(), Vec::<String>::new());
    assert!(snapshot(dir.path()) == before, "the directory changed");
}

// ---------------------------------------------------------------------------
// Directories that are not stores

both_modes!(
    a_directory_that_is_not_a_store_is_left_as_it_was,
    a_directory_that_is_not_a_store_is_left_as_it_was_in
);

fn a_directory_that_is_not_a_store_is_left_as_it_was_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    std::fs::write(dir.path().join("photos").join("a.jpg"), [0xff, 0xd8]).unwrap();
    let before = snapshot(dir.path());
    let opens = [
        mode.options(),
        Options {
            create_if_missing: false,
            ..mode.options()
        },
        read_only(mode),
    ];
    for opts in opens {
        let e = Store::open(dir.path(), opts.clone()).err().unwrap();
        assert!(matches!(e, Error::NotAStore { .. }), "{opts:?}: {e}");
        assert!(
            e.to_string().contains("notes.txt") || e.to_string().contains("photos"),
            "{e}"
        );
        assert!(
            snapshot(dir.path()) == before,
            "{opts:?} changed the directory"
        );
    }

    // Someone else's CURRENT (LevelDB has one).
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("CURRENT"), "MANIFEST-000001\n").unwrap();
    std::fs::write(other.path().join("MANIFEST-000001"), "not ours").unwrap();
    let before = snapshot(other.path());
    for opts in [mode.options(), read_only(mode)] {
        let e = Store::open(other.path(), opts.clone()).err().unwrap();
        assert!(matches!(e, Error::NotAStore { .. }), "{opts:?}: {e}");
        assert!(
            snapshot(other.path()) == before,
            "{opts:?} changed the directory"
        );
    }

    // An empty directory, opened without creating or read-only, stays
    // empty; a missing one is not created.
    let empty = tempfile::tempdir().unwrap();
    for opts in [
        Options {
            create_if_missing: false,
            ..mode.options()
        },
        read_only(mode),
    ] {
        let e = Store::open(empty.path(), opts.clone()).err().unwrap();
        assert!(matches!(e, Error::NotFound { .. }), "{e}");
        assert_eq!(std::fs::read_dir(empty.path()).unwrap().count(), 0);
        let missing = empty.path().join("nope");
        let e = Store::open(&missing, opts).err().unwrap();
        assert!(matches!(e, Error::NotFound { .. }), "{e}");
        assert!(!missing.exists());
    }

    // A real store's LOCK stays, whatever the open.
    let s = Store::open(empty.path(), mode.options()).unwrap();
    let e = Store::open(empty.path(), mode.options()).err().unwrap();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    drop(s);
    assert!(empty.path().join("LOCK").exists());
}
