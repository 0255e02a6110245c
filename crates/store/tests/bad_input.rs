//! Clear errors for what users get wrong or what the machine does: a
//! missing directory, a file of another format, a full disk, a store locked
//! by another process, bad arguments.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::{capturing, value_for, Mode};
use gvault_store::{
    Error, FaultInjectingFs, FileSystem, Options, OsFs, Store, WriteBatch, WriteOptions,
};

both_modes!(
    missing_directory_without_create,
    missing_directory_without_create_in
);

fn missing_directory_without_create_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let opts = Options {
        create_if_missing: false,
        ..mode.options()
    };
    let e = Store::open(&missing, opts).err().unwrap();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    assert!(e.to_string().contains("nope"), "{e}");
    assert!(!missing.exists(), "open must not create the directory");

    // An existing but empty directory: not found, and left empty.
    let opts = Options {
        create_if_missing: false,
        ..mode.options()
    };
    let e = Store::open(dir.path(), opts).err().unwrap();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

both_modes!(
    directories_and_files_of_other_formats,
    directories_and_files_of_other_formats_in
);

fn directories_and_files_of_other_formats_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    // A directory with someone else's files.
    std::fs::write(dir.path().join("notes.txt"), "hello").unwrap();
    let e = Store::open(dir.path(), mode.options()).err().unwrap();
    assert!(matches!(e, Error::NotAStore { .. }), "{e}");
    assert!(e.to_string().contains("notes.txt"), "{e}");
    assert!(dir.path().join("notes.txt").exists());

    // A CURRENT file that is not ours.
    let d2 = tempfile::tempdir().unwrap();
    std::fs::write(d2.path().join("CURRENT"), "MANIFEST-000001\n").unwrap();
    let e = Store::open(d2.path(), mode.options()).err().unwrap();
    assert!(matches!(e, Error::NotAStore { .. }), "{e}");
    assert!(e.to_string().contains("magic"), "{e}");

    // A regular file where the directory should be.
    let f = dir.path().join("plain-file");
    std::fs::write(&f, "x").unwrap();
    let e = Store::open(&f, mode.options()).err().unwrap();
    assert!(
        matches!(e, Error::NotAStore { .. } | Error::Io { .. }),
        "{e}"
    );
}

both_modes!(invalid_arguments, invalid_arguments_in);

fn invalid_arguments_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let bad = Options {
        write_buffer_size: 10,
        ..mode.options()
    };
    let e = Store::open(dir.path(), bad).err().unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let s = Store::open(dir.path(), mode.options()).unwrap();
    let e = s.put(vec![0u8; (1 << 20) + 1], b"v").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = Store::open(
        dir.path(),
        Options {
            error_if_exists: true,
            ..mode.options()
        },
    );
    assert!(matches!(e.err().unwrap(), Error::Locked { .. }));
}

both_modes!(
    second_open_in_this_process_is_locked,
    second_open_in_this_process_is_locked_in
);

fn second_open_in_this_process_is_locked_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), mode.options()).unwrap();
    let e = Store::open(dir.path(), mode.options()).err().unwrap();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    assert!(e.to_string().contains("locked"), "{e}");
    s.close().unwrap();
    Store::open(dir.path(), mode.options()).unwrap();
}

/// Child side of `store_locked_by_another_process`.
#[test]
fn hold_lock_child() {
    let Ok(dir) = std::env::var("GVAULT_TEST_HOLD_LOCK") else {
        return;
    };
    let mode = match std::env::var("GVAULT_TEST_MODE").as_deref() {
        Ok("Encrypted") => Mode::Encrypted,
        _ => Mode::Plain,
    };
    let _s = Store::open(&dir, mode.options()).unwrap();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line); // until the parent closes stdin
}

both_modes!(
    store_locked_by_another_process,
    store_locked_by_another_process_in
);

fn store_locked_by_another_process_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    Store::open(dir.path(), mode.options())
        .unwrap()
        .close()
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "hold_lock_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GVAULT_TEST_HOLD_LOCK", dir.path())
        .env("GVAULT_TEST_MODE", format!("{mode:?}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
    }
    let e = Store::open(dir.path(), mode.options()).err().unwrap();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    drop(child.stdin.take());
    child.wait().unwrap();
    Store::open(dir.path(), mode.options()).unwrap();
}

fn faulty(mode: Mode) -> (Arc<FaultInjectingFs>, Options) {
    let fs = Arc::new(FaultInjectingFs::new(Arc::new(OsFs)));
    let opts = Options {
        fs: fs.clone() as Arc<dyn FileSystem>,
        ..mode.options()
    };
    (fs, opts)
}

/// Writes 5-key batches until the disk fills; returns acknowledged batches.
fn write_until_full(s: &Store) -> (u64, Error) {
    for b in 0.. {
        let mut batch = WriteBatch::new();
        for i in 0..5u64 {
            batch.put(
                format!("b{b:05}-{i}"),
                value_for(b, i, if i == 0 { 500 } else { 40 }),
            );
        }
        if let Err(e) = s.write(&WriteOptions { sync: b % 3 == 0 }, batch) {
            return (b, e);
        }
    }
    unreachable!()
}

