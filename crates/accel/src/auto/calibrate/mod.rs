//! Calibration: times every op on this machine's CPU (one thread at a few
//! job shapes, then all threads) and, where there is a GPU, end to end from
//! pageable and from page-locked host memory, on device-resident data, and
//! the link; fits the cost model to the timings ([`calibrate`]).
//!
//! The timing itself (warm-up, repeats, median) is the caller's benchmark
//! harness, behind [`Bench`], so that calibration and `gvault bench
//! primitive` time jobs the same way.
//!
//! - `cpu`: the CPU's speed-ups, cut-segment cost and RSA.
//! - `gpu`: the GPU's stage lines, large page-locked line and the link.
//! - `table`: the model as a table of rates and cross-overs.

mod cpu;
mod gpu;
mod table;

use std::time::{Duration, Instant};

use super::backend::machine_identity;
use super::model::{
    fit_linear, gpu_serial, CostModel, CpuCost, LinearCost, OpModel, FORMAT_VERSION,
};
use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::gpu::GpuBackend;
use crate::job::OpKind;

pub(crate) use cpu::line_speedup;
pub use table::model_table;
pub(crate) use table::size_label;

use cpu::{cpu_small_speedup, cpu_speedup, gcm_cut_cost};
use gpu::calibrate_gpu;

/// How calibration times jobs and reports progress.
pub trait Bench {
    /// The median time of one job of `op` over `segments` (one segment a
    /// buffer) on `backend`: a warm-up run, then runs until `min_time` has
    /// passed.
    fn time(
        &self,
        backend: &dyn Backend,
        op: OpKind,
        segments: &mut [&mut [u8]],
        min_time: Duration,
    ) -> Result<Duration, String>;

    /// As [`Bench::time`], over `n` segments of `size` bytes in the GPU's
    /// device memory: the kernel's rate with no byte crossing the link.
    fn time_resident(
        &self,
        gpu: &GpuBackend,
        op: OpKind,
        size: usize,
        n: usize,
        min_time: Duration,
    ) -> Result<Duration, String>;

    /// The median of `f`'s times (each the region it measured): a warm-up
    /// run, then at least `min_runs` runs and `min_time` in all.
    fn repeat(
        &self,
        min_runs: usize,
        min_time: Duration,
        f: &mut dyn FnMut() -> Duration,
    ) -> Duration;

    /// Shows one line of progress.
    fn say(&self, line: &str);
}

/// Job shapes (segment size, segments) the fixed, per-byte and per-segment
/// costs are fitted to: sizes and counts vary independently enough.
const SHAPES: [(usize, usize); 6] = [
    (512, 256),
    (4096, 1),
    (4096, 128),
    (64 << 10, 32),
    (1 << 20, 8),
    (16 << 20, 2),
];
const QUICK_SHAPES: [(usize, usize); 4] = [(512, 64), (4096, 1), (4096, 16), (256 << 10, 4)];

/// Shapes of the chunking ops' one-thread line. FastCDC skips the first
/// 512 KiB (the minimum chunk) of every chunk, so a segment under that
/// costs only its call: with such shapes in the fit there is no one rate
/// per byte, and the line priced one thread at ~194 GB/s (3.1 measured)
/// on the H100 host, and at 4.0 GB/s (1.6-1.8 measured) on the 2-core dev
/// host with a 4 KiB shape left in. Segments of several chunks scan about
/// half their bytes: a rate per byte again. Segments below a chunk are
/// priced high by this line (their scan is skipped), the safe side. Kept
/// small (58 MiB in all): 468 MiB of shapes had added 8 s to a calibration
/// that must stay under a minute.
const CHUNKING_SHAPES: [(usize, usize); 4] =
    [(2 << 20, 1), (2 << 20, 4), (8 << 20, 2), (16 << 20, 2)];
const QUICK_CHUNKING_SHAPES: [(usize, usize); 3] = [(2 << 20, 1), (2 << 20, 4), (4 << 20, 2)];

