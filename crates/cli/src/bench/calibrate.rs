//! `gvault bench calibrate`: measures every op on the CPU (one core at a
//! few job shapes, then all cores) and, where there is a GPU, end to end from
//! pageable and from page-locked host memory, on device-resident data, and
//! the link; fits the auto
//! backend's cost model by least squares and stores it where `auto` loads it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gvault_accel::auto::{
    self, crossover, fit_linear, fit_ramp, fit_stages, gpu_serial, machine_identity, CostModel,
    CpuCost, Crossover, GpuCost, HostMemory, LinearCost, LinkCost, OpModel, StageSample,
    DIRECT_MIN, FORMAT_VERSION, SMALL_SPEEDUP_UNITS_PER_THREAD, SPEEDUP_UNITS_PER_THREAD,
};
use gvault_accel::cpu::CpuBackend;
use gvault_accel::gpu::GpuBackend;
use gvault_accel::*;

use super::measure::{repeat, size_label};
use super::primitive::{gpu_supports, measure_device_resident, measure_dyn, random, Keys};

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// Fewer, smaller measurements (seconds; for tests and a first look).
    #[arg(long)]
    quick: bool,
    /// Write the model here instead of the config directory.
    #[arg(long)]
    out: Option<PathBuf>,
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
/// <= 32 MiB and <= 256 segments, missed all three (session 5).
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
/// figures at these shapes (session 7 call 9: 26.8 and 44.7 GB/s sealing)
/// the line lands within 7% of the measured 4 x 64 MiB and 4 x 1 GiB; a
/// line through 4 x 64 MiB and 4 x 256 MiB misses 4 x 16 MiB by 20%.
const PINNED_LARGE_SHAPES: [(usize, usize); 2] = [(16 << 20, 4), (256 << 20, 4)];

/// Segments in the jobs cross-overs are reported for.
pub const CROSSOVER_SEGMENTS: usize = 64;

pub fn run(args: CalibrateArgs) -> Result<(), String> {
    let started = Instant::now();
    let path = match args.out.clone() {
        Some(p) => p,
        None => auto::default_path()
            .ok_or("no config directory: set HOME or XDG_CONFIG_HOME, or pass --out")?,
    };
    let gpu = match GpuBackend::probe() {
        Ok(g) => Some(g),
        Err(why) => {
            println!("gpu: unavailable ({why}); calibrating the CPU only");
            None
        }
    };
    let identity = machine_identity(gpu.as_ref());
    let shapes = cpu_shapes(OpKind::AesGcmSeal, args.quick);
    let min_time = Duration::from_millis(if args.quick { 10 } else { 40 });
    let one = CpuBackend::with_threads(1);
    let all = CpuBackend::new();
    let keys = Keys::new();
    println!(
        "calibrating on {} cores{}; {} shapes per op, >= {} ms each",
        all.threads(),
        identity
            .gpu_name
            .as_deref()
            .map(|n| format!(" and {n}"))
            .unwrap_or_default(),
        shapes.len(),
        min_time.as_millis()
    );

    if !args.quick {
        warm_up(&all, gpu.as_ref(), &keys);
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
            calibrate_rsa(&one, &all, min_time)?
        } else {
            calibrate_op(
                op,
                &keys,
                cpu_shapes(op, args.quick),
                &one,
                &all,
                gpu.as_ref(),
                min_time,
                args.quick,
            )?
        };
        model.ops.insert(op.name().to_string(), m);
        println!("  {op}: {:.1} s", op_started.elapsed().as_secs_f64());
    }
    if !args.quick {
        let pass_started = Instant::now();
        second_pass(&mut model, &keys, &all, min_time)?;
        println!(
            "  second pass: {:.1} s",
            pass_started.elapsed().as_secs_f64()
        );
    }
    if let Some(g) = &gpu {
        model.link = calibrate_link(g)?;
        // Quick models keep the plateau extrapolation: the larger job alone
        // pins 1 GiB.
        if !args.quick {
            calibrate_pinned_large(g, &keys, &mut model, min_time)?;
        }
    }
    model.validate()?;
    auto::write(&path, &model)?;
    print_model(&model, all.threads());
    println!(
        "\nwrote {} in {:.1} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn time_ns(
    backend: &dyn Backend,
    op: OpKind,
    keys: &Keys,
    size: usize,
    n: usize,
    min_time: Duration,
) -> Result<f64, String> {
    let mut bufs: Vec<Vec<u8>> = (0..n).map(|i| pool_bytes(i * size, size)).collect();
    Ok(measure_dyn(backend, op, keys, &mut bufs, min_time)?.as_nanos() as f64)
}

