//! Forward iteration reads value-log values ahead in batches on encrypted
//! stores. These tests hold it to what a one-by-one read gives: the same
//! values (snapshots, overwrites, deletions, inline values), a damaged
//! frame failing only its own entry, and correct values after seeks, steps
//! back and changes of direction. Plain stores run them too.

mod common;

use std::collections::BTreeMap;

use common::{small_options, value_for, vlog_files as logs, Mode};
use gvault_store::{block_extents_with, DbIterator, Options, ReadOptions, Store};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn options(mode: Mode) -> Options {
    Options {
        encryption: mode.encryption(),
        // Big enough that values stay in a few files.
        vlog_file_size: 4 << 20,
        // Whatever this machine's core count.
        read_ahead: Some(true),
        ..small_options()
    }
}

fn key(k: u64) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

/// Values of 150 B to ~50 KB in the value log (large enough on average
/// that read-ahead does not back off), every fifth one inline.
fn value_len(k: u64, ver: u64) -> usize {
    if (k + ver).is_multiple_of(5) {
        40
    } else {
        150 + ((k * 7919 + ver * 11) % 50_000) as usize
    }
}

/// Writes `n` keys, overwrites a third, deletes a tenth, flushing between
/// rounds so entries live in tables of several levels and the memtable.
fn fill(s: &Store, n: u64, model: &mut Model) {
    for ver in 0..3u64 {
        for k in 0..n {
            if ver > 0 && k % 3 != ver % 3 {
                continue;
            }
            let v = value_for(k, ver, value_len(k, ver));
            s.put(key(k), &v).unwrap();
            model.insert(key(k), v);
        }
        for k in (ver..n).step_by(10) {
            if ver == 1 {
                s.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
        }
        if ver < 2 {
            s.flush().unwrap();
        }
    }
}

fn forward(it: &mut DbIterator) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    it.seek_to_first();
    while it.valid() {
        out.push((it.key().to_vec(), it.value().unwrap()));
        it.next();
    }
    it.status().unwrap();
    out
}

fn as_vec(m: &Model) -> Vec<(Vec<u8>, Vec<u8>)> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn iteration_equals_model(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode)).unwrap();
    let mut model = Model::new();
    fill(&s, 500, &mut model);
    let snap = s.snapshot();
    let old = model.clone();
    for k in (0..500).step_by(7) {
        let v = value_for(k, 9, value_len(k, 9));
        s.put(key(k), &v).unwrap();
        model.insert(key(k), v);
    }
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    assert_eq!(forward(&mut it), as_vec(&model));
    // Encrypted: nearly every value-log value came from a batch (the
    // first few of a run are read directly); plain stores never read ahead.
    let in_log = model.values().filter(|v| v.len() > 40).count() as u64;
    match mode {
        Mode::Encrypted => assert!(
            it.read_ahead_hits() >= in_log - 10,
            "{} of {in_log} values read ahead",
            it.read_ahead_hits()
        ),
        Mode::Plain | Mode::IndexOnly => assert_eq!(it.read_ahead_hits(), 0),
    }
    // The same cursor again from the start, and a snapshot's view.
    assert_eq!(forward(&mut it), as_vec(&model));
    let mut at_snap = s
        .iter(&ReadOptions {
            snapshot: Some(&snap),
        })
        .unwrap();
    assert_eq!(forward(&mut at_snap), as_vec(&old));
    // Asking for one value twice gives it twice.
    it.seek(&key(300));
    let v = it.value().unwrap();
    assert_eq!(it.value().unwrap(), v);
    it.next();
    assert_eq!(it.value().unwrap(), model[it.key()]);
}
both_modes!(iteration_equals_the_model, iteration_equals_model);

fn moves_after_read_ahead(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode)).unwrap();
    let mut model = Model::new();
    fill(&s, 500, &mut model);
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    let check = |it: &DbIterator, i: usize| {
        assert!(it.valid(), "cursor should be at entry {i}");
        assert_eq!(it.key(), &keys[i][..]);
        assert_eq!(it.value().unwrap(), model[&keys[i]], "value of entry {i}");
    };
    it.seek_to_first();
    for i in 0..40 {
        check(&it, i);
        it.next();
    }
    // Back over read-ahead values, then forward again past them.
    for i in (30..40).rev() {
        it.prev();
        check(&it, i);
    }
    for i in 31..250 {
        it.next();
        check(&it, i);
    }
    // A seek backwards and forwards, both into read-ahead ranges.
    let at = keys.iter().position(|k| k >= &key(100)).unwrap();
    it.seek(&key(100));
    for i in at..at + 50 {
        check(&it, i);
        it.next();
    }
    let at = keys.iter().position(|k| k >= &key(400)).unwrap();
    it.seek(&key(400));
    check(&it, at);
    it.seek_to_last();
    let last = keys.len() - 1;
    check(&it, last);
    it.prev();
    check(&it, last - 1);
    it.next();
    check(&it, last);
    it.next();
    assert!(!it.valid());
    it.status().unwrap();
}
both_modes!(seek_and_prev_after_read_ahead, moves_after_read_ahead);

