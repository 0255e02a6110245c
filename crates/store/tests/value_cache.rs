//! Value-log values are cached opened and checked, in the block cache's
//! budget: a second read of a value does not go to its file. These tests
//! prove the cache is used (a value damaged on disk after it was cached
//! still reads back whole until the store is reopened), that a value too
//! large for the cache is never kept (damage is found at once), and that
//! gets and scans mixing cached and uncached values return the model.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{value_for, vlog_files as logs, Mode};
use gvault_store::{Error, Options, ReadOptions, Store, WriteBatch};

fn options(mode: Mode, cache: usize) -> Options {
    Options {
        encryption: mode.encryption(),
        block_cache_bytes: cache,
        read_ahead: Some(true),
        ..Options::default()
    }
}

/// Flips a byte in the middle of the largest value-log file: inside the
/// one 64 KiB value frame that makes up nearly all of it.
fn damage_the_value(dir: &Path) {
    let file = logs(dir)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    assert!(bytes.len() > 64 << 10, "{} bytes", bytes.len());
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x20;
    std::fs::write(&file, bytes).unwrap();
}

fn is_corruption(r: Result<Option<Vec<u8>>, Error>) -> bool {
    matches!(r, Err(Error::Corruption { .. }))
}

/// A store with a block cache of `cache` bytes holding one 64 KiB value
/// under "big", read once, then damaged on disk.
fn read_then_damaged(mode: Mode, cache: usize) -> (tempfile::TempDir, Store, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode, cache)).unwrap();
    let v = value_for(1, 0, 64 << 10);
    s.put(b"big", &v).unwrap();
    s.flush().unwrap();
    assert_eq!(s.get(b"big").unwrap().as_ref(), Some(&v));
    damage_the_value(dir.path());
    (dir, s, v)
}

fn cached_until_reopened(mode: Mode) {
    let (dir, s, v) = read_then_damaged(mode, 8 << 20);
    // Served from the cache: neither the get nor a scan reads the file.
    assert_eq!(s.get(b"big").unwrap().as_ref(), Some(&v));
    let scanned: Vec<_> = s
        .scan(&ReadOptions::default(), None, None, false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(scanned, vec![(b"big".to_vec(), v.clone())]);
    s.close().unwrap();
    // A fresh cache reads the file and finds the damage.
    let s = Store::open(dir.path(), options(mode, 8 << 20)).unwrap();
    assert!(is_corruption(s.get(b"big")));
    s.close().unwrap();
}
both_modes!(
    a_cached_value_is_read_from_memory_until_reopened,
    cached_until_reopened
);

fn too_large_is_not_kept(mode: Mode) {
    // 512 KiB of cache keeps values up to a sixteenth of it.
    let (_dir, s, _) = read_then_damaged(mode, 512 << 10);
    assert!(is_corruption(s.get(b"big")));
    s.close().unwrap();
}
both_modes!(
    a_value_too_large_for_the_cache_is_read_each_time,
    too_large_is_not_kept
);

fn mixed_hits_match_the_model(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode, 4 << 20)).unwrap();
    let mut model = BTreeMap::new();
    for k in 0..300u64 {
        let key = format!("key{k:04}").into_bytes();
        let v = value_for(k, 0, 2000 + (k as usize * 7919) % 20_000);
        s.put(&key, &v).unwrap();
        model.insert(key, v);
    }
    s.flush().unwrap();
    // Every third value is cached before the scan; the scan caches the
    // rest; the gets after it read them all from the cache.
    for (k, v) in model.iter().step_by(3) {
        assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
    }
    for round in 0..2 {
        let scanned: BTreeMap<_, _> = s
            .scan(&ReadOptions::default(), None, None, false)
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert!(scanned == model, "round {round}");
    }
    // A cursor's pinned values, cached or not, forward and back.
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut seen = BTreeMap::new();
    while it.valid() {
        seen.insert(it.key().to_vec(), it.value_pinned().unwrap().into_vec());
        it.next();
    }
    it.status().unwrap();
    assert!(seen == model);
    it.seek_to_last();
    let mut n = 0;
    while it.valid() {
        assert!(*it.value_pinned().unwrap() == *model[it.key()]);
        n += 1;
        it.prev();
    }
    assert_eq!(n, model.len());
    for (k, v) in &model {
        assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
        let pinned = s.get_pinned(&ReadOptions::default(), k).unwrap().unwrap();
        assert!(*pinned == **v);
    }
    s.close().unwrap();
}
both_modes!(
    gets_and_scans_over_cached_values_match_the_model,
    mixed_hits_match_the_model
);

