//! The lock-order check itself, and the store's concurrent paths run with
//! it on: flush, compaction, value-log GC, key rotation and re-encryption,
//! close and a read-only open, next to writers and readers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use super::*;
use crate::{Encryption, Options, ReadOptions, Store, WriteBatch};

// The store's dev-dependency on itself turns on `lock-order-check`;
// without it, `cargo test --release` would check nothing.
const _: () = assert!(CHECKED, "the lock-order check is off in tests");

/// One step of [`take`]: a lock of this rank, waited for or tried.
#[derive(Clone, Copy)]
enum Step {
    Lock(Rank),
    Try(Rank),
}

/// Takes a new lock for each step in turn, holding them all, on a thread
/// that may break the order; the panic message, if it panicked.
fn take(steps: &'static [Step]) -> Option<String> {
    let joined = std::thread::Builder::new()
        .name(EXPECTED_VIOLATION_THREAD.into())
        .spawn(move || {
            let locks: Vec<_> = steps
                .iter()
                .map(|s| match *s {
                    Step::Lock(r) | Step::Try(r) => RankedMutex::new(r, ()),
                })
                .collect();
            let mut guards = Vec::new();
            for (step, lock) in steps.iter().zip(&locks) {
                match step {
                    Step::Lock(_) => guards.push(lock.lock()),
                    Step::Try(_) => guards.push(lock.try_lock().expect("a new lock is free")),
                }
            }
        })
        .expect("spawning a test thread")
        .join();
    let payload = joined.err()?;
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()));
    Some(message.unwrap_or_default())
}

#[test]
fn a_lock_taken_out_of_order_panics() {
    let message = take(&[Step::Lock(Rank::State), Step::Lock(Rank::Log)]);
    let message = message.expect("taking Log while holding State must panic");
    assert!(
        message.contains("taking Log while holding State"),
        "{message}"
    );
    assert_eq!(
        take(&[Step::Lock(Rank::Log), Step::Lock(Rank::State)]),
        None
    );
}

#[test]
fn a_rank_taken_twice_panics() {
    // Two locks of one rank (two writes' result slots) in either order
    // could deadlock as surely as two ranks could.
    let message = take(&[Step::Lock(Rank::WriteResult), Step::Lock(Rank::WriteResult)]);
    assert!(message.is_some_and(|m| m.contains("taking WriteResult while holding WriteResult")));
}

#[test]
fn the_order_is_checked_against_every_lock_held() {
    let message = take(&[
        Step::Lock(Rank::Log),
        Step::Lock(Rank::State),
        Step::Lock(Rank::Manifest),
    ]);
    assert!(message.is_some_and(|m| m.contains("taking Manifest while holding State")));
    // Log, then State, then, State released, Manifest: above every lock
    // still held. Guards released out of the order taken leave nothing
    // behind.
    let log = RankedMutex::new(Rank::Log, ());
    let state = RankedMutex::new(Rank::State, ());
    let manifest = RankedMutex::new(Rank::Manifest, ());
    let l = log.lock();
    let s = state.lock();
    drop(s);
    let m = manifest.lock();
    drop(l);
    drop(m);
    let _s = state.lock();
}

#[test]
fn try_lock_is_not_checked_but_counts_as_held() {
    // Not waiting, it cannot deadlock.
    assert_eq!(take(&[Step::Lock(Rank::State), Step::Try(Rank::Log)]), None);
    let message = take(&[
        Step::Lock(Rank::State),
        Step::Try(Rank::Log),
        Step::Lock(Rank::LogUsage),
    ]);
    assert!(message.is_some_and(|m| m.contains("taking LogUsage while holding State")));
}

#[test]
fn a_condvar_wait_keeps_the_rank() {
    let log = RankedMutex::new(Rank::Log, ());
    let state = Arc::new(RankedMutex::new(Rank::State, false));
    let cv = Arc::new(RankedCondvar::new());
    let _l = log.lock();
    let waker = {
        let (state, cv) = (state.clone(), cv.clone());
        std::thread::spawn(move || {
            *state.lock() = true;
            cv.notify_all();
        })
    };
    let mut st = state.lock();
    while !*st {
        cv.wait(&mut st);
    }
    drop(st);
    waker.join().expect("waker thread");
    let manifest = RankedMutex::new(Rank::Manifest, ());
    let _m = manifest.lock(); // Log is still held; State is not
}

fn options(encrypted: bool) -> Options {
    Options {
        write_buffer_size: 16 << 10,
        value_threshold: 100,
        block_size: 256,
        table_file_size: 8 << 10,
        level1_max_bytes: 32 << 10,
        l0_compaction_trigger: 2,
        l0_stop_writes_trigger: 8,
        vlog_file_size: 64 << 10,
        block_cache_bytes: 64 << 10,
        vlog_gc_every_flushes: 2,
        reencrypt_bytes_per_sec: 1 << 40,
        encryption: encrypted.then(|| {
            let key = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
            Encryption::with_key(crate::keys::parse_hex_key(key).expect("hex key"))
        }),
        ..Options::default()
    }
}

fn value(key: u64, round: u64) -> Vec<u8> {
    // Every third value goes to the value log.
    let len = if key.is_multiple_of(3) { 300 } else { 20 };
    let mut v = format!("{key}:{round}:").into_bytes();
    v.resize(len, b'a' + (key % 26) as u8);
    v
}

