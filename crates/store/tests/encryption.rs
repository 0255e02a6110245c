//! Encryption at rest: blocks from elsewhere fail to open, keys are checked
//! before any data is read, no (key, nonce) pair seals twice, and rotation
//! moves every file to the new key and retires the old one.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};

use common::{small_options, value_for, Mode};
use gvault_store::{block_extents_with, Encryption, Error, KdfParams, Options, Store};

/// (data-key id, nonce) of one seal.
type SealUse = (u32, [u8; 12]);

fn enc() -> Encryption {
    Mode::Encrypted.encryption().unwrap()
}

fn fill_len(k: u64) -> usize {
    if k.is_multiple_of(4) {
        400
    } else {
        30
    }
}

fn fill(s: &Store, n: u64, ver: u64) {
    for k in 0..n {
        s.put(format!("key{k:04}"), value_for(k, ver, fill_len(k)))
            .unwrap();
    }
}

/// Every key `fill(s, n, ver)` wrote reads back.
fn check_fill(s: &Store, n: u64, ver: u64) {
    for k in 0..n {
        let v = s.get(format!("key{k:04}")).unwrap();
        assert_eq!(v, Some(value_for(k, ver, fill_len(k))), "key {k}");
    }
}

/// Encrypted options whose re-encryption passes are not throttled.
fn fast_passes() -> Options {
    Options {
        reencrypt_bytes_per_sec: 1 << 30,
        ..Mode::Encrypted.options()
    }
}

fn tables(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut t: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .collect();
    t.sort();
    t
}

fn first_data_block(path: &Path) -> (u64, u64) {
    block_extents_with(path, Some(&enc())).unwrap()[1]
}

/// Reads every key; true if any read or the verify pass reports corruption.
fn detects(dir: &Path) -> bool {
    let s = match Store::open(dir, Mode::Encrypted.options()) {
        Ok(s) => s,
        Err(e) => return e.is_corruption(),
    };
    let mut found = false;
    for k in 0..200u64 {
        match s.get(format!("key{k:04}")) {
            Ok(Some(v)) => {
                assert!(v.starts_with(format!("{k}:").as_bytes()), "misread key {k}")
            }
            Ok(None) => {}
            Err(e) => found |= e.is_corruption(),
        }
    }
    found || s.verify().is_err()
}

fn build(dir: &Path, opts: Options) {
    let s = Store::open(dir, opts).unwrap();
    fill(&s, 200, 0);
    s.flush().unwrap();
    fill(&s, 200, 1);
    s.flush().unwrap();
    // Dropped, not closed: `close` would merge the two level-0 tables
    // (level 0 is all the data of so small a store), and the tests below
    // need two tables.
    drop(s);
}

#[test]
fn blocks_from_another_file_or_store_fail_to_open() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let opts = Options {
        l0_compaction_trigger: 4,
        ..Mode::Encrypted.options()
    };
    build(a.path(), opts.clone());
    // Same master key, another store: its data keys and store id differ.
    build(b.path(), opts);
    let ta = tables(a.path());
    let tb = tables(b.path());
    assert!(ta.len() >= 2 && !tb.is_empty());

    // A block copied from another table of the same store, same offset.
    let (off, len) = first_data_block(&ta[0]);
    let other = std::fs::read(&ta[1]).unwrap();
    let mut bytes = std::fs::read(&ta[0]).unwrap();
    bytes[off as usize..(off + len) as usize]
        .copy_from_slice(&other[off as usize..(off + len) as usize]);
    let c = tempfile::tempdir().unwrap();
    common_copy(a.path(), c.path());
    std::fs::write(c.path().join(ta[0].file_name().unwrap()), &bytes).unwrap();
    assert!(detects(c.path()), "block from another file was accepted");

    // The whole file copied from another store under the same name.
    let c = tempfile::tempdir().unwrap();
    common_copy(a.path(), c.path());
    let theirs = std::fs::read(&tb[0]).unwrap();
    let mut ours = std::fs::read(&ta[0]).unwrap();
    let (off, len) = first_data_block(&ta[0]);
    let n = (len as usize).min(theirs.len() - off as usize);
    ours[off as usize..off as usize + n].copy_from_slice(&theirs[off as usize..off as usize + n]);
    std::fs::write(c.path().join(ta[0].file_name().unwrap()), &ours).unwrap();
    assert!(detects(c.path()), "block from another store was accepted");
}

