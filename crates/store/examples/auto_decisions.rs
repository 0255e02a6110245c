//! What the auto dispatcher decides for the store's crypto jobs, under the
//! H100 host's calibrated model and under the shipped defaults for that
//! host (16 cores and a GPU), and what deciding costs per job. A CPU
//! backend stands in for the GPU: only the decisions and their overhead
//! are measured, not a GPU's speed.
//!
//! Last, what spreading one read's decryption over cores could gain: two
//! 64 KiB opens one after the other on the calling thread against one job
//! of both, which the CPU backend spreads over its pool (the fork/join is
//! what sub-units of one value would pay on every read).
//!
//! `cargo run --release -p gvault-store --example auto_decisions`

use std::time::Instant;

use gvault_accel::auto::{shipped, AutoBackend, CostModel, Identity, ModelSource};
use gvault_accel::CpuBackend;
use gvault_accel::{Aes256Key, Backend, Nonce96, Tag};
use gvault_accel::{DataMut, Job, OpenSegment, SealSegment};

/// A model calibrated on the H100 host.
const H100_MODEL: &str = include_str!("../../accel/src/auto/testdata/h100-blake3-near-ties.json");

fn auto(model: CostModel, name: &str) -> AutoBackend {
    let stand_in: Box<dyn Backend> = Box::new(CpuBackend::with_threads(1));
    AutoBackend::from_parts(
        CpuBackend::new(),
        Some(stand_in),
        model,
        ModelSource::Defaults {
            reason: name.into(),
        },
    )
}

/// (what, segment lengths) of the store's jobs in the db_bench workloads.
fn shapes() -> Vec<(&'static str, Vec<usize>)> {
    let frame = |v: usize| v + 16 + 30; // key, lengths, tag
    vec![
        ("get: open one 4 KiB value frame", vec![frame(4 << 10)]),
        ("get: open one 64 KiB value frame", vec![frame(64 << 10)]),
        ("get: open one 4 KiB table block", vec![4 << 10]),
        ("readseq ahead: 32 x 4 KiB frames", vec![frame(4 << 10); 32]),
        (
            "readseq ahead: 256 x 4 KiB frames",
            vec![frame(4 << 10); 256],
        ),
        ("readseq ahead: 2 x 64 KiB frames", vec![frame(64 << 10); 2]),
        (
            "readseq ahead: 16 x 64 KiB frames",
            vec![frame(64 << 10); 16],
        ),
        (
            "fill 64 KiB: group commit (value, record)",
            vec![frame(64 << 10), 60],
        ),
        (
            "fill 100 B: group of 64 KiB of small frames",
            vec![frame(100); 450],
        ),
        ("flush: 2 MiB table of 4 KiB blocks", vec![4 << 10; 512]),
        ("compaction: 8 MiB of 4 KiB blocks", vec![4 << 10; 2048]),
    ]
}

fn seal_job<'a>(key: &'a Aes256Key, bufs: &'a mut [Vec<u8>]) -> Job<'a> {
    Job::Seal {
        key,
        segments: bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| SealSegment {
                nonce: Nonce96::from_parts(1, i as u32),
                aad: &[],
                data: DataMut::Host(b),
            })
            .collect(),
    }
}

fn open_job<'a>(key: &'a Aes256Key, bufs: &'a mut [Vec<u8>]) -> Job<'a> {
    Job::Open {
        key,
        segments: bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| OpenSegment {
                nonce: Nonce96::from_parts(1, i as u32),
                aad: &[],
                tag: Tag::from_bytes([0; 16]),
                data: DataMut::Host(b),
            })
            .collect(),
    }
}

fn main() {
    let h100: CostModel = serde_json::from_str(H100_MODEL).expect("the H100 model parses");
    let identity = Identity {
        gvault_version: env!("CARGO_PKG_VERSION").into(),
        cpu_cores: 16,
        gpu_name: Some("NVIDIA H100 80GB HBM3".into()),
        driver_version: None,
    };
    let key = Aes256Key::from_bytes([7; 32]);
    for (name, model) in [
        ("H100 calibrated", h100),
        (
            "shipped defaults, 16 cores + GPU",
            shipped(identity.clone()),
        ),
    ] {
        let a = auto(model, name);
        println!("== {name}");
        for (what, lens) in shapes() {
            let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&n| vec![0u8; n]).collect();
            let open = what.starts_with("get") || what.starts_with("readseq");
            let job = if open {
                open_job(&key, &mut bufs)
            } else {
                seal_job(&key, &mut bufs)
            };
            let d = a.decide(&job);
            let us = |ns: f64| ns / 1e3;
            println!(
                "{what:<46} {:>14} cpu {:>8.1} us  gpu {:>8.1} us",
                format!("{:?}", d.plan),
                us(d.cpu_finish_ns),
                d.gpu_finish_ns.map_or(f64::NAN, us),
            );
        }
    }
    // Overhead of deciding a one-segment open against running it on the
    // CPU directly (both inline on this thread; the tag fails, which
    // costs the same decryption as a success).
    let a = auto(
        serde_json::from_str(H100_MODEL).expect("parses"),
        "H100 calibrated",
    );
    let cpu = CpuBackend::new();
    for len in [4usize << 10, 64 << 10] {
        let mut bufs = vec![vec![0u8; len]];
        let rounds = 20_000;
        let (mut t_cpu, mut t_auto) = (f64::MAX, f64::MAX);
        for _ in 0..5 {
            let t = Instant::now();
            for _ in 0..rounds {
                let _ = cpu.run(&mut open_job(&key, &mut bufs));
            }
            t_cpu = t_cpu.min(t.elapsed().as_nanos() as f64 / rounds as f64);
            let t = Instant::now();
            for _ in 0..rounds {
                let _ = a.run(&mut open_job(&key, &mut bufs));
            }
            t_auto = t_auto.min(t.elapsed().as_nanos() as f64 / rounds as f64);
        }
        println!(
            "one {len}-byte open: cpu {:.2} us, auto {:.2} us (overhead {:.2} us; best of 5)",
            t_cpu / 1e3,
            t_auto / 1e3,
            (t_auto - t_cpu) / 1e3
        );
    }
    for len in [16usize << 10, 64 << 10] {
        let rounds = 5_000;
        let (mut serial, mut spread) = (f64::MAX, f64::MAX);
        for _ in 0..5 {
            let mut one = vec![vec![0u8; len]];
            let t = Instant::now();
            for _ in 0..rounds {
                let _ = cpu.run(&mut open_job(&key, &mut one));
                let _ = cpu.run(&mut open_job(&key, &mut one));
            }
            serial = serial.min(t.elapsed().as_nanos() as f64 / rounds as f64);
            // Over 64 KiB in all, so the backend hands it to its pool.
            let mut two = vec![vec![0u8; len]; (128 << 10) / len];
            let t = Instant::now();
            for _ in 0..rounds {
                let _ = cpu.run(&mut open_job(&key, &mut two));
            }
            spread = spread.min(t.elapsed().as_nanos() as f64 / rounds as f64);
        }
        let n = (128 << 10) / len;
        let serial_all = serial * n as f64 / 2.0;
        println!(
            "{n} x {len}-byte opens: inline one by one {:.2} us, one job over the pool {:.2} us ({} cores)",
            serial_all / 1e3,
            spread / 1e3,
            std::thread::available_parallelism().map_or(1, |c| c.get()),
        );
    }
}