/// `get_pinned` gives what `get` gives wherever the value lies: the
/// memtable, a table block (inline), the value log (cached, or too large
/// for the cache), at a snapshot, deleted, never written; and a pinned
/// value stays whole after the store moves on.
fn pinned_equals_get(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode, 1 << 20)).unwrap();
    let small = b"inline".to_vec();
    let mid = value_for(3, 0, 8 << 10);
    let huge = value_for(4, 0, 256 << 10);
    let mut b = WriteBatch::new();
    b.put(b"a-small", &small);
    b.put(b"b-mid", &mid);
    b.put(b"c-huge", &huge);
    b.put(b"d-gone", b"x");
    s.write(&Default::default(), b).unwrap();
    s.delete(b"d-gone").unwrap();
    let ro = ReadOptions::default();
    let check = |s: &Store, what: &str| {
        for key in [&b"a-small"[..], b"b-mid", b"c-huge", b"d-gone", b"e-never"] {
            let got = s.get_pinned(&ro, key).unwrap().map(|p| p.into_vec());
            assert_eq!(got, s.get(key).unwrap(), "{what}: {key:?}");
        }
    };
    check(&s, "memtable");
    s.flush().unwrap();
    check(&s, "tables, first read");
    check(&s, "tables, cached");
    let snap = s.snapshot();
    let held = s.get_pinned(&ro, b"b-mid").unwrap().unwrap();
    s.put(b"b-mid", b"new").unwrap();
    s.flush().unwrap();
    s.compact_range(None, None).unwrap();
    let at_snap = s
        .get_pinned(
            &ReadOptions {
                snapshot: Some(&snap),
            },
            b"b-mid",
        )
        .unwrap()
        .unwrap();
    assert!(*at_snap == *mid && *held == *mid);
    assert_eq!(&*s.get_pinned(&ro, b"b-mid").unwrap().unwrap(), b"new");
    drop(snap);
    s.close().unwrap();
    assert!(*held == *mid);
}
both_modes!(a_pinned_get_equals_a_get, pinned_equals_get);

/// Whether each held value (from `get_pinned`) is still the one the cache
/// holds for its key: a cursor's `value_pinned` shares a cached value and
/// copies any other, and holding the get's value keeps its address from
/// being reused.
fn still_cached(s: &Store, held: &[(Vec<u8>, gvault_store::PinnedValue)]) -> Vec<bool> {
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    held.iter()
        .map(|(k, v)| {
            it.seek(k);
            assert!(it.valid() && it.key() == &k[..]);
            let now = it.value_pinned().unwrap();
            assert!(*now == **v);
            now.as_ptr() == v.as_ptr()
        })
        .collect()
}

/// A 1 MiB cache under a store of 1000 values of 4 KiB (4x the cache).
fn store_larger_than_the_cache(mode: Mode) -> (tempfile::TempDir, Store, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode, 1 << 20)).unwrap();
    let keys: Vec<Vec<u8>> = (0..1000u64)
        .map(|k| format!("key{k:04}").into_bytes())
        .collect();
    for (k, key) in keys.iter().enumerate() {
        s.put(key, value_for(k as u64, 0, 4096)).unwrap();
    }
    s.compact_range(None, None).unwrap();
    (dir, s, keys)
}