#[allow(clippy::too_many_arguments)]
fn calibrate_op(
    op: OpKind,
    keys: &Keys,
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
            time_ns(one, op, keys, size, n, min_time)?,
        ));
    }
    let one_thread = if matches!(op, OpKind::Chunk | OpKind::ChunkDigest) {
        rate_line(&samples)
    } else {
        fit_linear(&samples)
    }
    .ok_or_else(|| format!("{op}: no usable CPU timings"))?;
    let speedup = cpu_speedup(op, keys, &one_thread, one, all, min_time, quick)?;
    let small_speedup = if quick {
        None
    } else {
        Some(cpu_small_speedup(op, keys, &one_thread, all, min_time)?)
    };
    let cut_cost = if quick {
        None
    } else {
        gcm_cut_cost(op, keys, &one_thread, all, min_time)?
    };
    let cpu = CpuCost {
        one_thread,
        threads: all.threads(),
        speedup,
        cut_cost,
        small_speedup,
    };
    let gpu = match gpu {
        Some(g) => calibrate_gpu(op, keys, &gpu_shapes(op, quick), g, min_time)?,
        None => None,
    };
    Ok(OpModel { cpu, gpu })
}

/// Brings the GPU's and the cores' clocks up before anything is timed:
/// about half a second of AES-GCM on all cores and on the GPU. The first op
/// calibrated used to pay for idle clocks: on a warm H100 host left idle
/// for minutes, AES-GCM seal calibrated at a 74 GB/s kernel (190 after)
/// and a cut-segment cost of 6.6 (2.9), and `auto` then sent 4 x 64 MiB
/// pageable seals to the GPU at 0.3x the CPU (session 8, call 5).
fn warm_up(all: &CpuBackend, gpu: Option<&GpuBackend>, keys: &Keys) {
    let until = Instant::now() + Duration::from_millis(500);
    let mut bufs: Vec<Vec<u8>> = (0..all.threads().max(1) * 2)
        .map(|i| pool_bytes(i << 20, 4 << 20))
        .collect();
    let mut device = gpu.and_then(|g| g.alloc_pinned(64 << 20).ok());
    while Instant::now() < until {
        // Results are not used: failures here surface in the timed runs.
        let _ = measure_dyn(all, OpKind::AesGcmSeal, keys, &mut bufs, Duration::ZERO);
        if let (Some(g), Some(buf)) = (gpu, device.as_mut()) {
            let mut views: Vec<&mut [u8]> = buf.chunks_mut(16 << 20).collect();
            let _ = measure_dyn(g, OpKind::AesGcmSeal, keys, &mut views, Duration::ZERO);
        }
    }
}

/// Speed-up of all cores over the one-thread line, on 4 segments a thread
/// (up to 1 MiB each; 64 on 16 cores, the shape `bench primitive` runs at
/// 1 MiB): the median of three rounds, each timing one thread (printed, to
/// show how far the shape runs below the line) and then all threads. One
/// all-core timing on 2 segments a thread swung the H100 host's GCM figure
/// from 59 to 108 GB/s between calls (session 6). Segments shrink for slow
/// ops (`one_thread`: TEA) so one thread's pass stays near 40 ms. Each
/// round's figure is [`line_speedup`]: predictions divide the line, not a
/// measured one-thread time.
fn cpu_speedup(
    op: OpKind,
    keys: &Keys,
    one_thread: &LinearCost,
    one: &CpuBackend,
    all: &CpuBackend,
    min_time: Duration,
    quick: bool,
) -> Result<f64, String> {
    let (size, n) = speedup_shape(op, one_thread, all.threads(), quick);
    let bytes = (size * n) as u64;
    let rounds = if quick { 1 } else { 3 };
    let mut ratios = Vec::with_capacity(rounds);
    let mut one_ns = f64::MAX;
    for _ in 0..rounds {
        one_ns = one_ns.min(time_ns(one, op, keys, size, n, min_time)?);
        let tn = time_ns(all, op, keys, size, n, min_time)?;
        ratios.push(line_speedup(one_thread, bytes, n, tn));
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.1}")).collect();
    println!(
        "  {op}: all-core speed-up over the one-thread line on {n} x {}: {} \
         (one thread {:.2} GB/s measured, {:.2} GB/s by the line)",
        size_label(size),
        shown.join(", "),
        bytes as f64 / one_ns,
        bytes as f64 / one_thread.predict_ns(bytes, n)
    );
    ratios.sort_by(f64::total_cmp);
    Ok(ratios[ratios.len() / 2].max(1.0))
}