/// A line of bytes only, at the median rate of `samples` (bytes, segments,
/// ns): the chunking ops' cost is no sum of fixed, per-byte and
/// per-segment terms (the last chunk of a segment is cut short, its
/// skipped minimum is not), and fitting all three to their few large
/// shapes gave a 386 us "segment cost" on the dev host.
fn rate_line(samples: &[(u64, usize, f64)]) -> Option<LinearCost> {
    let mut rates: Vec<f64> = samples
        .iter()
        .filter(|(b, _, ns)| *b > 0 && ns.is_finite() && *ns > 0.0)
        .map(|&(b, _, ns)| ns / b as f64)
        .collect();
    if rates.is_empty() {
        return None;
    }
    rates.sort_by(f64::total_cmp);
    Some(LinearCost {
        fixed_ns: 0.0,
        ns_per_byte: rates[rates.len() / 2],
        ns_per_segment: 0.0,
    })
}

/// The one-thread line's shapes for `op`.
fn cpu_shapes(op: OpKind, quick: bool) -> &'static [(usize, usize)] {
    match (op, quick) {
        (OpKind::Chunk | OpKind::ChunkDigest, false) => &CHUNKING_SHAPES,
        (OpKind::Chunk | OpKind::ChunkDigest, true) => &QUICK_CHUNKING_SHAPES,
        (_, false) => &SHAPES,
        (_, true) => &QUICK_SHAPES,
    }
}

/// GPU shapes: each puts one stage in charge (see `fit_stages`). 4 KiB x 1:
/// the fixed cost. Pieces of >= DIRECT_MIN (256 KiB x 4, 1 MiB x 8, 16
/// MiB x 2) are DMA'd from pinned memory: the pinned line; 1 MiB x 8 is
/// also one thread's rate for the serial hashes. 64 MiB of small pieces
/// (512 B x 131072: the per-segment stage; 4 KiB x 16384 and 64 KiB x
/// 1024: the packing copy, and the serial hashes' saturated rate): the
/// pageable and packed-pinned lines. On the H100 host the earlier shapes,
/// <= 32 MiB and <= 256 segments, missed all three.
const GPU_SHAPES: [(usize, usize); 7] = [
    (4096, 1),
    (256 << 10, 4),
    (1 << 20, 8),
    (16 << 20, 2),
    (512, 131072),
    (4096, 16384),
    (64 << 10, 1024),
];
const QUICK_GPU_SHAPES: [(usize, usize); 4] = [(4096, 1), (256 << 10, 4), (512, 4096), (4096, 512)];

/// GPU shapes for `op`: a serial hash takes one thread 0.5 s per 16 MiB
/// segment (H100), and 1 MiB x 8 gives its thread rate already. Chunking
/// runs per segment group with host work between kernels, so thousands of
/// tiny segments take seconds a run and tell the planner nothing it uses
/// (nobody chunks 512-byte buffers): chunking ops keep <= 1024 segments.
fn gpu_shapes(op: OpKind, quick: bool) -> Vec<(usize, usize)> {
    let shapes: &[(usize, usize)] = if quick {
        &QUICK_GPU_SHAPES
    } else {
        &GPU_SHAPES
    };
    shapes
        .iter()
        .copied()
        .filter(|&(size, _)| !(gpu_serial(op) && size > 1 << 20))
        .filter(|&(_, n)| !(matches!(op, OpKind::Chunk | OpKind::ChunkDigest) && n > 1024))
        .collect()
}

/// Ops whose large page-locked jobs get a measured line
/// (`GpuCost::pinned_large`): those where the CPU and the DMA'd GPU are of
/// the same order on host data (H100 host: GCM, CTR and BLAKE3 at 30-55
/// GB/s on either side), so the GPU's ramp decides between CPU, GPU and a
/// split. Elsewhere one side wins by far (the serial hashes' one GPU
/// thread a segment, TEA's and Blowfish's slow CPU; chunking is bound by
/// its host work) and the plateau extrapolation serves.
const PINNED_LARGE_OPS: [OpKind; 5] = [
    OpKind::AesGcmSeal,
    OpKind::AesGcmOpen,
    OpKind::AesCtr,
    OpKind::Blake3,
    OpKind::Blake3Keyed,
];

