//! Host-link throughput (seed 000 §4.2): pinned and pageable, both
//! directions, timed with device events around the copy.

use std::ffi::c_void;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::runtime::err;
use super::Device;

pub struct LinkFigure {
    pub bytes: usize,
    pub pinned: bool,
    pub to_device: bool,
    pub gbps: f64,
}

/// Median over `reps` copies of each size, after one warm-up copy.
pub fn measure(dev: &Device, sizes: &[usize], reps: usize) -> Result<Vec<LinkFigure>, String> {
    dev.bind()?;
    let max = sizes.iter().copied().max().unwrap_or(0).max(1);
    let mut out = Vec::new();
    // SAFETY: buffers are allocated for `max` bytes and freed below; every
    // copy stays within them; the stream is synchronised before timing reads.
    unsafe {
        let pinned = cu::malloc_host(max, 0).map_err(|e| err("pinned alloc", e))? as *mut u8;
        std::ptr::write_bytes(pinned, 1, max);
        let mut pageable = vec![1u8; max];
        let dptr = cu::malloc_sync(max).map_err(|e| err("device alloc", e))?;
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| err("stream", e))?;
        let start =
            cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| err("event", e))?;
        let stop =
            cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| err("event", e))?;
        for &n in sizes {
            for pinned_mem in [true, false] {
                for to_device in [true, false] {
                    let host = if pinned_mem {
                        pinned
                    } else {
                        pageable.as_mut_ptr()
                    };
                    let mut times = Vec::new();
                    for rep in 0..=reps {
                        cu::event::record(start, stream).map_err(|e| err("record", e))?;
                        let r = if to_device {
                            sys::cuMemcpyHtoDAsync_v2(dptr, host as *const c_void, n, stream)
                        } else {
                            sys::cuMemcpyDtoHAsync_v2(host as *mut c_void, dptr, n, stream)
                        };
                        r.result().map_err(|e| err("copy", e))?;
                        cu::event::record(stop, stream).map_err(|e| err("record", e))?;
                        cu::stream::synchronize(stream).map_err(|e| err("sync", e))?;
                        let ms = cu::event::elapsed(start, stop).map_err(|e| err("elapsed", e))?;
                        if rep > 0 {
                            times.push(ms as f64);
                        }
                    }
                    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
                    let ms = times[times.len() / 2].max(1e-6);
                    out.push(LinkFigure {
                        bytes: n,
                        pinned: pinned_mem,
                        to_device,
                        gbps: n as f64 / (ms / 1e3) / 1e9,
                    });
                }
            }
        }
        let _ = cu::event::destroy(start);
        let _ = cu::event::destroy(stop);
        let _ = cu::stream::destroy(stream);
        let _ = cu::free_sync(dptr);
        let _ = cu::free_host(pinned as *mut c_void);
    }
    Ok(out)
}

/// Per-direction GB/s while `n` bytes go host→device and another `n` come
/// back device→host at the same time (pinned, two streams): the bound for
/// any job that streams data through the GPU and back.
pub fn measure_bidirectional(dev: &Device, n: usize, reps: usize) -> Result<f64, String> {
    dev.bind()?;
    let n = n.max(1);
    let mut times = Vec::new();
    // SAFETY: every buffer is allocated for n bytes and freed below; copies
    // stay within them; both streams are synchronised before timing reads.
    unsafe {
        let up = cu::malloc_host(n, 0).map_err(|e| err("pinned alloc", e))? as *mut u8;
        let down = cu::malloc_host(n, 0).map_err(|e| err("pinned alloc", e))? as *mut u8;
        std::ptr::write_bytes(up, 1, n);
        let d_in = cu::malloc_sync(n).map_err(|e| err("device alloc", e))?;
        let d_out = cu::malloc_sync(n).map_err(|e| err("device alloc", e))?;
        let a = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| err("stream", e))?;
        let b = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| err("stream", e))?;
        let ev = |_: ()| {
            cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(|e| err("event", e))
        };
        let (start, stop_a, stop_b) = (ev(())?, ev(())?, ev(())?);
        for rep in 0..=reps {
            cu::event::record(start, a).map_err(|e| err("record", e))?;
            cu::stream::wait_event(b, start, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                .map_err(|e| err("wait", e))?;
            sys::cuMemcpyHtoDAsync_v2(d_in, up as *const c_void, n, a)
                .result()
                .map_err(|e| err("copy", e))?;
            sys::cuMemcpyDtoHAsync_v2(down as *mut c_void, d_out, n, b)
                .result()
                .map_err(|e| err("copy", e))?;
            cu::event::record(stop_a, a).map_err(|e| err("record", e))?;
            cu::event::record(stop_b, b).map_err(|e| err("record", e))?;
            cu::stream::synchronize(a).map_err(|e| err("sync", e))?;
            cu::stream::synchronize(b).map_err(|e| err("sync", e))?;
            let ta = cu::event::elapsed(start, stop_a).map_err(|e| err("elapsed", e))?;
            let tb = cu::event::elapsed(start, stop_b).map_err(|e| err("elapsed", e))?;
            if rep > 0 {
                times.push(ta.max(tb) as f64);
            }
        }
        for e in [start, stop_a, stop_b] {
            let _ = cu::event::destroy(e);
        }
        let _ = cu::stream::destroy(a);
        let _ = cu::stream::destroy(b);
        let _ = cu::free_sync(d_in);
        let _ = cu::free_sync(d_out);
        let _ = cu::free_host(up as *mut c_void);
        let _ = cu::free_host(down as *mut c_void);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let ms = times[times.len() / 2].max(1e-6);
    Ok(n as f64 / (ms / 1e3) / 1e9)
}