/// Speed-up of all cores over the one-thread line on many small segments
/// (`SMALL_SPEEDUP_UNITS_PER_THREAD` a thread, 4 KiB each: 16384 on 16
/// cores, the shape `bench primitive` runs at 4 KiB): the shape where the
/// pool balances its threads, which [`cpu_speedup`]'s few large segments
/// do not (`CpuCost::small_speedup`). Median of three all-core timings;
/// no one-thread timing, as the figure is over the line.
fn cpu_small_speedup(
    op: OpKind,
    keys: &Keys,
    one_thread: &LinearCost,
    all: &CpuBackend,
    min_time: Duration,
) -> Result<f64, String> {
    let shape = (4096, all.threads() * SMALL_SPEEDUP_UNITS_PER_THREAD);
    let (speedup, ratios) = all_core_speedup(op, keys, one_thread, all, shape, min_time)?;
    println!(
        "  {op}: all-core speed-up over the one-thread line on {} x {}: {}",
        shape.1,
        size_label(shape.0),
        ratios
    );
    Ok(speedup)
}

/// The shape `CpuCost::speedup` is measured on: `SPEEDUP_UNITS_PER_THREAD`
/// segments a thread of up to 1 MiB (256 KiB quick), smaller for slow ops
/// so one thread's pass over them stays near 40 ms. The chunking ops take
/// segments of several chunks, as their line does (`CHUNKING_SHAPES`): on
/// 1 MiB segments one thread ran at about half the line's rate.
fn speedup_shape(
    op: OpKind,
    one_thread: &LinearCost,
    threads: usize,
    quick: bool,
) -> (usize, usize) {
    let n = threads * SPEEDUP_UNITS_PER_THREAD;
    let (smallest, largest) = match (op, quick) {
        (OpKind::Chunk | OpKind::ChunkDigest, false) => (2 << 20, 2 << 20),
        (OpKind::Chunk | OpKind::ChunkDigest, true) => (2 << 20, 2 << 20),
        (_, false) => (64 << 10, 1 << 20),
        (_, true) => (64 << 10, 256 << 10),
    };
    let per_byte = one_thread.ns_per_byte.max(1e-3);
    let size = ((40e6 / per_byte) as usize / n / 4096 * 4096).clamp(smallest, largest);
    (size, n)
}

/// The median of three all-core timings of `shape` (size, segments) as a
/// speed-up over the line, and the three figures as text.
fn all_core_speedup(
    op: OpKind,
    keys: &Keys,
    one_thread: &LinearCost,
    all: &CpuBackend,
    (size, n): (usize, usize),
    min_time: Duration,
) -> Result<(f64, String), String> {
    let bytes = (size * n) as u64;
    let mut ratios = Vec::with_capacity(3);
    for _ in 0..3 {
        let tn = time_ns(all, op, keys, size, n, min_time)?;
        ratios.push(line_speedup(one_thread, bytes, n, tn));
    }
    let shown: Vec<String> = ratios.iter().map(|r| format!("{r:.1}")).collect();
    ratios.sort_by(f64::total_cmp);
    Ok((ratios[1].max(1.0), shown.join(", ")))
}

/// The all-core figures once more, after every op: each keeps the better
/// of its two passes (the higher speed-ups, the lower cut cost). A speed-up
/// is what the cores can do; a transient on the host lowers it for as long
/// as it lasts. On the H100 host one calibration's AES-GCM and CRC figures
/// came out at 4-5x where the call before had 10.6-10.8, while the
/// compute-bound hashes calibrated as usual: host memory was taken for the
/// seconds the first ops took. The CPU was then priced at 35 GB/s on 64 x
/// 1 MiB GCM seals that ran at 92, and auto split them with the GPU at
/// 0.63x of the CPU alone (session 11, call 9).
fn second_pass(
    model: &mut CostModel,
    keys: &Keys,
    all: &CpuBackend,
    min_time: Duration,
) -> Result<(), String> {
    println!("second pass over the all-core figures (each keeps the better):");
    for (name, m) in model.ops.iter_mut() {
        let Some(op) = OpKind::from_name(name) else {
            continue;
        };
        if op == OpKind::RsaPrivate {
            continue;
        }
        let c = &mut m.cpu;
        let line = c.one_thread;
        let shape = speedup_shape(op, &line, all.threads(), false);
        let (large, _) = all_core_speedup(op, keys, &line, all, shape, min_time)?;
        let small = cpu_small_speedup(op, keys, &line, all, min_time)?;
        let cut = gcm_cut_cost(op, keys, &line, all, min_time)?;
        println!(
            "  {op}: speed-up {:.1} -> {:.1}, many small pieces {} -> {:.1}{}",
            c.speedup,
            large,
            c.small_speedup.map_or("-".into(), |s| format!("{s:.1}")),
            small,
            match (c.cut_cost, cut) {
                (Some(a), Some(b)) => format!(", cut cost {a:.2} -> {b:.2}"),
                _ => String::new(),
            }
        );
        keep_the_better(c, large, small, cut);
    }
    Ok(())
}