fn check_batches(s: &Store, acked: u64) {
    for b in 0..acked + 1 {
        let present: Vec<bool> = (0..5u64)
            .map(|i| {
                let got = s.get(format!("b{b:05}-{i}")).unwrap();
                if let Some(v) = &got {
                    assert_eq!(v, &value_for(b, i, if i == 0 { 500 } else { 40 }));
                }
                got.is_some()
            })
            .collect();
        if b < acked {
            assert!(
                present.iter().all(|&p| p),
                "acknowledged batch {b} lost: {present:?}"
            );
        } else {
            assert!(
                present.iter().all(|&p| p) || present.iter().all(|&p| !p),
                "batch {b} half applied"
            );
        }
    }
}

both_modes!(full_disk_while_logging, full_disk_while_logging_in);

fn full_disk_while_logging_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let (fs, opts) = faulty(mode);
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    fs.set_space_left(Some(200_000));
    let (acked, e) = write_until_full(&s);
    assert!(acked > 10);
    let msg = e.to_string();
    assert!(msg.contains("No space left"), "{msg}");
    // Later writes fail too, naming the first failure; reads still work.
    let e2 = s.put(b"later", b"x").unwrap_err();
    assert!(
        matches!(e2, Error::Closed(_)) && e2.to_string().contains("No space left"),
        "{e2}"
    );
    assert!(s.get(b"b00000-0").unwrap().is_some());
    drop(s);

    fs.set_space_left(None);
    let (opts, _warnings) = capturing(opts);
    let s = Store::open(dir.path(), opts).unwrap();
    check_batches(&s, acked);
    s.put(b"after", b"space freed").unwrap();
    assert!(s.verify().unwrap().is_clean());
}

both_modes!(full_disk_while_flushing, full_disk_while_flushing_in);

fn full_disk_while_flushing_in(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let (fs, opts) = faulty(mode);
    let opts = Options {
        write_buffer_size: 1 << 20,
        ..opts
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for b in 0..200u64 {
        s.put(format!("k{b:04}"), value_for(b, 0, 60)).unwrap();
    }
    fs.set_space_left(Some(100));
    let e = s.flush().unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    let e2 = s.put(b"x", b"y").unwrap_err();
    assert!(e2.to_string().contains("No space left"), "{e2}");
    drop(s);
    fs.set_space_left(None);
    let s = Store::open(dir.path(), opts).unwrap();
    for b in 0..200u64 {
        assert_eq!(
            s.get(format!("k{b:04}")).unwrap(),
            Some(value_for(b, 0, 60))
        );
    }
    s.flush().unwrap();
    assert!(s.verify().unwrap().is_clean());
}

/// The disk fills during a re-encryption pass, at points spread over all
/// it writes (value-log files, tables, the manifest): the pass fails naming
/// the full disk, the old key stays, nothing is lost, and once space is back
/// the next pass (after a reopen) finishes the job.
#[test]
fn full_disk_while_reencrypting() {
    let value = |b: u64| value_for(b, 0, if b.is_multiple_of(3) { 3000 } else { 60 });
    // A store with its data key just rotated, and the old key's id.
    let rotated = |fs: &FaultInjectingFs, opts: &Options| {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path(), opts.clone()).unwrap();
        for b in 0..600u64 {
            s.put(format!("k{b:04}"), value(b)).unwrap();
        }
        s.compact_range(None, None).unwrap();
        let old = s.key_status().unwrap().current;
        s.rotate_data_key().unwrap();
        fs.set_space_left(Some(1 << 40));
        (dir, s, old)
    };
    let (fs, opts) = faulty(Mode::Encrypted);
    let opts = Options {
        reencrypt_bytes_per_sec: u64::MAX,
        ..opts
    };
    let (_dir, s, _) = rotated(&fs, &opts);
    s.reencrypt().unwrap();
    let pass_bytes = (1 << 40) - fs.space_left().unwrap();
    drop(s);
    assert!(pass_bytes > 100_000, "{pass_bytes}");
    for per_mille in [5, 100, 400, 700, 950, 995] {
        let space = pass_bytes * per_mille / 1000;
        fs.set_space_left(None);
        let (dir, s, old) = rotated(&fs, &opts);
        fs.set_space_left(Some(space));
        let e = s.reencrypt().unwrap_err();
        assert!(
            e.to_string().contains("No space left"),
            "space {space}: {e}"
        );
        let status = s.key_status().unwrap();
        assert!(status.keys.contains_key(&old), "space {space}: {status:?}");
        for b in 0..600u64 {
            assert_eq!(
                s.get(format!("k{b:04}")).unwrap(),
                Some(value(b)),
                "space {space}"
            );
        }
        drop(s);

        fs.set_space_left(None);
        let (opts, _warnings) = capturing(opts.clone());
        let s = Store::open(dir.path(), opts).unwrap();
        let report = s.reencrypt().unwrap();
        assert_eq!(report.keys_retired, vec![old], "space {space}: {report:?}");
        assert_eq!(s.key_status().unwrap().stale_files(), 0);
        for b in 0..600u64 {
            assert_eq!(
                s.get(format!("k{b:04}")).unwrap(),
                Some(value(b)),
                "space {space}"
            );
        }
        assert!(s.verify().unwrap().is_clean(), "space {space}");
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("reseal") || n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "space {space}: {leftovers:?}");
    }
}
