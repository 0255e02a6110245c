//! The GPU side of calibration: stage lines from pageable, page-locked and
//! device-resident data, the line of large page-locked jobs, and the link.

use std::time::{Duration, Instant};

use super::super::model::{
    fit_linear, fit_ramp, fit_stages, gpu_serial, CostModel, GpuCost, LinearCost, LinkCost,
    StageSample, DIRECT_MIN,
};
use super::table::{describe_ramp, size_label};
use super::{
    pageable_large_shapes, pool_bytes, time_ns, Bench, PINNED_LARGE_OPS, PINNED_LARGE_SHAPES,
};
use crate::gpu::GpuBackend;
use crate::job::OpKind;

/// GPU costs of `op`, or `None` where the GPU backend does not run it: end
/// to end from pageable and from page-locked host memory, and on
/// device-resident data.
pub(super) fn calibrate_gpu(
    op: OpKind,
    bench: &dyn Bench,
    shapes: &[(usize, usize)],
    g: &GpuBackend,
    min_time: Duration,
) -> Result<Option<GpuCost>, String> {
    let mut pageable: Vec<StageSample> = Vec::new();
    let mut pinned: Vec<StageSample> = Vec::new();
    let mut packed: Vec<StageSample> = Vec::new();
    for &(size, n) in shapes {
        let sample = |ns| ((size * n) as u64, n, size as u64, ns);
        match time_ns(g, op, bench, size, n, min_time) {
            Ok(ns) => pageable.push(sample(ns)),
            Err(e) if e.contains("does not implement") => return Ok(None),
            Err(e) => return Err(e),
        }
        let ns = time_pinned_ns(g, op, bench, size, n, min_time)?;
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
    let (kernel, kernel_thread) = if op != OpKind::RsaPrivate {
        let mut samples = Vec::new();
        for &(size, n) in shapes {
            let t = bench.time_resident(g, op, size, n, min_time)?;
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
        // Measured after every op (`calibrate_pinned_large`,
        // `calibrate_pageable_large`).
        pinned_large: None,
        pageable_large: None,
    }))
}

/// As [`time_ns`], with the segments in page-locked host memory.
fn time_pinned_ns(
    g: &GpuBackend,
    op: OpKind,
    bench: &dyn Bench,
    size: usize,
    n: usize,
    min_time: Duration,
) -> Result<f64, String> {
    let mut buf = g.alloc_pinned(size * n).map_err(|e| e.to_string())?;
    buf.copy_from_slice(&pool_bytes(0, size * n));
    let mut views: Vec<&mut [u8]> = buf.chunks_mut(size.max(1)).take(n).collect();
    Ok(bench.time(g, op, &mut views, min_time)?.as_nanos() as f64)
}

/// The large page-locked line (`GpuCost::pinned_large`) of each of
/// [`PINNED_LARGE_OPS`] that the GPU runs: the two
/// [`PINNED_LARGE_SHAPES`] timed by [`Bench::time`] (a warm-up, then
/// the median of >= 3 runs) and the line through them. One pinned buffer,
/// allocated and filled once outside the timings, serves every op: pinning
/// 1 GiB costs more than the runs (~1 s in all at ~40 GB/s).
pub(super) fn calibrate_pinned_large(
    g: &GpuBackend,
    bench: &dyn Bench,
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
        gpu.pinned_large = ramp_line(
            g,
            bench,
            op,
            &PINNED_LARGE_SHAPES,
            &mut buf,
            "pinned",
            min_time,
        )?;
    }
    bench.say(&format!(
        "  large pinned jobs: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The large pageable line (`GpuCost::pageable_large`) of every op the
/// GPU runs but RSA (whose jobs are tiny in bytes): its two
/// [`pageable_large_shapes`] timed by [`Bench::time`] and the line through
/// them. One pageable buffer serves every op.
pub(super) fn calibrate_pageable_large(
    g: &GpuBackend,
    bench: &dyn Bench,
    model: &mut CostModel,
    min_time: Duration,
) -> Result<(), String> {
    let started = Instant::now();
    let len = OpKind::ALL
        .iter()
        .flat_map(|&op| pageable_large_shapes(op))
        .map(|(size, n)| size * n)
        .max()
        .unwrap_or(0);
    let mut buf = pool_bytes(0, len);
    for op in OpKind::ALL {
        if op == OpKind::RsaPrivate {
            continue;
        }
        let Some(gpu) = model.ops.get_mut(op.name()).and_then(|m| m.gpu.as_mut()) else {
            continue;
        };
        let shapes = pageable_large_shapes(op);
        gpu.pageable_large = ramp_line(g, bench, op, &shapes, &mut buf, "pageable", min_time)?;
    }
    bench.say(&format!(
        "  large pageable jobs: {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// The line through `op`'s times on `shapes` (segment size, segments), the
/// segments cut from the front of `buf`; said with the rates measured.
fn ramp_line(
    g: &GpuBackend,
    bench: &dyn Bench,
    op: OpKind,
    shapes: &[(usize, usize)],
    buf: &mut [u8],
    memory: &str,
    min_time: Duration,
) -> Result<Option<LinearCost>, String> {
    let mut samples = Vec::with_capacity(shapes.len());
    let mut shown = Vec::with_capacity(shapes.len());
    for &(size, n) in shapes {
        let mut views: Vec<&mut [u8]> = buf[..size * n].chunks_mut(size).collect();
        let ns = bench.time(g, op, &mut views, min_time)?.as_nanos() as f64;
        samples.push(((size * n) as u64, ns));
        shown.push(format!(
            "{n} x {} {:.1} GB/s",
            size_label(size),
            (size * n) as f64 / ns
        ));
    }
    let line = fit_ramp(&samples);
    bench.say(&format!(
        "  {op}: {memory} {}: {}",
        shown.join(", "),
        line.map_or("no line".into(), describe_ramp)
    ));
    Ok(line)
}

/// Pinned host-to-device copies at a few sizes: fixed cost and rate.
pub(super) fn calibrate_link(g: &GpuBackend) -> Result<Option<LinkCost>, String> {
    let Some(dev) = g.devices().first() else {
        return Ok(None);
    };
    let sizes = [64 << 10, 1 << 20, 16 << 20, 64 << 20];
    let figures = crate::gpu::link::measure(dev, &sizes, 5)?;
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
