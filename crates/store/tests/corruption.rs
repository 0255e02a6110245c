//! Damage every kind of file (value log, table, manifest, pointer file) by
//! flipping bits, truncating, zeroing a block and swapping two blocks. The
//! store must then refuse to open, or report corruption on the reads that
//! touch the damage, naming the file; it must never return wrong data and
//! never panic, and `verify` must find whatever the reads did not.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{capturing, value_for, Mode};
use gvault_store::{block_extents_with, Error, ReadOptions, Store, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default(info);
    }));
}

/// A store with tables on two levels, several value-log files, flushed and
/// unflushed data, ending in a small synced sentinel group.
fn build(dir: &Path, mode: Mode) -> Model {
    let s = Store::open(dir, mode.options()).unwrap();
    let mut m = Model::new();
    let mut put = |s: &Store, k: u64, ver: u64| {
        let len = if k.is_multiple_of(4) { 1500 } else { 30 };
        let key = format!("key{k:04}").into_bytes();
        let v = value_for(k, ver, len);
        s.put(&key, &v).unwrap();
        m.insert(key, v);
    };
    for k in 0..300 {
        put(&s, k, 0);
    }
    s.flush().unwrap();
    // Every key, but not the unbounded range (which would also replace the
    // value-log head): the layout these cases were drawn for.
    s.compact_range(Some(b"key"), None).unwrap();
    for k in (0..300).step_by(3) {
        put(&s, k, 1);
    }
    s.flush().unwrap();
    for k in (0..300).step_by(5) {
        put(&s, k, 2);
    }
    s.put_opt(&WriteOptions::SYNC, b"zz-sentinel", b"end")
        .unwrap();
    m.insert(b"zz-sentinel".to_vec(), b"end".to_vec());
    // Dropped, not closed: `close` would flush the memtable and retire the
    // head, leaving no unflushed data and no last group to protect.
    drop(s);
    m
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    FlipBits,
    Truncate,
    ZeroBlock,
    SwapBlocks,
}

/// Damages `path`; returns false when the damage does not apply (a file
/// with a single block cannot have two swapped).
fn damage(path: &Path, how: Damage, rng: &mut StdRng, mode: Mode) -> bool {
    let enc = mode.encryption();
    let block_extents = |p: &Path| block_extents_with(p, enc.as_ref());
    let mut bytes = std::fs::read(path).unwrap();
    // The store was closed cleanly, so the manifest records the size of
    // every value-log file, the head included: no block is exempt.
    let blocks = block_extents(path).unwrap();
    let limit = bytes.len();
    match how {
        Damage::FlipBits => {
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..limit);
                bytes[i] ^= 1 << rng.gen_range(0..8);
            }
        }
        Damage::Truncate => {
            // Cut inside a block (cuts at block boundaries: tests/cut_log.rs).
            let (off, len) = blocks[rng.gen_range(0..blocks.len())];
            let cut = off + rng.gen_range(1..len.max(2));
            bytes.truncate(cut as usize);
        }
        Damage::ZeroBlock => {
            let (off, len) = blocks[rng.gen_range(0..blocks.len())];
            bytes[off as usize..(off + len) as usize].fill(0);
        }
        Damage::SwapBlocks => {
            let body: Vec<_> = blocks.iter().skip(1).copied().collect();
            if body.len() < 2 {
                return false;
            }
            // Prefer two blocks of equal size: a clean swap whose checksums
            // are individually valid.
            let a = rng.gen_range(0..body.len());
            let b = (0..body.len())
                .find(|&j| j != a && body[j].1 == body[a].1)
                .unwrap_or((a + 1) % body.len());
            let (x, y) = (body[a], body[b]);
            let n = x.1.min(y.1) as usize;
            let xa = bytes[x.0 as usize..x.0 as usize + n].to_vec();
            let ya = bytes[y.0 as usize..y.0 as usize + n].to_vec();
            if xa == ya {
                return false;
            }
            bytes[x.0 as usize..x.0 as usize + n].copy_from_slice(&ya);
            bytes[y.0 as usize..y.0 as usize + n].copy_from_slice(&xa);
        }
    }
    std::fs::write(path, bytes).unwrap();
    true
}

fn names_file(e: &Error, file: &Path) -> bool {
    let want = file.file_name().unwrap();
    match e {
        Error::Corruption { file, .. } => file.file_name() == Some(want),
        Error::NotAStore { path, .. } => path.file_name() == Some(want),
        _ => false,
    }
}