/// Merges a second pass into `c`: the higher speed-ups, the lower cut cost.
fn keep_the_better(c: &mut CpuCost, speedup: f64, small_speedup: f64, cut_cost: Option<f64>) {
    c.speedup = c.speedup.max(speedup);
    c.small_speedup = Some(
        c.small_speedup
            .map_or(small_speedup, |s| s.max(small_speedup)),
    );
    c.cut_cost = match (c.cut_cost, cut_cost) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
}

/// The speed-up at which [`CpuCost::predict_ns`] on all threads prices a
/// job of `bytes` in `segments` at the measured `all_core_ns`: the fitted
/// one-thread line's time for that job over the all-core time, the fixed
/// cost taken off both (`predict_ns` pays it once, undivided). Not one
/// measured thread's time: the line is fitted on jobs that stay in cache,
/// and the calibration shape (64 MiB) does not, so one thread runs it well
/// below the line (H100 GCM seal: 6.4-7.4 GB/s measured, 10-11 by the
/// line). Measured over measured, the ratio held that gap, and dividing
/// the line by it priced all-core GCM at 64 x 1 MiB at ~190 GB/s against
/// 90-110 measured. (Reproduced up to the thread count, where `speedup_at`
/// caps the figure; a line slower than all cores together gives under 1.)
pub(super) fn line_speedup(
    one_thread: &LinearCost,
    bytes: u64,
    segments: usize,
    all_core_ns: f64,
) -> f64 {
    let line_ns = one_thread.predict_ns(bytes, segments);
    let parallel_ns = all_core_ns - one_thread.fixed_ns;
    if parallel_ns > 0.0 {
        (line_ns - one_thread.fixed_ns) / parallel_ns
    } else {
        // All-core time within the fixed cost: no parallel part to compare.
        line_ns / all_core_ns
    }
}

/// What a cut AES-GCM segment costs a thread, as a multiple of the fused
/// one-thread per-byte rate: all threads on 4 segments of 64 MiB, which the
/// CPU backend cuts across them (`None` where it would not, or for other
/// ops). The H100 host gave 2.3-2.8 sealing and 2.8-4.0 opening (host
/// memory takes its share), where one constant had priced both at 2.3.
fn gcm_cut_cost(
    op: OpKind,
    keys: &Keys,
    one_thread: &LinearCost,
    all: &CpuBackend,
    min_time: Duration,
) -> Result<Option<f64>, String> {
    let (size, n) = (64usize << 20, 4usize);
    let cut_bytes =
        (gvault_accel::cpu::DEFAULT_SPLIT_BYTES * gvault_accel::cpu::GCM_CUT_PIECES) as u64;
    if !matches!(op, OpKind::AesGcmSeal | OpKind::AesGcmOpen)
        || !gvault_accel::cpu::gcm_cut_applies(n, size as u64, all.threads(), cut_bytes)
    {
        return Ok(None);
    }
    // The median of three rounds, each its own measurement: one transient
    // (page reclaim, writeback, a clock dip) skews one round, not the cost.
    let mut rounds = Vec::with_capacity(3);
    for _ in 0..3 {
        rounds.push(time_ns(all, op, keys, size, n, min_time)?);
    }
    rounds.sort_by(f64::total_cmp);
    let ns = rounds[1];
    let per_thread_bytes = (size * n) as f64 / all.threads() as f64;
    let cost = ns / (per_thread_bytes * one_thread.ns_per_byte.max(1e-6));
    println!(
        "  {op}: cut segments on {} threads: {:.1} GB/s, {cost:.2}x the fused per-byte cost",
        all.threads(),
        (size * n) as f64 / ns
    );
    Ok(Some(cost.clamp(1.0, 16.0)))
}