#[test]
fn a_get_takes_no_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path(), options(true)).expect("open");
    for k in 0..200u64 {
        store.put(k.to_be_bytes(), value(k, 0)).expect("put");
    }
    store.flush().expect("flush");
    for k in 200..220u64 {
        store.put(k.to_be_bytes(), value(k, 0)).expect("put");
    }
    let snapshot = store.snapshot();
    // The first reads open the tables and value-log files.
    let read_all = |buf: &mut Vec<u8>| {
        for k in 0..230u64 {
            let found = store
                .get_into(&ReadOptions::default(), k.to_be_bytes(), buf)
                .expect("get");
            assert_eq!(found, k < 220);
            if found {
                assert_eq!(*buf, value(k, 0));
            }
            let opts = ReadOptions {
                snapshot: Some(&snapshot),
            };
            assert_eq!(
                store
                    .get_opt(&opts, k.to_be_bytes())
                    .expect("get")
                    .is_some(),
                k < 220
            );
        }
    };
    let mut buf = Vec::new();
    read_all(&mut buf);
    let before = taken_by_this_thread();
    read_all(&mut buf);
    assert_eq!(taken_by_this_thread(), before, "a get took a lock");
    // The count does move when a lock is taken.
    store.put(b"x", b"y").expect("put");
    assert!(taken_by_this_thread() > before);
    drop(snapshot);
    store.close().expect("close");
}

/// Writers, readers, cursors and every maintenance operation at once, then
/// close, a read-only open next to nothing else, and a reopen; all with the
/// order checked on every thread, the background thread's included.
fn concurrent_paths(encrypted: bool) {
    let violations_before = violations();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Arc::new(Store::open(dir.path(), options(encrypted)).expect("open"));
    const WRITERS: u64 = 3;
    const KEYS: u64 = 300;
    const ROUNDS: u64 = 6;
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(WRITERS as usize + 3));
    let mut threads = Vec::new();
    for w in 0..WRITERS {
        let (store, start) = (store.clone(), start.clone());
        threads.push(std::thread::spawn(move || {
            start.wait();
            for round in 0..ROUNDS {
                for k in (w..KEYS).step_by(WRITERS as usize) {
                    if round % 2 == 1 && k.is_multiple_of(7) {
                        let mut b = WriteBatch::new();
                        b.delete(k.to_be_bytes());
                        b.put(k.to_be_bytes(), value(k, round));
                        store.write(&Default::default(), b).expect("batch");
                    } else {
                        store.put(k.to_be_bytes(), value(k, round)).expect("put");
                    }
                }
            }
        }));
    }
    let readers = {
        let (store, start, done) = (store.clone(), start.clone(), done.clone());
        std::thread::spawn(move || {
            start.wait();
            while !done.load(Ordering::SeqCst) {
                let snap = store.snapshot();
                let opts = ReadOptions {
                    snapshot: Some(&snap),
                };
                for k in (0..KEYS).step_by(11) {
                    if let Some(v) = store.get_opt(&opts, k.to_be_bytes()).expect("get") {
                        assert!(v.starts_with(format!("{k}:").as_bytes()));
                    }
                }
                let scanned = store
                    .scan(&opts, None, None, false)
                    .expect("scan")
                    .take(50)
                    .count();
                assert!(scanned <= 50);
                store.stats();
            }
        })
    };
    let maintenance = {
        let (store, start, done) = (store.clone(), start.clone(), done.clone());
        std::thread::spawn(move || {
            start.wait();
            let mut i = 0u64;
            while !done.load(Ordering::SeqCst) {
                match i % 5 {
                    0 => store.flush().expect("flush"),
                    1 => store.compact_range(None, None).expect("compact_range"),
                    2 => {
                        store.gc_value_log().expect("gc");
                    }
                    3 => {
                        store.compact_all().expect("compact_all");
                    }
                    _ => {
                        store.verify().expect("verify");
                    }
                }
                i += 1;
            }
        })
    };
    let keys = {
        let (store, start, done) = (store.clone(), start.clone(), done.clone());
        std::thread::spawn(move || {
            start.wait();
            while encrypted && !done.load(Ordering::SeqCst) {
                store.rotate_data_key().expect("rotate");
                store.reencrypt().expect("reencrypt");
                store.key_status().expect("key status");
            }
        })
    };
    for t in threads {
        t.join().expect("writer thread");
    }
    done.store(true, Ordering::SeqCst);
    for t in [readers, maintenance, keys] {
        t.join().expect("reader or maintenance thread");
    }
    let store = Arc::into_inner(store).expect("every thread is done");
    store.close().expect("close");

    let check = |store: &Store| {
        for k in 0..KEYS {
            let v = store.get(k.to_be_bytes()).expect("get");
            assert_eq!(v, Some(value(k, ROUNDS - 1)), "key {k}");
        }
        store.verify().expect("verify");
    };
    let read_only = Options {
        read_only: true,
        ..options(encrypted)
    };
    let read_only = Store::open(dir.path(), read_only).expect("read-only open");
    check(&read_only);
    drop(read_only);
    let store = Store::open(dir.path(), options(encrypted)).expect("reopen");
    check(&store);
    store.close().expect("close");
    assert_eq!(
        violations(),
        violations_before,
        "a thread broke the lock order"
    );
}

#[test]
fn concurrent_paths_plain() {
    concurrent_paths(false);
}

#[test]
fn concurrent_paths_encrypted() {
    concurrent_paths(true);
}
