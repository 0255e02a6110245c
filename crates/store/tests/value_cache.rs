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