/// The two large page-locked jobs (segment size, segments) that line runs
/// through, past `CALIBRATED_JOB_BYTES`. Through the H100 host's GCM
/// figures at these shapes (26.8 and 44.7 GB/s sealing)
/// the line lands within 7% of the measured 4 x 64 MiB and 4 x 1 GiB; a
/// line through 4 x 64 MiB and 4 x 256 MiB misses 4 x 16 MiB by 20%.
const PINNED_LARGE_SHAPES: [(usize, usize); 2] = [(16 << 20, 4), (256 << 20, 4)];

/// The two large pageable jobs (segment size, segments) of an op's
/// `GpuCost::pageable_large` line: the largest stage-line job (64 MiB,
/// `CALIBRATED_PAGEABLE_BYTES`) and four times it, of segments the op's
/// stage lines were measured on (chunking: several chunks a segment;
/// the rest: 64 KiB, which keeps a serial hash's one thread a segment
/// from hiding the pipeline's rate).
fn pageable_large_shapes(op: OpKind) -> [(usize, usize); 2] {
    match op {
        OpKind::Chunk | OpKind::ChunkDigest => [(16 << 20, 4), (16 << 20, 16)],
        _ => [(64 << 10, 1024), (64 << 10, 4096)],
    }
}

/// Fits the cost model of this machine: every op on one CPU thread and on
/// `all` (all cores), and on `gpu` where there is one. `quick`: fewer,
/// smaller measurements (seconds; for tests and a first look), and no
/// second pass or large page-locked jobs.
pub fn calibrate(
    gpu: Option<&GpuBackend>,
    quick: bool,
    bench: &dyn Bench,
) -> Result<CostModel, String> {
    let identity = machine_identity(gpu);
    let shapes = cpu_shapes(OpKind::AesGcmSeal, quick);
    let min_time = Duration::from_millis(if quick { 10 } else { 40 });
    let one = CpuBackend::with_threads(1);
    let all = CpuBackend::new();
    bench.say(&format!(
        "calibrating on {} cores{}; {} shapes per op, >= {} ms each",
        all.threads(),
        identity
            .gpu_name
            .as_deref()
            .map(|n| format!(" and {n}"))
            .unwrap_or_default(),
        shapes.len(),
        min_time.as_millis()
    ));
    if !quick {
        warm_up(&all, gpu, bench);
    }
    let mut model = CostModel {
        format_version: FORMAT_VERSION,
        identity,
        link: None,
        ops: Default::default(),
    };
    for op in OpKind::ALL {
        let op_started = Instant::now();
        let m = if op == OpKind::RsaPrivate {
            cpu::calibrate_rsa(bench, &one, &all, gpu, min_time)?
        } else {
            calibrate_op(
                op,
                bench,
                cpu_shapes(op, quick),
                &one,
                &all,
                gpu,
                min_time,
                quick,
            )?
        };
        model.ops.insert(op.name().to_string(), m);
        bench.say(&format!(
            "  {op}: {:.1} s",
            op_started.elapsed().as_secs_f64()
        ));
    }
    if !quick {
        let pass_started = Instant::now();
        cpu::second_pass(&mut model, bench, &all, min_time)?;
        bench.say(&format!(
            "  second pass: {:.1} s",
            pass_started.elapsed().as_secs_f64()
        ));
    }
    if let Some(g) = gpu {
        model.link = gpu::calibrate_link(g)?;
        // Quick models keep the plateau extrapolation: the larger job alone
        // pins 1 GiB.
        if !quick {
            gpu::calibrate_pinned_large(g, bench, &mut model, min_time)?;
            gpu::calibrate_pageable_large(g, bench, &mut model, min_time)?;
        }
    }
    model.validate()?;
    Ok(model)
}

fn time_ns(
    backend: &dyn Backend,
    op: OpKind,
    bench: &dyn Bench,
    size: usize,
    n: usize,
    min_time: Duration,
) -> Result<f64, String> {
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|i| pool_bytes(i * size, size)).collect();
    let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
    Ok(bench.time(backend, op, &mut views, min_time)?.as_nanos() as f64)
}