/// GPU costs of `op`, or `None` where the GPU backend does not run it: end
/// to end from pageable and from page-locked host memory, and on
/// device-resident data.
fn calibrate_gpu(
    op: OpKind,
    keys: &Keys,
    shapes: &[(usize, usize)],
    g: &GpuBackend,
    min_time: Duration,
) -> Result<Option<GpuCost>, String> {
    let mut pageable: Vec<StageSample> = Vec::new();
    let mut pinned: Vec<StageSample> = Vec::new();
    let mut packed: Vec<StageSample> = Vec::new();
    for &(size, n) in shapes {
        let sample = |ns| ((size * n) as u64, n, size as u64, ns);
        match time_ns(g, op, keys, size, n, min_time) {
            Ok(ns) => pageable.push(sample(ns)),
            Err(e) if e.contains("does not implement") => return Ok(None),
            Err(e) => return Err(e),
        }
        let ns = time_pinned_ns(g, op, keys, size, n, min_time)?;
        if size as u64 >= DIRECT_MIN {
            pinned.push(sample(ns));
        } else {
            packed.push(sample(ns));
        }
    }
    let serial = gpu_serial(op);
    let fit = |samples: &[StageSample], what: &str| {
        fit_stages(samples, serial).ok_or_else(|| format!("{op}: no usable GPU timings ({what})"))
    };
    let (pageable, pageable_thread) = fit(&pageable, "pageable")?;
    let (pinned, pinned_thread) = fit(&pinned, "pinned")?;
    let pinned_packed = fit_stages(&packed, serial).map(|f| f.0);
    // DMA'd pieces are never slower per byte or segment than packed ones;
    // a serial hash's DMA'd shapes are all thread-bound, so only the
    // packed shapes bound its byte and segment stages.
    let pinned = match pinned_packed {
        Some(p) => LinearCost {
            fixed_ns: pinned.fixed_ns,
            ns_per_byte: pinned.ns_per_byte.min(p.ns_per_byte),
            ns_per_segment: pinned.ns_per_segment.min(p.ns_per_segment),
        },
        None => pinned,
    };
    // Device-resident timings where the bench can place this op's input on
    // the GPU; otherwise the pinned figure stands in (it can only be slower).
    let (kernel, kernel_thread) = if gpu_supports(op) {
        let mut samples = Vec::new();
        for &(size, n) in shapes {
            let t = measure_device_resident(g, op, keys, size, n, min_time)?;
            samples.push(((size * n) as u64, n, size as u64, t.as_nanos() as f64));
        }
        fit_stages(&samples, serial).unwrap_or((pinned, pinned_thread))
    } else {
        (pinned, pinned_thread)
    };
    // One thread's rate is the kernel's; host lines only add copies.
    let thread_ns_per_byte = kernel_thread.or(pinned_thread).or(pageable_thread);
    Ok(Some(GpuCost {
        kernel,
        pinned: Some(pinned),
        pageable: Some(pageable),
        pinned_packed,
        thread_ns_per_byte,
        // Measured after every op (`calibrate_pinned_large`).
        pinned_large: None,
    }))
}

/// As [`time_ns`], with the segments in page-locked host memory.
fn time_pinned_ns(
    g: &GpuBackend,
    op: OpKind,
    keys: &Keys,
    size: usize,
    n: usize,
    min_time: Duration,
) -> Result<f64, String> {
    let mut buf = g.alloc_pinned(size * n).map_err(|e| e.to_string())?;
    buf.copy_from_slice(&pool_bytes(0, size * n));
    let mut views: Vec<&mut [u8]> = buf.chunks_mut(size.max(1)).take(n).collect();
    Ok(measure_dyn(g, op, keys, &mut views, min_time)?.as_nanos() as f64)
}

