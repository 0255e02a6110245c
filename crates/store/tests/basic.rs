//! The API end to end: writes, reads, batches, snapshots, iteration in both
//! directions, flush, compaction, value-log GC, reopen, many threads.

mod common;

use std::sync::Arc;

use common::{small_options, value_for};
use gvault_store::{
    FaultInjectingFs, FileSystem, Options, OsFs, ReadOptions, Store, WriteBatch, WriteOptions,
};

fn scan_all(s: &Store, reverse: bool) -> Vec<(Vec<u8>, Vec<u8>)> {
    s.scan(&ReadOptions::default(), None, None, reverse)
        .unwrap()
        .map(|r| r.unwrap())
        .collect()
}

#[test]
fn put_get_delete_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_options()).unwrap();
    s.put(b"small", b"v").unwrap();
    let big = vec![7u8; 5000];
    s.put(b"big", &big).unwrap();
    s.put_opt(&WriteOptions::SYNC, b"gone", b"x").unwrap();
    s.delete(b"gone").unwrap();
    assert_eq!(s.get(b"small").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(s.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(s.get(b"gone").unwrap(), None);
    assert_eq!(s.get(b"never").unwrap(), None);
    s.close().unwrap();

    let s = Store::open(dir.path(), small_options()).unwrap();
    assert_eq!(s.get(b"small").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(s.get(b"big").unwrap(), Some(big.clone()));
    assert_eq!(s.get(b"gone").unwrap(), None);
    s.flush().unwrap();
    s.close().unwrap();

    let s = Store::open(dir.path(), small_options()).unwrap();
    assert_eq!(s.get(b"big").unwrap(), Some(big));
    assert_eq!(s.get(b"gone").unwrap(), None);
    assert!(s.verify().unwrap().is_clean());
}

#[test]
fn batches_snapshots_and_iteration() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_options()).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..10u32 {
        b.put(format!("k{i}"), format!("v{i}"));
    }
    s.write(&WriteOptions::default(), b).unwrap();
    let snap = s.snapshot();
    s.delete(b"k3").unwrap();
    s.put(b"k5", vec![b'x'; 500]).unwrap();
    s.put(b"k10", b"new").unwrap();

    let ro = ReadOptions {
        snapshot: Some(&snap),
    };
    assert_eq!(s.get_opt(&ro, b"k3").unwrap().as_deref(), Some(&b"v3"[..]));
    assert_eq!(s.get_opt(&ro, b"k5").unwrap().as_deref(), Some(&b"v5"[..]));
    assert_eq!(s.get_opt(&ro, b"k10").unwrap(), None);
    assert_eq!(s.get(b"k3").unwrap(), None);

    let fwd = scan_all(&s, false);
    let mut back = scan_all(&s, true);
    back.reverse();
    assert_eq!(fwd, back);
    assert_eq!(fwd.len(), 10);
    assert!(fwd.iter().all(|(k, _)| k != b"k3"));

    let old: Vec<_> = s
        .scan(&ro, Some(b"k2"), Some(b"k6"), false)
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(
        old,
        vec![
            b"k2".to_vec(),
            b"k3".to_vec(),
            b"k4".to_vec(),
            b"k5".to_vec()
        ]
    );
    let old_rev: Vec<_> = s
        .scan(&ro, Some(b"k2"), Some(b"k6"), true)
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(
        old_rev,
        vec![
            b"k5".to_vec(),
            b"k4".to_vec(),
            b"k3".to_vec(),
            b"k2".to_vec()
        ]
    );

    // Cursor zig-zag.
    let mut it = s.iter(&ReadOptions::default()).unwrap();
    it.seek(b"k4");
    assert_eq!(it.key(), b"k4");
    it.prev();
    assert_eq!(it.key(), b"k2");
    it.next();
    assert_eq!(it.key(), b"k4");
    it.next();
    assert_eq!(it.key(), b"k5");
    assert_eq!(it.value().unwrap(), vec![b'x'; 500]);
}

#[test]
fn flush_compaction_and_gc_keep_data() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        vlog_gc_every_flushes: 0, // GC only when asked, below
        ..small_options()
    };
    let s = Store::open(dir.path(), opts).unwrap();
    let mut expect = std::collections::BTreeMap::new();
    for round in 0..4u64 {
        for k in 0..400u64 {
            let len = if k % 3 == 0 { 300 } else { 20 };
            let v = value_for(k, round, len);
            let key = format!("key{k:05}");
            s.put(&key, &v).unwrap();
            expect.insert(key.into_bytes(), v);
        }
        for k in (0..400u64).step_by(7) {
            let key = format!("key{k:05}");
            s.delete(&key).unwrap();
            expect.remove(key.as_bytes());
        }
    }
    s.flush().unwrap();
    s.compact_range(None, None).unwrap();
    let stats = s.stats();
    assert!(stats.levels.iter().skip(1).any(|(n, _)| *n > 0), "{stats}");
    let before = stats.vlog_files;
    let report = s.gc_value_log().unwrap();
    assert!(report.files_dropped > 0, "{report:?}, {before} files");
    let got: std::collections::BTreeMap<_, _> = scan_all(&s, false).into_iter().collect();
    assert_eq!(got, expect);
    for (k, v) in &expect {
        assert_eq!(s.get(k).unwrap().as_ref(), Some(v));
    }
    let v = s.verify().unwrap();
    assert!(v.is_clean(), "{v}");
    s.close().unwrap();
    let s = Store::open(dir.path(), small_options()).unwrap();
    let got: std::collections::BTreeMap<_, _> = scan_all(&s, false).into_iter().collect();
    assert_eq!(got, expect);
}

#[test]
fn many_threads_share_one_handle() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(Store::open(dir.path(), small_options()).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..500u64 {
                    let key = format!("t{t}-{i:04}");
                    let sync = WriteOptions { sync: i % 50 == 0 };
                    s.put_opt(&sync, &key, value_for(i, t, (i % 5) as usize * 60 + 1))
                        .unwrap();
                    if i % 10 == 0 {
                        assert!(s.get(&key).unwrap().is_some());
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    for t in 0..4u64 {
        for i in 0..500u64 {
            let key = format!("t{t}-{i:04}");
            assert_eq!(
                s.get(&key).unwrap(),
                Some(value_for(i, t, (i % 5) as usize * 60 + 1))
            );
        }
    }
    assert_eq!(scan_all(&s, false).len(), 2000);
}

#[test]
fn concurrent_synced_writes_share_fsyncs() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FaultInjectingFs::new(Arc::new(OsFs)));
    fs.set_sync_delay(std::time::Duration::from_millis(2));
    let opts = Options {
        fs: fs.clone() as Arc<dyn FileSystem>,
        write_buffer_size: 4 << 20, // no flushes: count log syncs only
        ..small_options()
    };
    let s = Arc::new(Store::open(dir.path(), opts).unwrap());
    let before = fs.sync_count();
    let writes = 8 * 40;
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    s.put_opt(&WriteOptions::SYNC, format!("{t}-{i}"), b"v")
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let syncs = fs.sync_count() - before;
    assert!(
        syncs < writes / 2,
        "{syncs} fsyncs for {writes} synced writes"
    );
    assert_eq!(scan_all(&s, false).len(), writes as usize);
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn store_is_send_and_sync() {
    assert_send_sync::<Store>();
    assert_send_sync::<gvault_store::Snapshot>();
}

#[test]
fn default_options_work() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path().join("nested/store"), Options::default()).unwrap();
    s.put(b"a", b"b").unwrap();
    assert_eq!(s.get(b"a").unwrap().as_deref(), Some(&b"b"[..]));
}
