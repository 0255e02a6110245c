//! Per-operation CPU cost of reads, plain (CRC32C) against encrypted
//! (AES-256-GCM on the CPU backend), measured in one process so that both
//! stores see the same page cache and machine load. Rounds alternate
//! between the two stores and time the reading thread's own CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which a shared machine disturbs far less
//! than wall time; the median round is reported.
//!
//! `cargo run --release -p gvault-store --example read_cost -- VALUE_BYTES NUM [ROUNDS]`

use std::time::Duration;

use gvault_store::{Encryption, Options, ReadOptions, Store, WriteBatch, WriteOptions};
use rand::{rngs::StdRng, Rng, SeedableRng};

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

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

fn fill(store: &Store, num: u64, len: usize) {
    let mut batch = WriteBatch::new();
    for i in 0..num {
        batch.put(key(i), value(i, len));
        if batch.approximate_bytes() >= 1 << 20 {
            store
                .write(&WriteOptions::default(), std::mem::take(&mut batch))
                .unwrap();
        }
    }
    store.write(&WriteOptions::default(), batch).unwrap();
    store.flush().unwrap();
    store.compact_range(None, None).unwrap();
}

/// Thread CPU nanoseconds per random get over `num` gets.
fn read_random(store: &Store, num: u64, seed: u64) -> f64 {
    let mut rng = StdRng::seed_from_u64(seed);
    let t = thread_cpu();
    for _ in 0..num {
        let i = rng.gen_range(0..num);
        std::hint::black_box(store.get(key(i)).unwrap().expect("present"));
    }
    (thread_cpu() - t).as_nanos() as f64 / num as f64
}

/// Thread CPU nanoseconds per entry of one forward scan.
fn read_seq(store: &Store, num: u64) -> f64 {
    let t = thread_cpu();
    let mut it = store.iter(&ReadOptions::default()).unwrap();
    it.seek_to_first();
    let mut n = 0;
    while it.valid() {
        std::hint::black_box(it.value().unwrap());
        n += 1;
        it.next();
    }
    assert_eq!(n, num);
    (thread_cpu() - t).as_nanos() as f64 / num as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let len: usize = args.get(1).map_or(65536, |a| a.parse().unwrap());
    let num: u64 = args.get(2).map_or(2000, |a| a.parse().unwrap());
    let rounds: usize = args.get(3).map_or(5, |a| a.parse().unwrap());
    let dir = tempfile::tempdir_in(std::env::var("READ_COST_DIR").unwrap_or(".".into())).unwrap();
    let plain = Store::open(dir.path().join("plain"), Options::default()).unwrap();
    let enc = Store::open(
        dir.path().join("enc"),
        Options {
            encryption: Some(Encryption::with_key(gvault_store::keys::generate_key())),
            crypto_backend: Some(std::sync::Arc::new(gvault_accel::cpu::CpuBackend::new())),
            ..Options::default()
        },
    )
    .unwrap();
    fill(&plain, num, len);
    fill(&enc, num, len);
    let (mut rp, mut re, mut sp, mut se) = (vec![], vec![], vec![], vec![]);
    for r in 0..rounds as u64 {
        rp.push(read_random(&plain, num, r));
        re.push(read_random(&enc, num, r));
        sp.push(read_seq(&plain, num));
        se.push(read_seq(&enc, num));
    }
    for (name, p, e) in [("readrandom", rp, re), ("readseq", sp, se)] {
        let (p, e) = (median(p), median(e));
        println!(
            "{name:10} {len:>6} B  plain {:8.0} ns/op  enc {:8.0} ns/op  enc/plain throughput {:.2}",
            p,
            e,
            p / e
        );
    }
}
