//! Model test: random sequences of put / delete / batch / snapshot /
//! iterate / reopen / flush / compact / GC, checked against a BTreeMap;
//! in encrypted modes also with key rotation and re-encryption running
//! alongside on another thread (they change no contents, so the model
//! stays exact while they race every operation).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use common::Mode;
use gvault_store::{ReadOptions, Snapshot, Store, WriteBatch, WriteOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn random_key(rng: &mut StdRng) -> Vec<u8> {
    // A small key space so overwrites and deletes hit existing keys.
    format!("k{:03}", rng.gen_range(0..150)).into_bytes()
}

fn random_value(rng: &mut StdRng) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(0..40),
        6..=8 => rng.gen_range(90..400), // around the 100-byte threshold
        _ => rng.gen_range(1000..3000),
    };
    (0..len).map(|_| rng.gen()).collect()
}

fn random_bound(rng: &mut StdRng) -> Option<Vec<u8>> {
    rng.gen_bool(0.7).then(|| random_key(rng))
}

fn check_scan(store: &Store, snap: Option<&Snapshot>, model: &Model, rng: &mut StdRng) {
    let (mut lo, mut hi) = (random_bound(rng), random_bound(rng));
    if let (Some(l), Some(h)) = (&lo, &hi) {
        if l > h {
            std::mem::swap(&mut lo, &mut hi);
        }
    }
    let reverse = rng.gen_bool(0.5);
    let ro = ReadOptions { snapshot: snap };
    let got: Vec<(Vec<u8>, Vec<u8>)> = store
        .scan(&ro, lo.as_deref(), hi.as_deref(), reverse)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = model
        .iter()
        .filter(|(k, _)| lo.as_ref().is_none_or(|l| *k >= l) && hi.as_ref().is_none_or(|h| *k < h))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if reverse {
        want.reverse();
    }
    assert_eq!(
        got.len(),
        want.len(),
        "scan {lo:?}..{hi:?} reverse={reverse}"
    );
    assert!(got == want, "scan {lo:?}..{hi:?} reverse={reverse} differs");
}

/// A thread that rotates the data key and re-encrypts until stopped;
/// returns how many passes it finished.
struct Rotator {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl Rotator {
    fn start(store: &Arc<Store>) -> Rotator {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, halt) = (store.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut passes = 0;
            while !halt.load(Ordering::Relaxed) {
                s.rotate_data_key().unwrap();
                s.reencrypt().unwrap();
                passes += 1;
            }
            passes
        });
        Rotator { stop, thread }
    }

    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("rotation thread failed")
    }
}

fn open(dir: &std::path::Path, mode: Mode, rotate: bool) -> (Arc<Store>, Option<Rotator>) {
    let s = Arc::new(Store::open(dir, mode.options()).unwrap());
    let r = rotate.then(|| Rotator::start(&s));
    (s, r)
}

fn run(seed: u64, ops: usize, mode: Mode, rotate: bool) -> u64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let (s, mut rotator) = open(dir.path(), mode, rotate);
    let mut store = Some(s);
    let mut passes = 0;
    let mut model = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for step in 0..ops {
        let s = store.as_ref().unwrap();
        match rng.gen_range(0..100) {
            0..=39 => {
                let (k, v) = (random_key(&mut rng), random_value(&mut rng));
                s.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            40..=51 => {
                let k = random_key(&mut rng);
                s.delete(&k).unwrap();
                model.remove(&k);
            }
            52..=61 => {
                let mut b = WriteBatch::new();
                for _ in 0..rng.gen_range(1..20) {
                    let k = random_key(&mut rng);
                    if rng.gen_bool(0.8) {
                        let v = random_value(&mut rng);
                        b.put(&k, &v);
                        model.insert(k, v);
                    } else {
                        b.delete(&k);
                        model.remove(&k);
                    }
                }
                s.write(
                    &WriteOptions {
                        sync: rng.gen_bool(0.2),
                    },
                    b,
                )
                .unwrap();
            }
            62..=71 => {
                let k = random_key(&mut rng);
                assert_eq!(
                    s.get(&k).unwrap(),
                    model.get(&k).cloned(),
                    "{mode:?} seed {seed} step {step}"
                );
            }
            72..=76 => {
                if snaps.len() < 4 {
                    snaps.push((s.snapshot(), model.clone()));
                } else {
                    snaps.remove(rng.gen_range(0..snaps.len()));
                }
            }
            77..=81 => {
                if let Some((snap, m)) = snaps.get(rng.gen_range(0..snaps.len().max(1))) {
                    let k = random_key(&mut rng);
                    let ro = ReadOptions {
                        snapshot: Some(snap),
                    };
                    assert_eq!(
                        s.get_opt(&ro, &k).unwrap(),
                        m.get(&k).cloned(),
                        "{mode:?} seed {seed} step {step} snapshot"
                    );
                    check_scan(s, Some(snap), m, &mut rng);
                }
            }
            82..=89 => check_scan(s, None, &model, &mut rng),
            90..=92 => {
                snaps.clear();
                passes += rotator.take().map_or(0, Rotator::finish);
                let old = Arc::try_unwrap(store.take().unwrap());
                old.ok().expect("the only handle").close().unwrap();
                let (s, r) = open(dir.path(), mode, rotate);
                (store, rotator) = (Some(s), r);
            }
            93..=94 => s.flush().unwrap(),
            95..=97 => {
                let (a, b) = (random_bound(&mut rng), random_bound(&mut rng));
                s.compact_range(
                    a.as_deref().min(b.as_deref()),
                    a.as_deref().max(b.as_deref()),
                )
                .unwrap();
            }
            _ => {
                s.gc_value_log().unwrap();
            }
        }
    }
    passes += rotator.take().map_or(0, Rotator::finish);
    let s = store.as_ref().unwrap();
    check_scan(s, None, &model, &mut rng);
    let all: Model = s
        .scan(&ReadOptions::default(), None, None, false)
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert!(all == model, "{mode:?} seed {seed}: final contents differ");
    let report = s.verify().unwrap();
    assert!(report.is_clean(), "{mode:?} seed {seed}: {report}");
    passes
}

both_modes!(random_operations_match_a_btreemap, all_seeds);

fn seeds() -> u64 {
    std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}

fn all_seeds(mode: Mode) {
    for seed in 0..seeds() {
        run(seed, 1500, mode, false);
    }
}

/// The same operations while another thread rotates the data key and runs
/// re-encryption passes back to back (the crash test's rotations are
/// killed; these race snapshots, scans, flushes, compactions, GC and
/// reopens and must change nothing a reader sees).
#[test]
fn random_operations_match_a_btreemap_while_keys_rotate() {
    let mut passes = 0;
    for mode in [Mode::Encrypted, Mode::IndexOnly] {
        for seed in 0..seeds() / 2 {
            passes += run(1000 + seed, 1500, mode, true);
        }
    }
    assert!(passes > 0, "no re-encryption pass finished");
    eprintln!("{passes} re-encryption passes alongside");
}