/// A store of 120 values of 20 KB, one per key, written in key order so
/// that their frames follow the keys in one value-log file; returns that
/// file and each value's frame (offset, length).
struct KeyOrderedStore {
    _dir: tempfile::TempDir,
    s: Store,
    model: Model,
    log: std::path::PathBuf,
    frames: Vec<(u64, u64)>,
}

fn key_ordered_store(mode: Mode) -> KeyOrderedStore {
    let dir = tempfile::tempdir().unwrap();
    let opts = options(mode);
    let enc = opts.encryption.clone();
    let s = Store::open(dir.path(), opts).unwrap();
    let mut model = Model::new();
    for k in 0..120u64 {
        let v = value_for(k, 0, 20_000);
        s.put(key(k), &v).unwrap();
        model.insert(key(k), v);
    }
    s.flush().unwrap();
    let log = logs(dir.path()).remove(0);
    let frames: Vec<(u64, u64)> = block_extents_with(&log, enc.as_ref())
        .unwrap()
        .into_iter()
        .filter(|&(_, len)| len > 15_000)
        .collect();
    assert_eq!(frames.len(), 120);
    KeyOrderedStore {
        _dir: dir,
        s,
        model,
        log,
        frames,
    }
}

fn damaged_frame_fails_only_its_entry(mode: Mode) {
    // The damaged frame (the middle one) lies in the fourth batch.
    let KeyOrderedStore {
        _dir,
        s,
        model,
        log,
        frames,
    } = key_ordered_store(mode);
    // Flip a byte in the middle of one large frame, with the store open.
    let (off, len) = frames[frames.len() / 2];
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[(off + len / 2) as usize] ^= 0x40;
    std::fs::write(&log, bytes).unwrap();

    let mut it = s.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let (mut ok, mut failed) = (0, Vec::new());
    while it.valid() {
        let k = it.key().to_vec();
        match it.value() {
            Ok(v) => {
                assert_eq!(v, model[&k]);
                ok += 1;
            }
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                assert!(s.get(&k).is_err(), "a direct read of {k:?} succeeds");
                failed.push(k);
            }
        }
        it.next();
    }
    assert_eq!(failed.len(), 1, "exactly the damaged entry fails");
    assert_eq!(ok, 119);
    if mode == Mode::Encrypted {
        // The damaged frame was met in a batch, not read directly.
        assert!(it.read_ahead_hits() >= 114, "{}", it.read_ahead_hits());
    }
    // Entries before the damage read fine from a fresh cursor too, and the
    // damaged one still fails after a seek to it.
    it.seek(&failed[0]);
    assert!(it.value().is_err());
    it.next();
    assert!(it.value().is_ok());
}
both_modes!(
    damaged_frame_ahead_fails_only_its_entry,
    damaged_frame_fails_only_its_entry
);

/// A value-log file cut short under a running scan: only the entries whose
/// frames lie past the cut fail (each with its own corruption error, also
/// when they come from a read-ahead batch); everything before it reads.
fn cut_file_fails_only_entries_past_the_cut(mode: Mode) {
    let KeyOrderedStore {
        _dir,
        s,
        model,
        log,
        frames,
    } = key_ordered_store(mode);
    // Cut inside frame 90 (of key 90).
    let (off, len) = frames[90];
    let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
    f.set_len(off + len / 2).unwrap();
    drop(f);

    let mut it = s.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let (mut ok, mut failed) = (0u64, 0u64);
    while it.valid() {
        let k = it.key().to_vec();
        match it.value() {
            Ok(v) => {
                assert_eq!(v, model[&k]);
                assert!(ok < 90, "an entry past the cut read: {k:?}");
                ok += 1;
            }
            Err(e) => {
                assert!(e.is_corruption(), "{e}");
                failed += 1;
            }
        }
        it.next();
    }
    assert_eq!((ok, failed), (90, 30));
    if mode == Mode::Encrypted {
        // The entries around the cut came from batches, not direct reads.
        assert!(it.read_ahead_hits() >= 100, "{}", it.read_ahead_hits());
    }
}
both_modes!(
    cut_file_under_a_scan_fails_only_entries_past_the_cut,
    cut_file_fails_only_entries_past_the_cut
);