#[allow(clippy::too_many_arguments)]
fn calibrate_op(
    op: OpKind,
    bench: &dyn Bench,
    shapes: &[(usize, usize)],
    one: &CpuBackend,
    all: &CpuBackend,
    gpu: Option<&GpuBackend>,
    min_time: Duration,
    quick: bool,
) -> Result<OpModel, String> {
    let mut samples = Vec::new();
    for &(size, n) in shapes {
        samples.push((
            (size * n) as u64,
            n,
            time_ns(one, op, bench, size, n, min_time)?,
        ));
    }
    let one_thread = if matches!(op, OpKind::Chunk | OpKind::ChunkDigest) {
        rate_line(&samples)
    } else {
        fit_linear(&samples)
    }
    .ok_or_else(|| format!("{op}: no usable CPU timings"))?;
    let speedup = cpu_speedup(op, bench, &one_thread, one, all, min_time, quick)?;
    let small_speedup = if quick {
        None
    } else {
        Some(cpu_small_speedup(op, bench, &one_thread, all, min_time)?)
    };
    let cut_cost = if quick {
        None
    } else {
        gcm_cut_cost(op, bench, &one_thread, all, min_time)?
    };
    let cpu = CpuCost {
        one_thread,
        threads: all.threads(),
        speedup,
        cut_cost,
        small_speedup,
    };
    let gpu = match gpu {
        Some(g) => calibrate_gpu(op, bench, &gpu_shapes(op, quick), g, min_time)?,
        None => None,
    };
    Ok(OpModel { cpu, gpu })
}

/// Brings the GPU's and the cores' clocks up before anything is timed:
/// about half a second of AES-GCM on all cores and on the GPU. The first op
/// calibrated used to pay for idle clocks: on a warm H100 host left idle
/// for minutes, AES-GCM seal calibrated at a 74 GB/s kernel (190 after)
/// and a cut-segment cost of 6.6 (2.9), and `auto` then sent 4 x 64 MiB
/// pageable seals to the GPU at 0.3x the CPU.
fn warm_up(all: &CpuBackend, gpu: Option<&GpuBackend>, bench: &dyn Bench) {
    let until = Instant::now() + Duration::from_millis(500);
    let mut bufs: Vec<Vec<u8>> = (0..all.threads().max(1) * 2)
        .map(|i| pool_bytes(i << 20, 4 << 20))
        .collect();
    let mut device = gpu.and_then(|g| g.alloc_pinned(64 << 20).ok());
    while Instant::now() < until {
        // Results are not used: failures here surface in the timed runs.
        let mut views: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
        let _ = bench.time(all, OpKind::AesGcmSeal, &mut views, Duration::ZERO);
        if let (Some(g), Some(buf)) = (gpu, device.as_mut()) {
            let mut views: Vec<&mut [u8]> = buf.chunks_mut(16 << 20).collect();
            let _ = bench.time(g, OpKind::AesGcmSeal, &mut views, Duration::ZERO);
        }
    }
}

/// `len` random bytes from `at` on in a pool made once: generating 64 MiB
/// per shape and memory kind (ChaCha, ~1 GB/s) cost calibration seconds.
/// Wraps around the pool; the bytes stay random within any segment
/// shorter than the pool, which is all chunking needs.
fn pool_bytes(at: usize, len: usize) -> Vec<u8> {
    const POOL: usize = 16 << 20;
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let pool = BYTES.get_or_init(|| random(POOL));
    let mut out = Vec::with_capacity(len);
    let mut at = at % POOL;
    while out.len() < len {
        let take = (len - out.len()).min(POOL - at);
        out.extend_from_slice(&pool[at..at + take]);
        at = 0;
    }
    out
}