fn common_copy(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

#[test]
fn old_pointer_and_registry_replayed_in_place_fail() {
    let a = tempfile::tempdir().unwrap();
    build(a.path(), Mode::Encrypted.options());
    let old_current = std::fs::read(a.path().join("CURRENT")).unwrap();
    let old_keys = std::fs::read(a.path().join("KEYS")).unwrap();
    // Reopening writes a new manifest and pointer; rotation a new registry.
    let s = Store::open(a.path(), Mode::Encrypted.options()).unwrap();
    s.rotate_data_key().unwrap();
    fill(&s, 50, 2);
    s.flush().unwrap();
    s.close().unwrap();
    let c = tempfile::tempdir().unwrap();
    common_copy(a.path(), c.path());
    std::fs::write(c.path().join("CURRENT"), &old_current).unwrap();
    match Store::open(c.path(), Mode::Encrypted.options()) {
        Err(e) => assert!(e.is_corruption(), "{e}"),
        Ok(_) => panic!("an old pointer file was accepted"),
    }
    // An old registry lacks the new data key: the files under it are refused.
    let c = tempfile::tempdir().unwrap();
    common_copy(a.path(), c.path());
    std::fs::write(c.path().join("KEYS"), &old_keys).unwrap();
    assert!(detects(c.path()), "an old key registry was accepted");
}

#[test]
fn missing_wrong_key_and_damaged_registry_are_clear_errors() {
    let a = tempfile::tempdir().unwrap();
    build(a.path(), Mode::Encrypted.options());
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name(), e.metadata().unwrap().len())
            })
            .collect();
        v.sort();
        v
    };
    let before = listing(a.path());
    match Store::open(a.path(), small_options()) {
        Err(Error::KeyRequired { .. }) => {}
        r => panic!("expected KeyRequired, got {:?}", r.err()),
    }
    let wrong = Encryption::with_key(gvault_store::keys::generate_key());
    match Store::open(
        a.path(),
        Options {
            encryption: Some(wrong),
            ..small_options()
        },
    ) {
        Err(Error::WrongKey { .. }) => {}
        r => panic!("expected WrongKey, got {:?}", r.err()),
    }
    assert_eq!(before, listing(a.path()), "a failed open touched files");

    let keys = a.path().join("KEYS");
    let full = std::fs::read(&keys).unwrap();
    for cut in [0, 10, 47, 63, full.len() - 1] {
        std::fs::write(&keys, &full[..cut]).unwrap();
        let e = Store::open(a.path(), Mode::Encrypted.options())
            .err()
            .unwrap();
        assert!(
            e.is_corruption() || matches!(e, Error::WrongKey { .. }),
            "cut {cut}: {e}"
        );
    }
    std::fs::write(&keys, &full).unwrap();
    // An unencrypted store opened with a key: refused.
    let p = tempfile::tempdir().unwrap();
    build(p.path(), small_options());
    assert!(matches!(
        Store::open(p.path(), Mode::Encrypted.options()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn passphrase_store_and_master_rotation() {
    let cheap = KdfParams {
        m_cost_kib: 64,
        t_cost: 1,
        p_cost: 1,
    };
    let pass = |p: &str| Encryption {
        kdf: cheap,
        ..Encryption::with_passphrase(p)
    };
    let d = tempfile::tempdir().unwrap();
    let opts = |e: Encryption| Options {
        encryption: Some(e),
        ..small_options()
    };
    let s = Store::open(d.path(), opts(pass("correct horse"))).unwrap();
    s.put("k", "v").unwrap();
    s.close().unwrap();
    assert!(matches!(
        Store::open(d.path(), opts(pass("wrong horse"))),
        Err(Error::WrongKey { .. })
    ));
    assert!(matches!(
        Store::open(d.path(), opts(enc())),
        Err(Error::WrongKey { .. })
    ));
    let s = Store::open(d.path(), opts(pass("correct horse"))).unwrap();
    s.rotate_master_key(&enc()).unwrap();
    s.close().unwrap();
    assert!(Store::open(d.path(), opts(pass("correct horse"))).is_err());
    let s = Store::open(d.path(), opts(enc())).unwrap();
    assert_eq!(s.get("k").unwrap().unwrap(), b"v");
}

#[test]
fn no_key_nonce_pair_seals_twice_and_rotation_retires_keys() {
    let seen: Arc<Mutex<Vec<SealUse>>> = Arc::default();
    let obs = seen.clone();
    let d = tempfile::tempdir().unwrap();
    let opts = Options {
        seal_observer: Some(Arc::new(move |k, n| obs.lock().unwrap().push((k, n)))),
        vlog_gc_every_flushes: 1,
        vlog_gc_discard_ratio: 0.1,
        reencrypt_bytes_per_sec: 1 << 30,
        ..Mode::Encrypted.options()
    };
    for round in 0..3u64 {
        let s = Arc::new(Store::open(d.path(), opts.clone()).unwrap());
        for v in 0..3 {
            fill(&s, 300, round * 10 + v);
            s.flush().unwrap();
        }
        s.compact_range(None, None).unwrap();
        s.gc_value_log().unwrap();
        let new = s.rotate_data_key().unwrap();
        fill(&s, 100, round * 10 + 5);
        let report = s.spawn_reencrypt().join().unwrap().unwrap();
        let status = s.key_status().unwrap();
        assert_eq!(status.current, new);
        assert_eq!(
            status.stale_files(),
            0,
            "round {round}: {status:?} {report:?}"
        );
        assert_eq!(status.keys.len(), 1, "old keys not retired: {status:?}");
        assert!(!report.keys_retired.is_empty());
        for k in 0..300u64 {
            let v = s.get(format!("key{k:04}")).unwrap().unwrap();
            let ver = if k < 100 {
                round * 10 + 5
            } else {
                round * 10 + 2
            };
            assert_eq!(v, value_for(k, ver, if k % 4 == 0 { 400 } else { 30 }));
        }
        s.verify().unwrap();
        drop(s);
    }
    let seen = seen.lock().unwrap();
    let unique: HashSet<_> = seen.iter().collect();
    assert!(seen.len() > 1000, "only {} seals observed", seen.len());
    assert_eq!(
        unique.len(),
        seen.len(),
        "a (key, nonce) pair was used twice"
    );
}

#[test]
fn reencrypt_with_everything_already_flushed_moves_every_file() {
    // Large values in one value-log file, all flushed: the replay pointer
    // sits in that file when the pass starts, with nothing left to flush.
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(
        d.path(),
        Options {
            vlog_file_size: 1 << 20,
            reencrypt_bytes_per_sec: 1 << 30,
            ..Mode::Encrypted.options()
        },
    )
    .unwrap();
    fill(&s, 200, 7);
    s.flush().unwrap();
    let old = s.key_status().unwrap().current;
    // The pointer file counts as a live file: its key is never retired
    // while it names one.
    assert!(s.key_status().unwrap().keys[&old].contains(&"CURRENT".to_string()));
    let new = s.rotate_data_key().unwrap();
    let report = s.reencrypt().unwrap();
    let status = s.key_status().unwrap();
    assert_eq!(status.stale_files(), 0, "{status:?} {report:?}");
    assert_eq!(report.keys_retired, vec![old]);
    assert_eq!(status.retired, vec![old]);
    assert!(
        status.keys[&new].contains(&"CURRENT".to_string()),
        "{status:?}"
    );
    check_fill(&s, 200, 7);
    s.close().unwrap();
    let s = Store::open(d.path(), Mode::Encrypted.options()).unwrap();
    assert!(s.verify().unwrap().is_clean());
}

fn files_with(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut t: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    t.sort();
    t
}

/// Every file's bytes, by name (the lock file aside).
fn dir_bytes(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name() != "LOCK")
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn holds(path: &Path, needle: &[u8]) -> bool {
    std::fs::read(path)
        .unwrap()
        .windows(needle.len())
        .any(|w| w == needle)
}

#[test]
fn index_only_store_seals_tables_not_the_value_log() {
    let d = tempfile::tempdir().unwrap();
    let index_only = |seal: Option<bool>| Options {
        encryption: Some(Encryption {
            seal_value_log: seal,
            ..enc()
        }),
        reencrypt_bytes_per_sec: 1 << 30,
        ..Mode::Encrypted.options()
    };
    let s = Store::open(d.path(), index_only(Some(false))).unwrap();
    fill(&s, 200, 3);
    s.flush().unwrap();
    s.compact_range(None, None).unwrap();
    // A large value (past `value_threshold`) lives in the value log, in the
    // clear; tables and manifests hold no key or value in the clear.
    let big = value_for(4, 3, 400);
    assert!(files_with(d.path(), "vlog").iter().any(|p| holds(p, &big)));
    for ext in ["sst", "manifest"] {
        for p in files_with(d.path(), ext) {
            assert!(!holds(&p, b"key0004"), "{} holds a key", p.display());
        }
    }
    let status = s.key_status().unwrap();
    assert!(!status.unsealed.is_empty(), "{status:?}");
    assert_eq!(status.stale_files(), 0, "{status:?}");

    // Rotation re-seals tables and manifest and leaves the value log.
    let old = status.current;
    s.rotate_data_key().unwrap();
    fill(&s, 50, 4);
    let report = s.reencrypt().unwrap();
    let status = s.key_status().unwrap();
    assert_eq!(status.stale_files(), 0, "{status:?} {report:?}");
    assert_eq!(report.keys_retired, vec![old]);
    assert_eq!(report.logs_rewritten, 0);
    s.close().unwrap();

    // The mode is the store's: unset opens it, the other setting is refused
    // before anything is read or written.
    let s = Store::open(d.path(), index_only(None)).unwrap();
    for k in 0..200u64 {
        let ver = if k < 50 { 4 } else { 3 };
        let len = if k % 4 == 0 { 400 } else { 30 };
        assert_eq!(
            s.get(format!("key{k:04}")).unwrap().unwrap(),
            value_for(k, ver, len)
        );
    }
    assert!(s.verify().unwrap().is_clean());
    s.close().unwrap();
    let before = dir_bytes(d.path());
    match Store::open(d.path(), index_only(Some(true))) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("index-only"), "{why}"),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a fully sealed open of an index-only store was accepted"),
    }
    assert_eq!(before, dir_bytes(d.path()));

    // And a fully sealed store refuses to become index-only.
    let f = tempfile::tempdir().unwrap();
    build(f.path(), Mode::Encrypted.options());
    assert!(matches!(
        Store::open(f.path(), index_only(Some(false))),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_crc_value_log_file_is_refused_by_a_sealed_store() {
    // Same writes into an index-only and a fully sealed store (same master
    // key): same file numbers. The index-only store's value-log file
    // (CRC32C, key 0) put in place of the sealed one must not be read:
    // only an index-only store accepts key 0, and only for value-log files.
    let sealed = tempfile::tempdir().unwrap();
    let plain = tempfile::tempdir().unwrap();
    // No GC rewrites: which files one would leave depends on the
    // background thread's timing, and the two stores must keep the same.
    let no_gc = Options {
        vlog_gc_every_flushes: 0,
        ..Mode::Encrypted.options()
    };
    build(sealed.path(), no_gc.clone());
    let index_only = Options {
        encryption: Some(Encryption {
            seal_value_log: Some(false),
            ..enc()
        }),
        ..no_gc
    };
    build(plain.path(), index_only);
    let ours = files_with(sealed.path(), "vlog");
    let theirs = files_with(plain.path(), "vlog");
    let mut replaced = 0;
    for p in &theirs {
        let name = p.file_name().unwrap();
        if ours.iter().any(|o| o.file_name() == Some(name)) {
            let c = tempfile::tempdir().unwrap();
            common_copy(sealed.path(), c.path());
            std::fs::copy(p, c.path().join(name)).unwrap();
            assert!(detects(c.path()), "{name:?} under CRC32C was accepted");
            replaced += 1;
        }
    }
    assert!(
        replaced > 0,
        "no value-log file in common: {ours:?} {theirs:?}"
    );
}

/// A flush reads the current data key when it seals its table, and puts
/// the table in the version only after writing it. A rotation and a whole
/// re-encryption pass in between must not retire that key: CI's crash test
/// once left a store that would not open ("sealed with data key 3, which
/// the key registry does not hold"). Here the flush is held inside its seal
/// while the pass runs.
#[test]
fn a_key_sealing_a_table_not_yet_installed_is_never_retired() {
    type Gate = (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>);
    let gate: Arc<Mutex<Option<Gate>>> = Arc::default();
    let g = gate.clone();
    let d = tempfile::tempdir().unwrap();
    let base = fast_passes();
    let opts = Options {
        seal_observer: Some(Arc::new(move |_, _| {
            if std::thread::current().name() != Some("gvault-store-flush") {
                return;
            }
            let Some((paused, resume)) = g.lock().unwrap().take() else {
                return;
            };
            paused.send(()).unwrap();
            resume.recv().unwrap();
        })),
        ..base.clone()
    };
    let s = Arc::new(Store::open(d.path(), opts).unwrap());
    fill(&s, 200, 1);
    let (paused_tx, paused_rx) = std::sync::mpsc::channel();
    let (resume_tx, resume_rx) = std::sync::mpsc::channel();
    *gate.lock().unwrap() = Some((paused_tx, resume_rx));
    let flusher = {
        let s = s.clone();
        std::thread::spawn(move || s.flush())
    };
    paused_rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("the flush never sealed a block");
    let old = s.key_status().unwrap().current;
    let new = s.rotate_data_key().unwrap();
    let report = s.reencrypt().unwrap();
    assert!(
        !report.keys_retired.contains(&old),
        "key {old} retired while a table was being sealed under it: {report:?}"
    );
    resume_tx.send(()).unwrap();
    flusher.join().unwrap().unwrap();
    let status = s.key_status().unwrap();
    assert_eq!(status.current, new);
    assert!(status.keys[&old].iter().any(|f| f.ends_with(".sst")));
    Arc::try_unwrap(s).ok().unwrap().close().unwrap();

    // The store opens, and the next pass moves the table and retires the key.
    let s = Store::open(d.path(), base.clone()).unwrap();
    let report = s.reencrypt().unwrap();
    assert!(report.keys_retired.contains(&old), "{report:?}");
    s.close().unwrap();
    let s = Store::open(d.path(), base).unwrap();
    check_fill(&s, 200, 1);
    assert!(s.verify().unwrap().is_clean());
}

/// An iterator opened before a rotation keeps reading the files it holds
/// (already replaced by their re-sealed copies, under a key since retired)
/// after a second rotation: the codec forgets no key while the store is
/// open. Before, the second rotation dropped the retired key and the
/// iterator failed with "data key 1 is not in the key registry".
#[test]
fn an_iterator_outlives_rotation_retirement_and_another_rotation() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(
        d.path(),
        Options {
            reencrypt_bytes_per_sec: 1 << 30,
            block_cache_bytes: 0,
            ..Mode::Encrypted.options()
        },
    )
    .unwrap();
    fill(&s, 300, 1);
    s.compact_range(None, None).unwrap();
    let mut it = s.iter(&gvault_store::ReadOptions::default()).unwrap();
    it.seek_to_first();
    assert!(it.valid());
    let first = s.key_status().unwrap().current;
    s.rotate_data_key().unwrap();
    let report = s.reencrypt().unwrap();
    assert!(report.keys_retired.contains(&first), "{report:?}");
    s.rotate_data_key().unwrap();
    let mut n = 0u64;
    while it.valid() {
        assert_eq!(it.key(), format!("key{n:04}").as_bytes());
        assert_eq!(it.value().unwrap(), value_for(n, 1, fill_len(n)));
        n += 1;
        it.next();
    }
    it.status().unwrap();
    assert_eq!(n, 300);
}

/// A pass rewrites the manifest and then the pointer file. Rotations
/// between the two and just after leave the pointer under a key that is
/// neither the manifest's nor the current one: retirement must keep it
/// (before, it was retired and the store would not open). The rotations
/// run from the seal observer, at the new manifest's first block and at
/// the pointer's block.
#[test]
fn rotations_around_the_pointer_file_never_retire_its_key() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{OnceLock, Weak};
    const POINTER_BLOCK: u32 = u32::MAX - 1;
    let store: Arc<OnceLock<Weak<Store>>> = Arc::default();
    // File numbers at or above this are new (0: not armed yet).
    let first_new = Arc::new(AtomicU64::new(0));
    let (st, fnew) = (store.clone(), first_new.clone());
    let fired: Arc<Mutex<Vec<u32>>> = Arc::default();
    let f = fired.clone();
    let d = tempfile::tempdir().unwrap();
    let base = fast_passes();
    let opts = Options {
        seal_observer: Some(Arc::new(move |_, nonce| {
            let file = u64::from_be_bytes(nonce[..8].try_into().unwrap());
            let block = u32::from_be_bytes(nonce[8..].try_into().unwrap());
            let min = fnew.load(Ordering::SeqCst);
            if min == 0 || file < min || (block != 0 && block != POINTER_BLOCK) {
                return;
            }
            let mut fired = f.lock().unwrap();
            if fired.contains(&block) {
                return;
            }
            fired.push(block);
            drop(fired);
            let s = st.get().and_then(Weak::upgrade).expect("store is open");
            s.rotate_data_key().unwrap();
        })),
        ..base.clone()
    };
    let s = Arc::new(Store::open(d.path(), opts).unwrap());
    store.set(Arc::downgrade(&s)).unwrap();
    fill(&s, 200, 1);
    s.flush().unwrap();
    s.rotate_data_key().unwrap();
    let newest = std::fs::read_dir(d.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let digits: String = name.chars().filter(char::is_ascii_digit).collect();
            digits.parse::<u64>().ok()
        })
        .max()
        .unwrap();
    first_new.store(newest + 1, Ordering::SeqCst);
    s.reencrypt().unwrap();
    assert_eq!(
        *fired.lock().unwrap(),
        vec![0, POINTER_BLOCK],
        "the rotations did not happen where meant"
    );
    let status = s.key_status().unwrap();
    drop(s);
    let s = Store::open(d.path(), base).unwrap();
    // The interleaving happened: the pointer was under an older key than
    // the current one, and that key was kept.
    let pointer_key = status
        .keys
        .iter()
        .find(|(_, files)| files.iter().any(|f| f == "CURRENT"))
        .map(|(k, _)| *k)
        .expect("CURRENT is listed");
    assert_ne!(pointer_key, status.current, "{status:?}");
    check_fill(&s, 200, 1);
    assert!(s.verify().unwrap().is_clean());
    let report = s.reencrypt().unwrap();
    assert_eq!(s.key_status().unwrap().stale_files(), 0, "{report:?}");
}