/// Random moves (runs of next, steps back, seeks, values skipped) land
/// on the model's entries with the model's values: seeks and turns while
/// the worker is building a batch never hand out a stale value.
fn random_walk_matches_model(mode: Mode) {
    use rand::{Rng, SeedableRng};
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode)).unwrap();
    let mut model = Model::new();
    fill(&s, 600, &mut model);
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x7ead);
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut at = Some(0usize);
    for step in 0..3000 {
        match rng.gen_range(0..100) {
            0..=79 => {
                it.next();
                at = at.and_then(|i| (i + 1 < keys.len()).then_some(i + 1));
            }
            80..=89 => {
                it.prev();
                at = at.and_then(|i| i.checked_sub(1));
            }
            90..=97 => {
                let k = key(rng.gen_range(0..650));
                it.seek(&k);
                at = keys.iter().position(|x| x >= &k);
            }
            _ => {
                it.seek_to_first();
                at = Some(0);
            }
        }
        if at.is_none() {
            assert!(!it.valid(), "step {step}: cursor should be past the end");
            it.status().unwrap();
            it.seek_to_first();
            at = Some(0);
        }
        let i = at.unwrap();
        assert!(it.valid(), "step {step}: cursor should be at entry {i}");
        assert_eq!(it.key(), &keys[i][..], "step {step}");
        // Values are sometimes not asked for: the cursor then moves past
        // entries the worker read.
        if rng.gen_bool(0.7) {
            assert_eq!(
                it.value().unwrap(),
                model[&keys[i]],
                "step {step}, entry {i}"
            );
        }
    }
    if mode == Mode::Encrypted {
        assert!(it.read_ahead_hits() > 100, "{}", it.read_ahead_hits());
    }
}
both_modes!(random_moves_match_the_model, random_walk_matches_model);

/// Iterators dropped while their worker reads (right after a run starts,
/// after a seek, mid-scan) neither hang nor keep the store from closing
/// and opening again.
fn dropped_with_work_in_flight(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode)).unwrap();
    let mut model = Model::new();
    fill(&s, 400, &mut model);
    for round in 0..30usize {
        let mut it = s.iter(&ReadOptions::default()).unwrap();
        it.seek(&key(round as u64 * 13));
        for _ in 0..round % 7 {
            if !it.valid() {
                break;
            }
            assert_eq!(it.value().unwrap(), model[it.key()]);
            it.next();
        }
        if round % 3 == 0 {
            // A seek while the worker builds, then gone.
            it.seek(&key(5));
            if it.valid() {
                it.value().unwrap();
            }
        }
        drop(it);
    }
    // One dropped mid-flight with the store closed right after.
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    it.value().unwrap();
    it.next();
    it.value().unwrap();
    drop(it);
    s.close().unwrap();
    let s = Store::open(dir.path(), options(mode)).unwrap();
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    assert_eq!(forward(&mut it), as_vec(&model));
}
both_modes!(dropped_mid_flight, dropped_with_work_in_flight);

/// With the default setting, only a few cursors read ahead at once (each
/// one's worker uses every core); while more are open, none does, and
/// they read ahead again once enough are dropped. Every cursor reads the
/// same data throughout.
#[test]
fn only_a_few_cursors_read_ahead_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        read_ahead: None,
        ..options(Mode::Encrypted)
    };
    let s = Store::open(dir.path(), opts).unwrap();
    let mut model = Model::new();
    fill(&s, 300, &mut model);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let places = (cores / gvault_store::options::CORES_PER_READ_AHEAD).max(1);
    let mut cursors: Vec<DbIterator> = (0..places)
        .map(|_| s.iter(&ReadOptions::default()).unwrap())
        .collect();
    for it in cursors.iter_mut() {
        assert_eq!(forward(it), as_vec(&model));
        assert!(
            it.read_ahead_hits() > 0,
            "a cursor with a place reads ahead"
        );
    }
    // One more: no place for it, and while it is open none reads ahead.
    let mut extra = s.iter(&ReadOptions::default()).unwrap();
    assert_eq!(forward(&mut extra), as_vec(&model));
    assert_eq!(extra.read_ahead_hits(), 0);
    let before = cursors[0].read_ahead_hits();
    assert_eq!(forward(&mut cursors[0]), as_vec(&model));
    assert_eq!(
        cursors[0].read_ahead_hits(),
        before,
        "crowded, yet read ahead"
    );
    // Once it is gone, the cursors with places read ahead again.
    drop(extra);
    assert_eq!(forward(&mut cursors[0]), as_vec(&model));
    assert!(cursors[0].read_ahead_hits() > before);
}