/// The large page-locked line (`GpuCost::pinned_large`) of each of
/// [`PINNED_LARGE_OPS`] that the GPU runs: the two
/// [`PINNED_LARGE_SHAPES`] timed as `measure_dyn` does (a warm-up, then
/// the median of >= 3 runs) and the line through them. One pinned buffer,
/// allocated and filled once outside the timings, serves every op: pinning
/// 1 GiB costs more than the runs (~1 s in all at ~40 GB/s).
fn calibrate_pinned_large(
    g: &GpuBackend,
    keys: &Keys,
    model: &mut CostModel,
    min_time: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let len = PINNED_LARGE_SHAPES
        .iter()
        .map(|&(size, n)| size * n)
        .max()
        .unwrap_or(0);
    let mut buf = g
        .alloc_pinned(len)
        .map_err(|e| format!("pinning {} for the large jobs: {e}", size_label(len)))?;
    let fill = pool_bytes(0, 16 << 20);
    for chunk in buf.chunks_mut(fill.len()) {
        chunk.copy_from_slice(&fill[..chunk.len()]);
    }
    for op in PINNED_LARGE_OPS {
        let Some(gpu) = model.ops.get_mut(op.name()).and_then(|m| m.gpu.as_mut()) else {
            continue;
        };
        let mut samples = Vec::with_capacity(PINNED_LARGE_SHAPES.len());
        let mut shown = Vec::with_capacity(PINNED_LARGE_SHAPES.len());
        for &(size, n) in &PINNED_LARGE_SHAPES {
            let mut views: Vec<&mut [u8]> = buf[..size * n].chunks_mut(size).collect();
            let ns = measure_dyn(g, op, keys, &mut views, min_time)?.as_nanos() as f64;
            samples.push(((size * n) as u64, ns));
            shown.push(format!(
                "{n} x {} {:.1} GB/s",
                size_label(size),
                (size * n) as f64 / ns
            ));
        }
        gpu.pinned_large = fit_ramp(&samples);
        println!(
            "  {op}: pinned {}: {}",
            shown.join(", "),
            gpu.pinned_large.map_or("no line".into(), describe_ramp)
        );
    }
    println!(
        "  large pinned jobs: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A large pinned line as "1.9 ms + 49.0 GB/s".
fn describe_ramp(l: LinearCost) -> String {
    format!("{:.1} ms + {} GB/s", l.fixed_ns / 1e6, gbps(l.ns_per_byte))
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

/// RSA-2048 private operations: a cost per segment (key sizes differ by
/// far more than bytes would say; 2048 bits is the common case).
fn calibrate_rsa(
    one: &CpuBackend,
    all: &CpuBackend,
    min_time: Duration,
) -> Result<OpModel, String> {
    let key = RsaPrivateKey::from_key(
        rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 2048).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let batch = all.threads() * 2;
    let inputs: Vec<Vec<u8>> = (0..batch)
        .map(|_| {
            let mut v = random(key.size());
            v[0] = 0;
            v
        })
        .collect();
    let time = |b: &CpuBackend, n: usize| {
        repeat(2, min_time, || {
            let mut job = Job::RsaPrivate {
                key: &key,
                segments: inputs[..n].iter().map(|v| v.as_slice()).collect(),
            };
            let start = Instant::now();
            let _ = b.run(&mut job);
            start.elapsed()
        })
        .median
        .as_nanos() as f64
    };
    let samples: Vec<(u64, usize, f64)> = [1, batch]
        .iter()
        .map(|&n| ((n * key.size()) as u64, n, time(one, n)))
        .collect();
    let per_segment = samples[1].2 / batch as f64;
    let one_thread = LinearCost {
        fixed_ns: 0.0,
        ns_per_byte: 0.0,
        ns_per_segment: per_segment,
    };
    let speedup = (samples[1].2 / time(all, batch)).max(1.0);
    Ok(OpModel {
        cpu: CpuCost {
            one_thread,
            threads: all.threads(),
            speedup,
            cut_cost: None,
            small_speedup: None,
        },
        gpu: None,
    })
}

/// Pinned host-to-device copies at a few sizes: fixed cost and rate.
fn calibrate_link(g: &GpuBackend) -> Result<Option<LinkCost>, String> {
    let Some(dev) = g.devices().first() else {
        return Ok(None);
    };
    let sizes = [64 << 10, 1 << 20, 16 << 20, 64 << 20];
    let figures = gvault_accel::gpu::link::measure(dev, &sizes, 5)?;
    let samples: Vec<(u64, usize, f64)> = figures
        .iter()
        .filter(|f| f.pinned && f.to_device && f.gbps > 0.0)
        .map(|f| (f.bytes as u64, 1, f.bytes as f64 / f.gbps))
        .collect();
    Ok(fit_linear(&samples).map(|c| LinkCost {
        fixed_ns: c.fixed_ns + c.ns_per_segment,
        ns_per_byte: c.ns_per_byte,
    }))
}

fn gbps(ns_per_byte: f64) -> String {
    if ns_per_byte > 0.0 {
        format!("{:.2}", 1.0 / ns_per_byte)
    } else {
        "-".into()
    }
}

pub fn describe(c: Crossover) -> String {
    match c {
        Crossover::NoGpu => "no GPU".into(),
        Crossover::GpuNeverFaster => "GPU never faster".into(),
        Crossover::GpuAlwaysFaster => "GPU always faster".into(),
        Crossover::At(size) => format!("GPU from {}", approx_size(size)),
    }
}

fn approx_size(n: u64) -> String {
    let p = n.next_power_of_two();
    // Round to a power of two for display when close; exact otherwise.
    if p - n < p / 8 {
        size_label(p as usize)
    } else {
        format!("{:.0} KiB", n as f64 / 1024.0)
    }
}

/// The model as a table: CPU and GPU rates and the cross-overs per op, for
/// host data in pinned and in pageable memory.
pub fn print_model(model: &CostModel, cpu_threads: usize) {
    print!("{}", model_table(model, cpu_threads));
}

/// [`print_model`]'s text.
fn model_table(model: &CostModel, cpu_threads: usize) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if let Some(l) = model.link {
        let _ = writeln!(
            out,
            "link: {:.1} µs + {} GB/s (pinned, host to device)",
            l.fixed_ns / 1e3,
            gbps(l.ns_per_byte)
        );
    }
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>10} {:>8} {:>8} {:>10} {:>19} {:>10} {:>11}  cross-over ({CROSSOVER_SEGMENTS}-segment jobs, {cpu_threads} CPU threads)",
        "op", "cpu µs", "cpu-1 GB/s", "speedup", "gpu µs", "pinned", "pinned > 32 MiB", "pageable", "kernel GB/s"
    );
    for op in OpKind::ALL {
        let Some(m) = model.op(op) else { continue };
        let c = m.cpu.one_thread;
        let line = |mem| model.gpu_cost(op, mem);
        let (gpu_fixed, pinned, pageable, kernel) = match m.gpu {
            Some(_) => (
                line(HostMemory::Pinned)
                    .map(|h| format!("{:.1}", h.fixed_ns / 1e3))
                    .unwrap_or_else(|| "-".into()),
                line(HostMemory::Pinned).map_or("-".into(), |h| gbps(h.ns_per_byte)),
                line(HostMemory::Pageable).map_or("-".into(), |h| gbps(h.ns_per_byte)),
                line(HostMemory::Device).map_or("-".into(), |h| gbps(h.ns_per_byte)),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let cpu_rate = if op == OpKind::RsaPrivate {
            format!("{:.0}/s", 1e9 / c.ns_per_segment.max(1.0))
        } else {
            gbps(c.ns_per_byte)
        };
        let crossovers = if m.gpu.is_none() {
            describe(Crossover::NoGpu)
        } else {
            HostMemory::HOST
                .iter()
                .map(|&mem| {
                    let c = crossover(model, op, CROSSOVER_SEGMENTS, cpu_threads, mem);
                    format!("{}: {}", mem.name(), describe(c))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        // The measured line of large pinned jobs, where calibrated (else
        // they are priced on the plateau of link and kernel).
        let large = m
            .gpu
            .and_then(|g| g.pinned_large)
            .map_or("-".into(), describe_ramp);
        let _ = writeln!(
            out,
            "{:<16} {:>8.1} {:>10} {:>7.1}x {:>8} {:>10} {:>19} {:>10} {:>11}  {crossovers}",
            op.name(),
            c.fixed_ns / 1e3,
            cpu_rate,
            m.cpu.speedup_at(cpu_threads),
            gpu_fixed,
            pinned,
            large,
            pageable,
            kernel,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_pass_keeps_the_better_figures() {
        let mut c = CpuCost {
            one_thread: LinearCost::default(),
            threads: 16,
            speedup: 4.1,
            cut_cost: Some(5.2),
            small_speedup: Some(4.1),
        };
        // A disturbed first pass (H100, session 11 call 9) is lifted...
        keep_the_better(&mut c, 10.8, 7.4, Some(3.9));
        assert_eq!(
            (c.speedup, c.small_speedup, c.cut_cost),
            (10.8, Some(7.4), Some(3.9))
        );
        // ...and a disturbed second pass changes nothing.
        keep_the_better(&mut c, 4.0, 3.0, Some(6.0));
        assert_eq!(
            (c.speedup, c.small_speedup, c.cut_cost),
            (10.8, Some(7.4), Some(3.9))
        );
        // Ops without a cut cost keep none.
        let mut hash = CpuCost {
            cut_cost: None,
            ..c
        };
        keep_the_better(&mut hash, 1.0, 1.0, None);
        assert_eq!(hash.cut_cost, None);
    }

    #[test]
    fn the_line_speedup_reproduces_the_measured_all_core_time() {
        // The H100 host's GCM seal: the in-cache line at ~11 GB/s a thread,
        // one thread measured at 6.4 GB/s on 64 x 1 MiB, all cores at 90.
        let line = LinearCost {
            fixed_ns: 2_000.0,
            ns_per_byte: 1.0 / 11.0,
            ns_per_segment: 150.0,
        };
        let (size, n, threads) = (1u64 << 20, 64usize, 16usize);
        let bytes = size * n as u64;
        let (one_ns, all_ns) = (bytes as f64 / 6.4, bytes as f64 / 90.0);
        let predict = |speedup: f64| {
            let cpu = CpuCost {
                one_thread: line,
                threads,
                speedup,
                cut_cost: None,
                small_speedup: None,
            };
            cpu.predict_ns(bytes, n, n, size, threads)
        };
        let speedup = line_speedup(&line, bytes, n, all_ns);
        assert!(speedup > 1.0 && speedup < threads as f64, "{speedup}");
        let t = predict(speedup);
        assert!((t - all_ns).abs() <= 1e-9 * all_ns, "{t} vs {all_ns}");
        // Measured over measured (the old figure, 14.1): ~155 GB/s priced.
        let old = one_ns / all_ns;
        assert!(old < threads as f64, "{old}");
        assert!(predict(old) < 0.7 * all_ns, "{}", predict(old));
        // An all-core time inside the fixed cost still gives a finite figure.
        assert!(line_speedup(&line, 0, 1, 1_000.0).is_finite());
    }

    #[test]
    fn large_pinned_jobs_are_past_the_calibrated_sizes_and_dmad() {
        for (size, n) in PINNED_LARGE_SHAPES {
            assert!((size * n) as u64 > gvault_accel::auto::CALIBRATED_JOB_BYTES);
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

    #[test]
    fn the_model_table_shows_large_pinned_lines_where_present() {
        let mut m: CostModel = serde_json::from_str(include_str!(
            "../../../accel/src/auto/testdata/h100-cost-model-s7.json"
        ))
        .expect("parses");
        let gpu = m.ops.get_mut("aes256gcm-seal").and_then(|o| o.gpu.as_mut());
        gpu.expect("a GPU").pinned_large = Some(LinearCost {
            fixed_ns: 1.9e6,
            ns_per_byte: 1.0 / 49.0,
            ns_per_segment: 0.0,
        });
        let table = model_table(&m, 16);
        let row = |op: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("{op} ")))
                .unwrap_or_else(|| panic!("no {op} row in\n{table}"))
                .to_string()
        };
        assert!(table.contains("pinned > 32 MiB"), "{table}");
        assert!(
            row("aes256gcm-seal").contains("1.9 ms + 49.00 GB/s"),
            "{table}"
        );
        assert!(!row("aes256gcm-open").contains(" ms + "), "{table}");
    }

    /// The chunking ops' line and speed-up are measured on segments of
    /// several minimum-size chunks (the jobs `bench primitive` runs them
    /// as), the others on the shared shapes.
    #[test]
    fn chunking_ops_are_measured_on_segments_of_several_chunks() {
        use gvault_accel::ChunkParams;
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
                let (size, _) = super::speedup_shape(op, &line, 16, quick);
                assert!(size >= 4 * min, "{op}: speed-up on {size}-byte segments");
            }
        }
        assert_eq!(super::cpu_shapes(OpKind::Sha256, false), &super::SHAPES[..]);
        assert_eq!(
            super::cpu_shapes(OpKind::Sha256, true),
            &super::QUICK_SHAPES[..]
        );
        let (size, _) = super::speedup_shape(OpKind::Sha256, &line, 16, false);
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
        assert_eq!(largest, Some(gvault_accel::auto::CALIBRATED_JOB_BYTES));
    }

    #[test]
    fn quick_calibration_writes_a_model_that_loads_back() {
        let dir = std::env::temp_dir().join(format!("gvault-calibrate-{}", std::process::id()));
        let path = dir.join("model.json");
        run(CalibrateArgs {
            quick: true,
            out: Some(path.clone()),
        })
        .expect("calibration runs");
        let identity = machine_identity(GpuBackend::probe().ok().as_ref());
        let model = auto::read(&path, &identity).expect("the written model loads");
        for op in OpKind::ALL {
            let m = model.op(op).expect("every op calibrated");
            assert!(m.cpu.one_thread.predict_ns(1 << 20, 1) > 0.0, "{op}");
        }
        let (_, source) = auto::load(Some(&path), &identity);
        assert_eq!(source, auto::ModelSource::File(path.clone()));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
