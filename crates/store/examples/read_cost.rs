//! Per-operation CPU cost of reads, plain (CRC32C) against encrypted
//! (AES-256-GCM on the CPU backend), measured in one process so that both
//! stores see the same page cache and machine load. Rounds alternate
//! between the two stores and time the reading thread's own CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which a shared machine disturbs far less
//! than wall time; the median round is reported.
//!
//! Forward scans are also run on a second encrypted store with the
//! pipelined read-ahead on; for scans the whole process's CPU time is
//! given too (the read-ahead worker and the pool work off the iterating
//! thread: with spare cores, the iterating thread's time is what bounds
//! throughput, as long as the rest fits on the other cores).
//!
//! `cargo run --release -p gvault-store --example read_cost -- VALUE_BYTES NUM [ROUNDS]`

use std::time::Duration;

#[path = "cpu_clock/mod.rs"]
mod cpu_clock;

use cpu_clock::{process_cpu, thread_cpu};
use gvault_store::{Encryption, Options, ReadOptions, Store, WriteBatch, WriteOptions};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn key(i: u64) -> String {
    format!("{i:016}")
}

fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in v.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    v
}

/// Every key once in ~1 MiB batches, then one compacted level. With
/// `READ_COST_FILL=bench`, as `gvault bench lsm` fills: keys in random
/// order, and only a flush (compactions run on in the background).
fn fill(store: &Store, num: u64, len: usize) {
    let bench_like = std::env::var("READ_COST_FILL").is_ok_and(|v| v == "bench");
    let mut order: Vec<u64> = (0..num).collect();
    if bench_like {
        use rand::seq::SliceRandom;
        order.shuffle(&mut StdRng::seed_from_u64(0xdb_be4c));
    }
    let mut batch = WriteBatch::new();
    for i in order {
        batch.put(key(i), value(i, len));
        if batch.approximate_bytes() >= 1 << 20 {
            store
                .write(&WriteOptions::default(), std::mem::take(&mut batch))
                .unwrap();
        }
    }
    store.write(&WriteOptions::default(), batch).unwrap();
    store.flush().unwrap();
    if !bench_like {
        store.compact_range(None, None).unwrap();
    }
}

/// Nanoseconds per random get over `num` gets: (thread CPU, wall). Wall
/// above thread CPU is time the reader waited (locks, hand-offs, I/O).
fn read_random(store: &Store, num: u64, seed: u64) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let (t, w) = (thread_cpu(), std::time::Instant::now());
    for _ in 0..num {
        let i = rng.gen_range(0..num);
        std::hint::black_box(store.get(key(i)).unwrap().expect("present"));
    }
    let per = |d: Duration| d.as_nanos() as f64 / num as f64;
    (per(thread_cpu() - t), per(w.elapsed()))
}

/// Per entry of one forward scan: nanoseconds of the iterating thread's
/// CPU, of process CPU and of wall time; minor page faults.
fn read_seq(store: &Store, num: u64) -> (f64, f64, f64, f64) {
    let (t, p, w) = (thread_cpu(), process_cpu(), std::time::Instant::now());
    let mut it = store.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        std::hint::black_box(it.value().unwrap());
        n += 1;
        it.next();
    }
    assert_eq!(n, num);
    let per = |d: Duration| d.as_nanos() as f64 / num as f64;
    let (p2, f2) = process_cpu();
    (
        per(thread_cpu() - t),
        per(p2 - p.0),
        per(w.elapsed()),
        (f2 - p.1) as f64 / num as f64,
    )
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn encrypted(dir: &std::path::Path, read_ahead: bool) -> Store {
    Store::open(
        dir,
        Options {
            encryption: Some(Encryption::with_key(gvault_store::keys::generate_key())),
            crypto_backend: Some(std::sync::Arc::new(gvault_accel::CpuBackend::new())),
            read_ahead: Some(read_ahead),
            ..Options::default()
        },
    )
    .unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let len: usize = args.get(1).map_or(65536, |a| a.parse().unwrap());
    let num: u64 = args.get(2).map_or(2000, |a| a.parse().unwrap());
    let rounds: usize = args.get(3).map_or(5, |a| a.parse().unwrap());
    let dir = tempfile::tempdir_in(std::env::var("READ_COST_DIR").unwrap_or(".".into())).unwrap();
    let plain = Store::open(dir.path().join("plain"), Options::default()).unwrap();
    let enc = encrypted(&dir.path().join("enc"), false);
    let ahead = encrypted(&dir.path().join("ahead"), true);
    fill(&plain, num, len);
    fill(&enc, num, len);
    fill(&ahead, num, len);
    let (mut rp, mut re) = (vec![], vec![]);
    let mut seq: [Vec<(f64, f64, f64, f64)>; 3] = Default::default();
    // READ_COST_ONLY=plain|enc: random gets on that store only (for
    // profiling one side).
    if let Ok(only) = std::env::var("READ_COST_ONLY") {
        let store = if only == "enc" { &enc } else { &plain };
        for r in 0..rounds as u64 {
            read_random(store, num, r);
        }
        return;
    }
    for r in 0..rounds as u64 {
        rp.push(read_random(&plain, num, r));
        re.push(read_random(&enc, num, r));
        for (i, s) in [&plain, &enc, &ahead].into_iter().enumerate() {
            seq[i].push(read_seq(s, num));
        }
    }
    let m2 = |v: &[(f64, f64)]| {
        (
            median(v.iter().map(|x| x.0).collect()),
            median(v.iter().map(|x| x.1).collect()),
        )
    };
    let (p, e) = (m2(&rp), m2(&re));
    println!(
        "readrandom {len:>6} B  plain {:8.0} ns/op (wall {:8.0})  enc {:8.0} ns/op (wall {:8.0})  enc/plain by thread {:.2}, by wall {:.2}",
        p.0,
        p.1,
        e.0,
        e.1,
        p.0 / e.0,
        p.1 / e.1
    );
    let medians: Vec<[f64; 4]> = seq
        .into_iter()
        .map(|v| {
            [
                median(v.iter().map(|x| x.0).collect()),
                median(v.iter().map(|x| x.1).collect()),
                median(v.iter().map(|x| x.2).collect()),
                median(v.iter().map(|x| x.3).collect()),
            ]
        })
        .collect();
    for (name, m) in ["plain", "enc", "enc+ahead"].iter().zip(&medians) {
        println!(
            "readseq    {len:>6} B  {name:9}  iterating thread {:7.0} ns/entry  process {:7.0}  wall {:7.0}  faults {:5.1}  enc/plain by thread {:.2}, by wall {:.2}",
            m[0],
            m[1],
            m[2],
            m[3],
            medians[0][0] / m[0],
            medians[0][2] / m[2]
        );
    }
}