/// Opens the damaged store and reads everything. Returns whether the
/// damage was detected.
fn check(dir: &Path, file: &Path, model: &Model, what: &str, mode: Mode) -> bool {
    let (opts, warnings) = capturing(mode.options());
    let s = match Store::open(dir, opts) {
        Err(e) => {
            assert!(
                names_file(&e, file),
                "{what}: open failed without naming the file: {e}"
            );
            return true;
        }
        Ok(s) => s,
    };
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.is_empty(),
        "{what}: open of a cleanly closed store warned: {w:?}"
    );
    let mut detected = false;
    for (k, v) in model {
        match s.get(k) {
            Ok(Some(got)) => assert!(&got == v, "{what}: wrong value for {k:?}"),
            Ok(None) => panic!(
                "{what}: acknowledged key {:?} vanished",
                String::from_utf8_lossy(k)
            ),
            Err(e) => {
                assert!(
                    names_file(&e, file),
                    "{what}: get error does not name the file: {e}"
                );
                detected = true;
            }
        }
    }
    for reverse in [false, true] {
        let scan = match s.scan(&ReadOptions::default(), None, None, reverse) {
            Ok(scan) => scan,
            Err(e) => {
                assert!(
                    names_file(&e, file),
                    "{what}: scan error does not name the file: {e}"
                );
                detected = true;
                continue;
            }
        };
        for r in scan {
            match r {
                Ok((k, v)) => assert!(
                    model.get(&k) == Some(&v),
                    "{what}: scan returned wrong data for {k:?}"
                ),
                Err(e) => {
                    assert!(
                        names_file(&e, file),
                        "{what}: scan error does not name the file: {e}"
                    );
                    detected = true;
                }
            }
        }
    }
    let report = s.verify().unwrap();
    for p in &report.problems {
        assert!(
            names_file(p, file),
            "{what}: verify blames another file: {p}"
        );
    }
    let texts: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    let distinct: std::collections::BTreeSet<&String> = texts.iter().collect();
    assert_eq!(
        distinct.len(),
        texts.len(),
        "{what}: verify lists a problem twice: {texts:?}"
    );
    detected || !report.is_clean()
}

both_modes!(damaged_files_are_reported_never_misread, damaged_files);

fn damaged_files(mode: Mode) {
    count_panics();
    let base = tempfile::tempdir().unwrap();
    let pristine = base.path().join("pristine");
    let model = build(&pristine, mode);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&pristine)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !["LOCK", "KEYS"].contains(&p.file_name().unwrap().to_str().unwrap()))
        .collect();
    files.sort();
    let kinds = |ext: &str| {
        files
            .iter()
            .filter(|p| p.to_string_lossy().contains(ext))
            .count()
    };
    assert!(
        kinds(".vlog") >= 2
            && kinds(".sst") >= 2
            && kinds("MANIFEST") == 1
            && kinds("CURRENT") == 1
    );
    let seed = std::env::var("CORRUPTION_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cases = 0;
    for (fi, file) in files.iter().enumerate() {
        for how in [
            Damage::FlipBits,
            Damage::Truncate,
            Damage::ZeroBlock,
            Damage::SwapBlocks,
        ] {
            for trial in 0..3 {
                let dir = base.path().join(format!("case-{fi}-{how:?}-{trial}"));
                copy_dir(&pristine, &dir);
                let target = dir.join(file.file_name().unwrap());
                if !damage(&target, how, &mut rng, mode) {
                    continue;
                }
                let what = format!(
                    "{how:?} #{trial} of {}",
                    file.file_name().unwrap().to_string_lossy()
                );
                let detected = check(&dir, &target, &model, &what, mode);
                assert!(detected, "{what}: damage went unnoticed");
                cases += 1;
                std::fs::remove_dir_all(&dir).unwrap();
            }
        }
    }
    assert!(cases > 100, "only {cases} cases ran");
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a thread panicked");
}

both_modes!(torn_tail_of_the_value_log_is_cut_with_a_warning, torn_tail);

fn torn_tail(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let crash = dir.path().join("crash");
    let s = Store::open(dir.path().join("live"), mode.options()).unwrap();
    for i in 0..20u64 {
        s.put_opt(&WriteOptions::SYNC, format!("k{i}"), value_for(i, 0, 200))
            .unwrap();
    }
    // What a crash leaves: the files as they are while the store is open
    // (every write above synced), the head never sealed by a close.
    copy_dir(&dir.path().join("live"), &crash);
    drop(s);
    let log = std::fs::read_dir(&crash)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vlog"))
        .max()
        .unwrap();
    let len = std::fs::metadata(&log).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(len - 10).unwrap(); // the last group loses its end
    drop(f);

    let (opts, warnings) = capturing(mode.options());
    let s = Store::open(&crash, opts).unwrap();
    let w = warnings.lock().unwrap().clone();
    assert!(
        w.iter()
            .any(|m| m.contains("never completed") && m.contains("sequence 20 on")),
        "{w:?}"
    );
    for i in 0..19u64 {
        assert_eq!(s.get(format!("k{i}")).unwrap(), Some(value_for(i, 0, 200)));
    }
    assert_eq!(s.get("k19").unwrap(), None);
    // New writes land after the cut and survive another reopen.
    s.put_opt(&WriteOptions::SYNC, "after", "cut").unwrap();
    s.close().unwrap();
    let (opts, warnings) = capturing(mode.options());
    let s = Store::open(&crash, opts).unwrap();
    assert!(warnings.lock().unwrap().is_empty());
    assert_eq!(s.get("after").unwrap().as_deref(), Some(&b"cut"[..]));
    assert!(s.verify().unwrap().is_clean());
}
