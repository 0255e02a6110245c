//! Timings (not assertions) of what the auto backend adds to a job of many
//! tiny segments, where a per-segment pass shows most (512 B x
//! 131072 ran at 0.82-0.94 of the CPU backend on the 16-core H100 host).
//! A stand-in GPU (a CPU backend) makes every job go through the decision.
//! Run alone, in release:
//! `cargo test --release -p gvault-accel --lib overhead -- --ignored --nocapture`

use std::time::{Duration, Instant};

use super::backend::AutoBackend;
use super::file::ModelSource;
use super::model::{CostModel, Identity};
use crate::backend::Backend;
use crate::cpu::{CpuBackend, Survey};
use crate::job::{DataMut, Job, SealSegment};
use crate::types::{Aes256Key, Nonce96};

fn seal_job<'a>(key: &'a Aes256Key, bufs: &'a mut [Vec<u8>]) -> Job<'a> {
    Job::Seal {
        key,
        segments: bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| SealSegment {
                nonce: Nonce96::from_parts(1, i as u32),
                aad: b"",
                data: DataMut::Host(b),
            })
            .collect(),
    }
}

/// The pass the auto backend made before deciding, until it shared the
/// CPU backend's survey.
fn old_planning_pass(job: &Job<'_>) -> (u64, usize, u64, bool) {
    let Job::Seal { segments, .. } = job else {
        return (0, 0, 0, false);
    };
    segments.iter().fold((0, 0, 0, false), |(b, n, l, d), s| {
        let len = s.data.len() as u64;
        (
            b + len,
            n + 1,
            l.max(len),
            d | matches!(s.data, DataMut::Device(_)),
        )
    })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median of `runs` timings of `f` on a freshly built job (as callers
/// build one per call), the build not timed.
fn time_on_fresh_job(
    key: &Aes256Key,
    bufs: &mut [Vec<u8>],
    runs: usize,
    mut f: impl FnMut(&mut Job<'_>),
) -> Duration {
    let v = (0..runs)
        .map(|_| {
            let mut job = seal_job(key, bufs);
            let start = Instant::now();
            f(&mut job);
            start.elapsed()
        })
        .collect();
    median(v)
}

/// The shipped model for `threads` cores with a GPU 1000 times slower:
/// every job here is decided (in full) for the CPU.
fn slow_gpu_model(threads: usize) -> CostModel {
    let mut m = super::defaults::shipped(Identity {
        cpu_cores: threads,
        gpu_name: Some("stand-in".into()),
        ..Default::default()
    });
    for g in m.ops.values_mut().filter_map(|o| o.gpu.as_mut()) {
        for line in [Some(&mut g.kernel), g.pinned.as_mut(), g.pageable.as_mut()]
            .into_iter()
            .flatten()
        {
            line.ns_per_byte *= 1000.0;
        }
    }
    m
}

#[test]
#[ignore = "timing: run alone with --ignored --nocapture"]
fn planning_cost_per_segment() {
    let key = Aes256Key::from_bytes([7; 32]);
    let n = 131_072;
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; 512]).collect();
    let ns_per_seg = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;

    // Before: the auto backend's own pass (bytes, count, longest, device),
    // then the CPU backend's precheck and byte count. Now: one survey,
    // shared, and a decision from it.
    let old_plan = time_on_fresh_job(&key, &mut bufs, 51, |job| {
        std::hint::black_box(old_planning_pass(job));
    });
    let old_cpu = time_on_fresh_job(&key, &mut bufs, 51, |job| {
        std::hint::black_box(crate::backend::precheck(job));
        std::hint::black_box(job.bytes());
    });
    let survey = time_on_fresh_job(&key, &mut bufs, 51, |job| {
        std::hint::black_box(Survey::of(job));
    });
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cpu = CpuBackend::with_threads(threads);
    let on_pool = time_on_fresh_job(&key, &mut bufs, 51, |job| {
        std::hint::black_box(cpu.survey(job));
    });
    let auto = AutoBackend::from_parts(
        CpuBackend::with_threads(threads),
        Some(Box::new(CpuBackend::with_threads(1))),
        slow_gpu_model(threads),
        ModelSource::Defaults {
            reason: "timing".into(),
        },
    );
    let job = seal_job(&key, &mut bufs);
    let surveyed = Survey::of(&job);
    let reps = 10_000;
    let decide = median(
        (0..21)
            .map(|_| {
                let start = Instant::now();
                for _ in 0..reps {
                    std::hint::black_box(auto.decide_surveyed(&job, &surveyed));
                }
                start.elapsed() / reps
            })
            .collect(),
    );
    drop(job);
    println!(
        "512 B x {n} seal, ns/segment: old planning pass {:.2}, old CPU passes \
         (precheck + bytes) {:.2}; survey (shared) {:.2} in order, {:.2} on \
         {threads} threads; decision from the survey {:.0} ns a job",
        ns_per_seg(old_plan),
        ns_per_seg(old_cpu),
        ns_per_seg(survey),
        ns_per_seg(on_pool),
        decide.as_secs_f64() * 1e9
    );

    // End to end, interleaved: the CPU backend and an auto backend whose
    // stand-in GPU is far slower (every job decided for the CPU).
    let (mut t_cpu, mut t_auto) = (Vec::new(), Vec::new());
    for _ in 0..31 {
        for (b, t) in [(&cpu as &dyn Backend, &mut t_cpu), (&auto, &mut t_auto)] {
            t.push(time_on_fresh_job(&key, &mut bufs, 1, |job| {
                b.run(job).expect("runs");
            }));
        }
    }
    let (c, a) = (median(t_cpu), median(t_auto));
    println!(
        "end to end: cpu {:.2} ms, auto {:.2} ms, auto/cpu throughput {:.3} ({:?})",
        c.as_secs_f64() * 1e3,
        a.as_secs_f64() * 1e3,
        c.as_secs_f64() / a.as_secs_f64(),
        auto.decide(&seal_job(&key, &mut bufs)).plan
    );
}
