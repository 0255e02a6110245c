//! What the auto backend's decision costs next to the work it decides on,
//! for the jobs where it matters most: many tiny segments, and single small
//! blocks (the store's reads). A stand-in GPU (a CPU backend) and an H200
//! host's calibrated rates make every job go through the whole decision.
//! Timing on a shared machine is noisy: run alone, in release:
//! `cargo test --release -p gvault-accel --test auto_overhead -- --ignored --nocapture`

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::random_bytes;
use gvault_accel::auto::{
    CostModel, CpuCost, GpuCost, Identity, LinearCost, ModelSource, OpModel, Plan, FORMAT_VERSION,
};
use gvault_accel::CpuBackend;
use gvault_accel::*;

/// SHA-256 about as calibrated on the H200 host (1.7 GB/s a core; GPU 45
/// GB/s pinned, 9.8 GB/s pageable) with the GPU's rates divided by
/// `gpu_slower`: 16 keeps the H200 host's GPU-to-all-cores ratio on a
/// 2-core machine.
fn h200_like(threads: usize, gpu_slower: f64) -> CostModel {
    let line = |fixed_ns, gbps: f64, seg| LinearCost {
        fixed_ns,
        ns_per_byte: 1.0 / gbps,
        ns_per_segment: seg,
    };
    let ops: BTreeMap<String, OpModel> = OpKind::ALL
        .iter()
        .map(|op| {
            let m = OpModel {
                cpu: CpuCost {
                    one_thread: line(3_000.0, 1.7, 150.0),
                    threads,
                    speedup: threads as f64 * 0.9,
                    cut_cost: None,
                    small_speedup: None,
                },
                gpu: Some(GpuCost {
                    kernel: line(30_000.0, 500.0 / gpu_slower, 20.0),
                    pinned: Some(line(40_000.0, 45.0 / gpu_slower, 20.0)),
                    pageable: Some(line(40_000.0, 9.8 / gpu_slower, 20.0)),
                    pinned_packed: None,
                    thread_ns_per_byte: None,
                    pinned_large: None,
                    pageable_large: None,
                }),
            };
            (op.name().to_string(), m)
        })
        .collect();
    CostModel {
        format_version: FORMAT_VERSION,
        identity: Identity::default(),
        link: None,
        ops,
    }
}

fn median(mut f: impl FnMut() -> Duration, runs: usize) -> Duration {
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    v[runs / 2]
}

fn median_of(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_digest(backend: &dyn Backend, bufs: &[Vec<u8>]) -> Duration {
    let mut job = Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: bufs.iter().map(Data::from).collect(),
    };
    let start = Instant::now();
    backend.run(&mut job).expect("runs");
    start.elapsed()
}

fn stand_in(threads: usize, gpu_slower: f64) -> AutoBackend {
    AutoBackend::from_parts(
        CpuBackend::with_threads(threads),
        Some(Box::new(CpuBackend::with_threads(1))),
        h200_like(threads, gpu_slower),
        ModelSource::Defaults {
            reason: "synthetic".into(),
        },
    )
}

#[test]
#[ignore = "timing: run alone with --ignored --nocapture"]
fn the_decision_costs_under_five_percent_of_the_work() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    // GPU far slower: every job is decided for the CPU (end to end, auto
    // must keep up with the CPU backend). H200-like: the decision has to
    // price splits too (timed alone: the stand-in GPU is not a GPU).
    let far = stand_in(threads, 1000.0);
    let h200 = stand_in(threads, 16.0);
    let cpu = CpuBackend::with_threads(threads);
    for (size, count) in [(512usize, 131_072usize), (4096, 16_384), (4096, 1)] {
        let bufs: Vec<Vec<u8>> = (0..count)
            .map(|i| random_bytes(size, i as u64 % 64))
            .collect();
        let job = Job::Digest {
            algo: DigestAlgo::Sha256,
            segments: bufs.iter().map(Data::from).collect(),
        };
        assert_eq!(far.decide(&job).plan, Plan::Cpu, "{size} x {count}");
        let reps = if count == 1 { 20_000 } else { 1 };
        let batch = |b: &dyn Backend| {
            let start = Instant::now();
            for _ in 0..reps {
                time_digest(b, &bufs);
            }
            start.elapsed()
        };
        // Interleaved, so that load from elsewhere hits both alike.
        let runs = 21;
        let (mut cpu_t, mut auto_t) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            cpu_t.push(batch(&cpu));
            auto_t.push(batch(&far));
        }
        let (t_cpu, t_auto) = (median_of(cpu_t), median_of(auto_t));
        let t_decide = median(
            || {
                let start = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(h200.decide(&job));
                }
                start.elapsed()
            },
            runs,
        );
        let ratio = t_cpu.as_secs_f64() / t_auto.as_secs_f64();
        let share = t_decide.as_secs_f64() / t_cpu.as_secs_f64();
        println!(
            "{size} B x {count}: cpu {:.1} µs, auto {:.1} µs (auto/cpu {ratio:.3}); \
             H200-like decision ({:?}) {:.2} µs = {:.2}% of the work",
            t_cpu.as_secs_f64() * 1e6 / reps as f64,
            t_auto.as_secs_f64() * 1e6 / reps as f64,
            h200.decide(&job).plan,
            t_decide.as_secs_f64() * 1e6 / reps as f64,
            share * 100.0
        );
        assert!(
            share < 0.05,
            "{size} x {count}: decision {share:.3} of the work"
        );
        assert!(ratio > 0.9, "{size} x {count}: auto/cpu {ratio:.3}");
    }
}
