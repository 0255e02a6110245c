//! Chunking speed of the CPU backend on few large segments, against one
//! core: `cargo run --release -p gvault-accel --example cdc_speed [THREADS]`.
//!
//! Prints, for 4 x 16 MiB and 1 x 64 MiB of random bytes with the default
//! chunk sizes, the boundaries (`fastcdc`) and the fused job
//! (`fastcdc-blake3`): GB/s on one thread, on THREADS (default: every
//! core), their ratio, and the CPU time per byte of the THREADS run over
//! the one-thread run (the extra work the parallel scan does; Linux only,
//! from /proc/self/stat). Each figure is the best of several runs, which
//! on a shared host is the one least disturbed.

use std::time::{Duration, Instant};

use gvault_accel::*;
use rand::{RngCore, SeedableRng};

/// User + system CPU time of this process so far, where /proc says it.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the line, in clock ticks (100 a second here).
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 10))
}

/// Best wall time and the CPU time of all runs, per run.
fn time(
    b: &CpuBackend,
    op: OpKind,
    segments: &[Vec<u8>],
    key: &Blake3Key,
) -> (Duration, Option<Duration>) {
    let mut best = Duration::MAX;
    let runs = 7;
    let cpu0 = cpu_time();
    for _ in 0..runs {
        let data = segments.iter().map(Data::from).collect();
        let mut job = match op {
            OpKind::Chunk => Job::Chunk {
                params: ChunkParams::DEFAULT,
                segments: data,
            },
            _ => Job::ChunkDigest {
                params: ChunkParams::DEFAULT,
                key,
                crc32c: false,
                segments: data,
            },
        };
        let t = Instant::now();
        let results = b.run(&mut job).expect("job runs");
        best = best.min(t.elapsed());
        assert!(results.iter().all(|r| r.is_ok()));
    }
    let cpu = cpu0.zip(cpu_time()).map(|(a, z)| (z - a) / runs);
    (best, cpu)
}

fn main() {
    let threads: usize = std::env::args()
        .nth(1)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let one = CpuBackend::with_threads(1);
    let all = CpuBackend::with_threads(threads);
    let key = Blake3Key::from_bytes([9; 32]);
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    println!(
        "{:<16} {:>12} {:>9} {:>12} {:>8} {:>14}",
        "op",
        "segments",
        "1 thread",
        format!("{} threads", all.threads()),
        "speedup",
        "cpu/byte ratio"
    );
    for (n, size) in [(4usize, 16usize << 20), (1, 64 << 20)] {
        let segments: Vec<Vec<u8>> = (0..n)
            .map(|_| {
                let mut v = vec![0u8; size];
                rng.fill_bytes(&mut v);
                v
            })
            .collect();
        let bytes = (n * size) as f64;
        for op in [OpKind::Chunk, OpKind::ChunkDigest] {
            let (t1, c1) = time(&one, op, &segments, &key);
            let (tn, cn) = time(&all, op, &segments, &key);
            let work = c1.zip(cn).map_or("-".into(), |(a, b)| {
                format!("{:.2}", b.as_secs_f64() / a.as_secs_f64())
            });
            println!(
                "{:<16} {:>12} {:>9.2} {:>12.2} {:>7.2}x {:>14}",
                op.name(),
                format!("{n} x {} MiB", size >> 20),
                bytes / t1.as_secs_f64() / 1e9,
                bytes / tn.as_secs_f64() / 1e9,
                t1.as_secs_f64() / tn.as_secs_f64(),
                work
            );
        }
    }
}