/// Which of `keys` the cache holds a value for: a cursor's `value_pinned`
/// shares a cached value (two reads of one entry give one address) and
/// copies any other (two copies alive at once differ).
fn cached_keys(s: &Store, keys: &[Vec<u8>]) -> Vec<bool> {
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    keys.iter()
        .map(|k| {
            it.seek(k);
            assert!(it.valid() && it.key() == &k[..]);
            let (a, b) = (it.value_pinned().unwrap(), it.value_pinned().unwrap());
            a.as_ptr() == b.as_ptr()
        })
        .collect()
}

/// Issue 30: once the cache is full, a scan keeps none of the values it
/// reads, so a scan over more than the cache holds leaves it as it was:
/// what gets cached stays, and nothing the scan read comes in. (Before,
/// every value a scan read was inserted and evicted another, and 16
/// scanning threads contended on that churn.)
fn scan_leaves_gets_cached(mode: Mode) {
    let (_dir, s, keys) = store_larger_than_the_cache(mode);
    // Gets of every key fill the cache (and every table block) and evict;
    // then gets of every fifth key, touching every block again.
    for key in &keys {
        s.get(key).unwrap().unwrap();
    }
    let ro = ReadOptions::default();
    let held: Vec<_> = keys
        .iter()
        .step_by(5)
        .map(|k| (k.clone(), s.get_pinned(&ro, k).unwrap().unwrap()))
        .collect();
    let before = still_cached(&s, &held);
    let cached = before.iter().filter(|&&c| c).count();
    assert!(cached > 20, "only {cached} of {} gets cached", held.len());
    let all_before = cached_keys(&s, &keys);
    let n = all_before.iter().filter(|&&c| c).count();
    assert!(n > cached && n < keys.len() / 2, "{n} values cached");
    for round in 0..2 {
        let mut n = 0;
        for (i, r) in s.scan(&ro, None, None, false).unwrap().enumerate() {
            let (k, v) = r.unwrap();
            assert!(k == keys[i] && v == value_for(i as u64, 0, 4096));
            n += 1;
        }
        assert_eq!(n, keys.len());
        let after = still_cached(&s, &held);
        let lost = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| **b && !**a)
            .count();
        assert_eq!(
            lost, 0,
            "round {round}: the scan evicted {lost} of {cached}"
        );
        let all_after = cached_keys(&s, &keys);
        let came = all_before
            .iter()
            .zip(&all_after)
            .filter(|(b, a)| !**b && **a)
            .count();
        assert_eq!(came, 0, "round {round}: the scan cached {came} values");
        assert!(all_after == all_before, "round {round}");
    }
    s.close().unwrap();
}
both_modes!(
    a_scan_over_more_than_the_cache_leaves_it_in_place,
    scan_leaves_gets_cached
);

/// While the cache has room, a scan does cache the values it reads (a
/// warm-up scan of a store the cache holds serves later gets and scans
/// from memory).
fn scan_fills_room(mode: Mode) {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), options(mode, 16 << 20)).unwrap();
    for k in 0..500u64 {
        s.put(format!("key{k:04}"), value_for(k, 0, 4096)).unwrap();
    }
    s.compact_range(None, None).unwrap();
    let ro = ReadOptions::default();
    assert_eq!(s.scan(&ro, None, None, false).unwrap().count(), 500);
    let mut it = s.iter(&ro).unwrap();
    it.seek_to_first();
    let mut held = Vec::new();
    while it.valid() {
        held.push((it.key().to_vec(), it.value_pinned().unwrap()));
        it.next();
    }
    it.status().unwrap();
    assert_eq!(held.len(), 500);
    assert!(still_cached(&s, &held).iter().all(|&c| c));
    s.close().unwrap();
}
both_modes!(
    a_scan_caches_values_while_the_cache_has_room,
    scan_fills_room
);