/// `len` bytes from the operating system's random source.
fn random(len: usize) -> Vec<u8> {
    use rand_core::RngCore;
    let mut v = vec![0u8; len];
    rand_core::OsRng.fill_bytes(&mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::super::decide::{CALIBRATED_JOB_BYTES, CALIBRATED_PAGEABLE_BYTES};
    use super::super::model::DIRECT_MIN;
    use super::*;

    #[test]
    fn large_pinned_jobs_are_past_the_calibrated_sizes_and_dmad() {
        for (size, n) in PINNED_LARGE_SHAPES {
            assert!((size * n) as u64 > CALIBRATED_JOB_BYTES);
            assert!(size as u64 >= DIRECT_MIN);
        }
        // Two different sizes, or the line has no slope to fit.
        assert_ne!(
            PINNED_LARGE_SHAPES[0].0 * PINNED_LARGE_SHAPES[0].1,
            PINNED_LARGE_SHAPES[1].0 * PINNED_LARGE_SHAPES[1].1
        );
        // A serial hash's price past them is its thread's, not a line's.
        assert!(PINNED_LARGE_OPS.iter().all(|&op| !gpu_serial(op)));
    }

    /// The chunking ops' line and speed-up are measured on segments of
    /// several minimum-size chunks (the jobs `bench primitive` runs them
    /// as), the others on the shared shapes.
    #[test]
    fn chunking_ops_are_measured_on_segments_of_several_chunks() {
        use crate::chunking::ChunkParams;
        let min = ChunkParams::DEFAULT.min() as usize;
        let line = LinearCost {
            fixed_ns: 0.0,
            ns_per_byte: 0.5,
            ns_per_segment: 0.0,
        };
        for op in [OpKind::Chunk, OpKind::ChunkDigest] {
            for quick in [false, true] {
                for &(size, n) in super::cpu_shapes(op, quick) {
                    assert!(size >= 4 * min && n >= 1, "{op} {size} x {n}");
                }
                let (size, _) = super::cpu::speedup_shape(op, &line, 16, quick);
                assert!(size >= 4 * min, "{op}: speed-up on {size}-byte segments");
            }
        }
        assert_eq!(super::cpu_shapes(OpKind::Sha256, false), &super::SHAPES[..]);
        assert_eq!(
            super::cpu_shapes(OpKind::Sha256, true),
            &super::QUICK_SHAPES[..]
        );
        let (size, _) = super::cpu::speedup_shape(OpKind::Sha256, &line, 16, false);
        assert!(size <= 1 << 20);
    }

    #[test]
    fn the_chunking_line_is_the_median_rate() {
        let line = super::rate_line(&[
            (2 << 20, 1, 1.4e6),
            (8 << 20, 4, 4.0e6),
            (16 << 20, 2, 9.0e6),
        ])
        .unwrap();
        assert_eq!((line.fixed_ns, line.ns_per_segment), (0.0, 0.0));
        assert!((line.ns_per_byte - 9.0e6 / (16 << 20) as f64).abs() < 1e-12);
        assert!(super::rate_line(&[(0, 1, 5.0)]).is_none());
    }

    #[test]
    fn pool_bytes_wrap_around_the_pool() {
        let a = super::pool_bytes(5, 100);
        let whole = super::pool_bytes(0, (16 << 20) + 300);
        assert_eq!(a[..], whole[5..105]);
        assert_eq!(whole[16 << 20..], whole[..300]);
        assert!(super::pool_bytes(0, 0).is_empty());
    }

    #[test]
    fn the_planner_knows_the_largest_calibrated_job() {
        // Of the jobs whose pinned pieces are DMA'd (the pinned line).
        let largest = GPU_SHAPES
            .iter()
            .filter(|&&(s, _)| s as u64 >= DIRECT_MIN)
            .map(|&(s, n)| (s * n) as u64)
            .max();
        assert_eq!(largest, Some(CALIBRATED_JOB_BYTES));
    }

    #[test]
    fn the_large_pageable_line_starts_where_the_stage_lines_end() {
        let largest = GPU_SHAPES.iter().map(|&(s, n)| (s * n) as u64).max();
        assert_eq!(largest, Some(CALIBRATED_PAGEABLE_BYTES));
        for op in OpKind::ALL {
            let [(s0, n0), (s1, n1)] = pageable_large_shapes(op);
            assert_eq!((s0 * n0) as u64, CALIBRATED_PAGEABLE_BYTES, "{op}");
            assert!((s1 * n1) as u64 > CALIBRATED_PAGEABLE_BYTES, "{op}");
        }
    }
}
