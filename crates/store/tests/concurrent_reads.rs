//! Gets take the published read view without a lock. Readers race
//! flushes, compactions and value-log GC (which drops files holding values
//! the readers' views still point into): every get must return the value
//! of its own key at a version no older than one it has already seen, and
//! never an error.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{small_options, value_for};
use gvault_store::{Options, ReadOptions, Store, WriteOptions};

const KEYS: u64 = 200;

fn key(k: u64) -> String {
    format!("key{k:04}")
}

/// Values name their key and version ("k:ver:..."); large ones live in the
/// value log.
fn parse(v: &[u8]) -> (u64, u64) {
    let s = std::str::from_utf8(&v[..v.len().min(24)]).unwrap_or("");
    let mut it = s.split(':');
    let k = it
        .next()
        .and_then(|x| x.parse().ok())
        .expect("key in value");
    let ver = it
        .next()
        .and_then(|x| x.parse().ok())
        .expect("version in value");
    (k, ver)
}

#[test]
fn readers_race_flush_compaction_and_gc() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        vlog_gc_every_flushes: 1,
        vlog_gc_discard_ratio: 0.2,
        ..small_options()
    };
    let s = Arc::new(Store::open(dir.path(), opts).unwrap());
    for k in 0..KEYS {
        s.put(key(k), value_for(k, 0, 300)).unwrap();
    }
    let version = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|r| {
            let (s, stop, version) = (s.clone(), stop.clone(), version.clone());
            std::thread::spawn(move || {
                let mut seen = vec![0u64; KEYS as usize];
                let mut gets = 0u64;
                let mut buf = Vec::new();
                let mut x = r as u64 + 1;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = x % KEYS;
                    let floor = version.load(Ordering::SeqCst);
                    // Half the readers fill one reused buffer.
                    let v = if r % 2 == 0 {
                        s.get(key(k))
                            .unwrap_or_else(|e| panic!("get {k}: {e}"))
                            .unwrap_or_else(|| panic!("key {k} vanished"))
                    } else {
                        let found = s
                            .get_into(&ReadOptions::default(), key(k), &mut buf)
                            .unwrap_or_else(|e| panic!("get_into {k}: {e}"));
                        assert!(found, "key {k} vanished");
                        buf.clone()
                    };
                    let (got_k, got_ver) = parse(&v);
                    assert_eq!(got_k, k, "value of another key");
                    assert_eq!(v, value_for(k, got_ver, 300), "damaged value");
                    assert!(got_ver >= seen[k as usize], "went back in time");
                    // Every key was rewritten at `floor` before it was published.
                    assert!(got_ver >= floor, "missed a completed write");
                    seen[k as usize] = got_ver;
                    gets += 1;
                }
                gets
            })
        })
        .collect();
    for ver in 1..=60 {
        for k in 0..KEYS {
            s.put(key(k), value_for(k, ver, 300)).unwrap();
        }
        version.store(ver, Ordering::SeqCst);
        if ver.is_multiple_of(3) {
            s.gc_value_log().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let gets: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(gets > 1000, "only {gets} gets ran");
    let st = s.stats();
    assert!(
        st.vlog_files < 40,
        "GC dropped no file: {} files",
        st.vlog_files
    );
}

#[test]
fn get_into_fills_the_buffer_as_get_returns() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_options()).unwrap();
    s.put("inline", "small").unwrap();
    s.put("large", value_for(1, 0, 5000)).unwrap();
    s.put("gone", "x").unwrap();
    s.delete("gone").unwrap();
    let snap = s.snapshot();
    s.put_opt(&WriteOptions::default(), "inline", "newer")
        .unwrap();
    let mut buf = b"old contents".to_vec();
    for flushed in [false, true] {
        if flushed {
            s.flush().unwrap();
            s.compact_range(None, None).unwrap();
        }
        for k in ["inline", "large", "gone", "absent"] {
            let found = s.get_into(&ReadOptions::default(), k, &mut buf).unwrap();
            assert_eq!(s.get(k).unwrap(), found.then(|| buf.clone()), "{k}");
            if !found {
                assert!(buf.is_empty());
            }
        }
        let at = ReadOptions {
            snapshot: Some(&snap),
        };
        assert!(s.get_into(&at, "inline", &mut buf).unwrap());
        assert_eq!(buf, b"small");
    }
}
