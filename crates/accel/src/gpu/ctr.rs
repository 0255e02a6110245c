//! CTR-mode jobs (AES-256, TEA, Blowfish) on one device: host segments are
//! cut into pieces of at most a slot, packed into the two staging slots and
//! pipelined; device-resident segments are transformed where they lie.

use std::ffi::c_void;

use rayon::prelude::*;

use super::runtime::{sync, upload, DevError, Device, Slot, DESC_BYTES, SLOT_BYTES};

/// The kernels' segment descriptor (kernels/README.md, `CipherSeg`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CipherSeg {
    pub offset: u64,
    pub len: u64,
    pub first_unit: u64,
    pub iv: [u8; 16],
}

const MAX_DESCS: usize = DESC_BYTES / std::mem::size_of::<CipherSeg>();

/// A run of host bytes to transform, with the counter block of its first unit.
pub(crate) struct Piece {
    pub ptr: *mut u8,
    pub len: usize,
    pub iv: [u8; 16],
}

// SAFETY: pieces point into distinct `&mut [u8]` segments borrowed by the
// job for the whole call; no two pieces overlap.
unsafe impl Send for Piece {}
unsafe impl Sync for Piece {}

/// Advances a counter block by `units`: 128-bit big-endian for AES, 64-bit
/// (first 8 bytes) for the 64-bit ciphers — the CPU twin's arithmetic.
pub(crate) fn advance(iv: [u8; 16], unit: usize, units: u64) -> [u8; 16] {
    if unit == 16 {
        u128::from_be_bytes(iv)
            .wrapping_add(units as u128)
            .to_be_bytes()
    } else {
        let c = u64::from_be_bytes(iv[..8].try_into().unwrap()).wrapping_add(units);
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&c.to_be_bytes());
        out
    }
}

/// Cuts one segment into pieces of at most a slot, each with its own counter.
pub(crate) fn pieces_of(data: &mut [u8], iv: [u8; 16], unit: usize, out: &mut Vec<Piece>) {
    let mut at = 0usize;
    let base = data.as_mut_ptr();
    loop {
        let len = (data.len() - at).min(SLOT_BYTES);
        // SAFETY: at + len <= data.len().
        out.push(Piece {
            ptr: unsafe { base.add(at) },
            len,
            iv: advance(iv, unit, (at / unit) as u64),
        });
        at += len;
        if at >= data.len() {
            break;
        }
    }
}

/// Parallel copy between user memory and a pinned slot (the staging copy
/// is the CPU's share of the pipeline; one core cannot feed the link).
fn copy_parallel(jobs: &[(*mut u8, *const u8, usize)]) {
    const CHUNK: usize = 4 << 20;
    struct Raw(*mut u8, *const u8, usize);
    // SAFETY (Send/Sync): each (dst, src, len) names disjoint live memory.
    unsafe impl Send for Raw {}
    unsafe impl Sync for Raw {}
    let parts: Vec<Raw> = jobs
        .iter()
        .flat_map(|&(d, s, n)| {
            (0..n).step_by(CHUNK).map(move |o| {
                // SAFETY: o < n.
                unsafe { Raw(d.add(o), s.add(o), CHUNK.min(n - o)) }
            })
        })
        .collect();
    parts.par_iter().for_each(|r| {
        // SAFETY: dst and src are valid for len bytes and do not overlap
        // (one is user memory, the other a pinned slot).
        unsafe { std::ptr::copy_nonoverlapping(r.1, r.0, r.2) }
    });
}

struct InFlight {
    pieces: Vec<(Piece, usize)>,
}

/// Runs `kernel(key, data, segs, nsegs, total_units)` over host pieces,
/// pipelined over the device's two slots.
pub(crate) fn run_host(
    dev: &Device,
    kernel: &str,
    key: u64,
    unit: usize,
    pieces: Vec<Piece>,
) -> Result<(), DevError> {
    dev.bind()?;
    let slots = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?;
    let mut inflight: Vec<Option<InFlight>> = vec![None, None];
    let mut queue = pieces.into_iter().peekable();
    let mut k = 0usize;
    while queue.peek().is_some() {
        let s = k % 2;
        let slot = &slots[s];
        if let Some(done) = inflight[s].take() {
            sync(slot.stream)?;
            copy_out(slot, &done);
        }
        let mut batch = Vec::new();
        let mut descs = Vec::new();
        let (mut used, mut units) = (0usize, 0u64);
        while let Some(p) = queue.peek() {
            let off = used.next_multiple_of(16);
            if (!batch.is_empty() && off + p.len > SLOT_BYTES) || descs.len() == MAX_DESCS {
                break;
            }
            let p = queue.next().expect("peeked");
            descs.push(CipherSeg {
                offset: off as u64,
                len: p.len as u64,
                first_unit: units,
                iv: p.iv,
            });
            units += p.len.div_ceil(unit) as u64;
            used = off + p.len;
            batch.push((p, off));
        }
        // SAFETY: offsets + lengths stay within SLOT_BYTES (checked above).
        let copies: Vec<_> = batch
            .iter()
            .map(|(p, off)| (unsafe { slot.host.add(*off) }, p.ptr as *const u8, p.len))
            .collect();
        copy_parallel(&copies);
        // SAFETY: descs fit in DESC_BYTES (MAX_DESCS); CipherSeg is plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                descs.as_ptr() as *const u8,
                slot.host_desc,
                descs.len() * std::mem::size_of::<CipherSeg>(),
            );
        }
        enqueue(dev, slot, kernel, key, used, &descs, units)?;
        inflight[s] = Some(InFlight { pieces: batch });
        k += 1;
    }
    for (s, f) in inflight.into_iter().enumerate() {
        if let Some(done) = f {
            sync(slots[s].stream)?;
            copy_out(&slots[s], &done);
        }
    }
    Ok(())
}

