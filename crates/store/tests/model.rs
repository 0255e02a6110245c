//! Model test: random sequences of put / delete / batch / snapshot /
//! iterate / reopen / flush / compact / GC, checked against a BTreeMap.

mod common;

use std::collections::BTreeMap;

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

fn run(seed: u64, ops: usize, mode: Mode) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut store = Some(Store::open(dir.path(), mode.options()).unwrap());
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
                store.take().unwrap().close().unwrap();
                store = Some(Store::open(dir.path(), mode.options()).unwrap());
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
}

both_modes!(random_operations_match_a_btreemap, all_seeds);

fn all_seeds(mode: Mode) {
    let seeds: u64 = std::env::var("MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    for seed in 0..seeds {
        run(seed, 1500, mode);
    }
}