fn copy_out(slot: &Slot, done: &InFlight) {
    // SAFETY: the slot's stream is synchronised, so its host buffer holds
    // the results; each piece's user memory is still borrowed by the job.
    let copies: Vec<_> = done
        .pieces
        .iter()
        .map(|(p, off)| (p.ptr, unsafe { slot.host.add(*off) } as *const u8, p.len))
        .collect();
    copy_parallel(&copies);
}

/// Copy-in, kernel, copy-out of one packed slot, all on the slot's stream.
fn enqueue(
    dev: &Device,
    slot: &Slot,
    kernel: &str,
    key: u64,
    used: usize,
    descs: &[CipherSeg],
    units: u64,
) -> Result<(), DevError> {
    use cudarc::driver::sys;
    let desc_bytes = std::mem::size_of_val(descs);
    // SAFETY: host/dev slot buffers hold SLOT_BYTES + DESC_BYTES; used <=
    // SLOT_BYTES and desc_bytes <= DESC_BYTES; the stream orders the copies
    // before and after the kernel.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(slot.dev, slot.host as *const c_void, used, slot.stream)
            .result()
            .map_err(|e| super::runtime::err("copy-in", e))?;
        sys::cuMemcpyHtoDAsync_v2(
            slot.dev_desc,
            slot.host_desc as *const c_void,
            desc_bytes,
            slot.stream,
        )
        .result()
        .map_err(|e| super::runtime::err("descriptor copy-in", e))?;
        launch_ctr(
            dev,
            kernel,
            key,
            slot.dev,
            slot.dev_desc,
            descs.len() as u32,
            units,
            slot.stream,
        )?;
        sys::cuMemcpyDtoHAsync_v2(slot.host as *mut c_void, slot.dev, used, slot.stream)
            .result()
            .map_err(|e| super::runtime::err("copy-out", e))?;
    }
    Ok(())
}

pub(crate) const CTR_BLOCK: u32 = 256;
/// Units per thread the kernels are tuned for (kernels/README.md).
pub(crate) const UNITS_PER_THREAD: u64 = 2;

/// # Safety
/// `key`, `data` and `segs` must be device pointers valid for the kernel.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_ctr(
    dev: &Device,
    kernel: &str,
    key: u64,
    data: u64,
    segs: u64,
    nsegs: u32,
    units: u64,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    if units == 0 {
        return Ok(());
    }
    let (mut key, mut data, mut segs, mut nsegs, mut units_v) = (key, data, segs, nsegs, units);
    let mut params = [
        &mut key as *mut u64 as *mut c_void,
        &mut data as *mut u64 as *mut c_void,
        &mut segs as *mut u64 as *mut c_void,
        &mut nsegs as *mut u32 as *mut c_void,
        &mut units_v as *mut u64 as *mut c_void,
    ];
    let grid = dev.grid_for(units.div_ceil(UNITS_PER_THREAD), CTR_BLOCK);
    dev.launch(kernel, grid, CTR_BLOCK, 0, stream, &mut params)
}

/// Device-resident segments: descriptors carry absolute addresses and the
/// kernel's data base is 0, so no byte crosses the link.
pub(crate) fn run_device(
    dev: &Device,
    kernel: &str,
    key: u64,
    unit: usize,
    segs: &[(u64, usize, [u8; 16])],
) -> Result<(), DevError> {
    dev.bind()?;
    let mut descs = Vec::with_capacity(segs.len());
    let mut units = 0u64;
    for &(ptr, len, iv) in segs {
        descs.push(CipherSeg {
            offset: ptr,
            len: len as u64,
            first_unit: units,
            iv,
        });
        units += len.div_ceil(unit) as u64;
    }
    let buf = dev.alloc(std::mem::size_of_val(descs.as_slice()))?;
    // SAFETY: CipherSeg is repr(C) plain data.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            descs.as_ptr() as *const u8,
            std::mem::size_of_val(descs.as_slice()),
        )
    };
    upload(buf.ptr, bytes)?;
    let slots = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?;
    let stream = slots[0].stream;
    // SAFETY: descriptors name caller-guaranteed device memory (DeviceSlice::new).
    unsafe {
        launch_ctr(
            dev,
            kernel,
            key,
            0,
            buf.ptr,
            descs.len() as u32,
            units,
            stream,
        )?
    };
    sync(stream)
}
