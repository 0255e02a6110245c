//! CTR-mode jobs (AES-256, TEA, Blowfish) on one device: host segments are
//! cut into pieces of at most a slot, packed into batches that grow from
//! 4 MiB to a slot and shrink again at the job's end, and pipelined over
//! the staging slots; device-resident segments are transformed where they lie.

use std::ffi::c_void;

pub(crate) use super::abi::CipherSeg;
use super::host_copy::copy_parallel;
use super::launch::{AesCtrArgs, BlowfishCtrArgs, GcmCtrArgs, Kernel, Shape, TeaCtrArgs, TEA_CTR};
use super::runtime::{sync, upload, DevError, Device, Slot, DESC_BYTES, SLOT_BYTES};
use super::stage::as_bytes;

/// Which CTR kernel runs, with its key arguments (device pointers).
#[derive(Clone, Copy, Debug)]
pub(crate) enum CtrKeys {
    /// `rk`: the AES-256 key schedule; `gcm`: GCM's CTR kernel with the
    /// same tables and launch shape.
    Aes {
        kernel: Kernel<AesCtrArgs>,
        gcm: Kernel<GcmCtrArgs>,
        rk: u64,
    },
    Tea {
        key: u64,
    },
    Blowfish {
        kernel: Kernel<BlowfishCtrArgs>,
        pbox: u64,
        sbox: u64,
    },
}

/// A CTR kernel with its keys and launch shape (kernels/README.md).
pub(crate) struct CtrKernel {
    pub keys: CtrKeys,
    pub block: u32,
    pub shared: u32,
    pub units_per_thread: u64,
    /// Resident blocks per SM the recipe sizes the grid for.
    pub blocks_per_sm: u32,
}

impl CtrKernel {
    pub(crate) fn name(&self) -> &'static str {
        match self.keys {
            CtrKeys::Aes { kernel, .. } => kernel.name,
            CtrKeys::Tea { .. } => TEA_CTR.name,
            CtrKeys::Blowfish { kernel, .. } => kernel.name,
        }
    }
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

/// The first batch of a job holds at most this much, each next one twice as
/// much up to a slot, and near the end each holds half of what is left (but
/// not less than this). Nothing overlaps a job's first copy-in and its last
/// copy-out: with whole 64 MiB slots they cost 2 x 1.2 ms, a tenth of a
/// 1 GiB job on a 55 GB/s link; with this ramp, 2 x 0.08 ms.
const RAMP_BYTES: usize = 4 << 20;

/// Capacity of batch `k` when `remaining` job bytes are not yet placed.
fn batch_cap(k: usize, remaining: usize) -> usize {
    let up = RAMP_BYTES << k.min(8);
    let down = (remaining / 2).next_multiple_of(1 << 20).max(RAMP_BYTES);
    up.min(down).min(SLOT_BYTES)
}

/// A piece of a segment in a batch.
pub(crate) struct Placed {
    pub piece: Piece,
    /// Offset in the slot (16-byte aligned).
    pub off: usize,
    /// Index of its segment in `pack`'s input.
    pub seg: usize,
    /// Offset of the piece in its segment.
    pub at: usize,
}

/// One slot's worth of pieces, packed at 16-byte-aligned offsets.
pub(crate) struct Batch {
    pub pieces: Vec<Placed>,
    pub descs: Vec<CipherSeg>,
    /// Bytes of the slot in use (end of the last piece).
    pub used: usize,
    /// What this batch may hold (`batch_cap`).
    pub cap: usize,
    pub units: u64,
}

/// Cuts whole segments (`Piece`s with the counter block of their first
/// unit) into pieces and packs them, in order, into batches of growing,
/// then shrinking capacity. A segment that does not fit in what is left
/// of a batch starts the next one, and a piece that does not end its
/// segment fills its batch to capacity; so, batches laid end to end at
/// `Batch::area` strides, every segment's bytes are contiguous (GCM's
/// GHASH pass reads them so), and a batch whose first piece is at 0 of
/// its segment is a clean cut.
pub(crate) fn pack(segments: &[Piece], unit: usize) -> Vec<Batch> {
    let mut remaining: usize = segments.iter().map(|s| s.len).sum();
    let mut out: Vec<Batch> = Vec::new();
    let mut cur = Batch::empty(batch_cap(0, remaining));
    for (seg, s) in segments.iter().enumerate() {
        let mut at = 0usize;
        while at < s.len {
            let rest = s.len - at;
            let mut off = cur.used.next_multiple_of(16);
            if !cur.pieces.is_empty() && (off + rest > cur.cap || cur.descs.len() == MAX_DESCS) {
                let next = Batch::empty(batch_cap(out.len() + 1, remaining));
                out.push(std::mem::replace(&mut cur, next));
                off = 0;
            }
            let len = rest.min(cur.cap - off);
            // SAFETY: at + len <= s.len.
            let ptr = unsafe { s.ptr.add(at) };
            let iv = advance(s.iv, unit, (at / unit) as u64);
            cur.descs.push(CipherSeg {
                offset: off as u64,
                len: len as u64,
                first_unit: cur.units,
                iv,
            });
            cur.units += len.div_ceil(unit) as u64;
            cur.used = off + len;
            cur.pieces.push(Placed {
                piece: Piece { ptr, len, iv },
                off,
                seg,
                at,
            });
            at += len;
            remaining -= len;
        }
    }
    if !cur.pieces.is_empty() {
        out.push(cur);
    }
    out
}

impl Batch {
    fn empty(cap: usize) -> Batch {
        Batch {
            pieces: Vec::new(),
            descs: Vec::new(),
            used: 0,
            cap,
            units: 0,
        }
    }

    /// Device bytes the batch takes when batches are laid end to end.
    pub(crate) fn area(&self) -> usize {
        self.used.next_multiple_of(16)
    }

    /// Whether the batch begins a segment (a cut before it splits none).
    pub(crate) fn starts_clean(&self) -> bool {
        self.pieces.first().is_some_and(|p| p.at == 0)
    }
}

/// Pieces at least this long in page-locked user memory are copied by DMA
/// straight from and to the user's buffer, skipping the staging memcpy.
const DIRECT_MIN: usize = 256 << 10;

/// Where each batch's ciphertext must also be left on the device (GCM keeps
/// a job's ciphertext there for GHASH): batch `k` at `at[k]`, an area of
/// `Batch::area` bytes. Copy-in goes straight there instead of the slot's device
/// buffer. Seal (`before_kernel == false`) runs the kernel in place there
/// and copies out from there; open reads the ciphertext there and writes
/// the plaintext into the slot's device buffer (out of place), which is
/// copied out. No device-to-device copy.
#[derive(Clone)]
pub(crate) struct Mirror {
    pub at: Vec<u64>,
    pub before_kernel: bool,
}

/// Runs the CTR kernel over host segments, pipelined over the device's
/// staging slots.
pub(crate) fn run_host(
    dev: &Device,
    kernel: &CtrKernel,
    unit: usize,
    segments: &[Piece],
) -> Result<(), DevError> {
    run_batches(dev, kernel, pack(segments, unit), None, None)
}

/// Called after batch `k` is enqueued, with every slot (GCM starts a
/// round's GHASH on the auxiliary stream once its last batch is queued).
pub(crate) type AfterBatch<'a> = &'a mut dyn FnMut(usize, &[Slot]) -> Result<(), DevError>;

/// The pipeline: while slot k's copy-in, kernel and copy-out run on its
/// stream, the CPU unpacks and packs the other slot.
pub(crate) fn run_batches(
    dev: &Device,
    kernel: &CtrKernel,
    batches: Vec<Batch>,
    mirror: Option<Mirror>,
    mut after: Option<AfterBatch<'_>>,
) -> Result<(), DevError> {
    dev.bind()?;
    let slots = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?;
    let direct = |p: &Piece| p.len >= DIRECT_MIN && super::runtime::is_page_locked(p.ptr, p.len);
    let mut inflight: Vec<Option<(Batch, Vec<bool>)>> = (0..slots.len()).map(|_| None).collect();
    for (k, batch) in batches.into_iter().enumerate() {
        let s = k % slots.len();
        let slot = &slots[s];
        if let Some((done, is_direct)) = inflight[s].take() {
            sync(slot.stream)?;
            copy_out(slot, &done, &is_direct);
        }
        let is_direct: Vec<bool> = batch.pieces.iter().map(|pl| direct(&pl.piece)).collect();
        // SAFETY: offsets + lengths stay within SLOT_BYTES (pack).
        let copies: Vec<_> = batch
            .pieces
            .iter()
            .zip(&is_direct)
            .filter(|(_, &d)| !d)
            .map(|(pl, _)| {
                (
                    unsafe { slot.host.add(pl.off) },
                    pl.piece.ptr as *const u8,
                    pl.piece.len,
                )
            })
            .collect();
        copy_parallel(&copies);
        // SAFETY: descs fit in DESC_BYTES (MAX_DESCS); CipherSeg is plain data.
        unsafe {
            std::ptr::copy_nonoverlapping(
                batch.descs.as_ptr() as *const u8,
                slot.host_desc,
                std::mem::size_of_val(batch.descs.as_slice()),
            );
        }
        let mirror_at = mirror.as_ref().map(|m| (m.at[k], m.before_kernel));
        enqueue(dev, slot, kernel, &batch, &is_direct, mirror_at)?;
        if let Some(f) = after.as_mut() {
            f(k, &slots)?;
        }
        inflight[s] = Some((batch, is_direct));
    }
    for (s, f) in inflight.into_iter().enumerate() {
        if let Some((done, is_direct)) = f {
            sync(slots[s].stream)?;
            copy_out(&slots[s], &done, &is_direct);
        }
    }
    Ok(())
}

fn copy_out(slot: &Slot, done: &Batch, is_direct: &[bool]) {
    // SAFETY: the slot's stream is synchronised, so its host buffer holds
    // the results; each piece's user memory is still borrowed by the job.
    let copies: Vec<_> = done
        .pieces
        .iter()
        .zip(is_direct)
        .filter(|(_, &d)| !d)
        .map(|(pl, _)| {
            (
                pl.piece.ptr,
                unsafe { slot.host.add(pl.off) } as *const u8,
                pl.piece.len,
            )
        })
        .collect();
    copy_parallel(&copies);
}

/// Byte ranges of the slot holding runs of staged (not direct) pieces.
fn staged_ranges(batch: &Batch, is_direct: &[bool]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut prev_staged = false;
    for (pl, &d) in batch.pieces.iter().zip(is_direct) {
        if d {
            prev_staged = false;
            continue;
        }
        let end = pl.off + pl.piece.len;
        match out.last_mut() {
            Some(r) if prev_staged => r.1 = end,
            _ => out.push((pl.off, end)),
        }
        prev_staged = true;
    }
    out
}

/// Copy-in, kernel, copy-out of one packed slot, all on the slot's stream.
fn enqueue(
    dev: &Device,
    slot: &Slot,
    kernel: &CtrKernel,
    batch: &Batch,
    is_direct: &[bool],
    mirror: Option<(u64, bool)>,
) -> Result<(), DevError> {
    use super::runtime::err;
    use cudarc::driver::sys;
    let descs = &batch.descs;
    let desc_bytes = std::mem::size_of_val(descs.as_slice());
    // Device buffer the bytes are copied into, and the one copied out of.
    let (input, output) = match mirror {
        Some((area, true)) => (area, slot.dev),
        Some((area, false)) => (area, area),
        None => (slot.dev, slot.dev),
    };
    // SAFETY: host/dev slot buffers hold SLOT_BYTES + DESC_BYTES, a mirror
    // area holds the batch's area (gcm.rs); used <= SLOT_BYTES and desc_bytes <=
    // DESC_BYTES; direct pieces are page-locked user memory of p.len bytes
    // borrowed for the whole job; the stream orders the copies before and
    // after the kernel.
    unsafe {
        let staged = staged_ranges(batch, is_direct);
        for &(from, to) in &staged {
            sys::cuMemcpyHtoDAsync_v2(
                input + from as u64,
                slot.host.add(from) as *const c_void,
                to - from,
                slot.stream,
            )
            .result()
            .map_err(|e| err("copy-in", e))?;
        }
        for (pl, &d) in batch.pieces.iter().zip(is_direct) {
            if d {
                sys::cuMemcpyHtoDAsync_v2(
                    input + pl.off as u64,
                    pl.piece.ptr as *const c_void,
                    pl.piece.len,
                    slot.stream,
                )
                .result()
                .map_err(|e| err("copy-in", e))?;
            }
        }
        sys::cuMemcpyHtoDAsync_v2(
            slot.dev_desc,
            slot.host_desc as *const c_void,
            desc_bytes,
            slot.stream,
        )
        .result()
        .map_err(|e| err("descriptor copy-in", e))?;
        launch_ctr(
            dev,
            kernel,
            input,
            output,
            slot.dev_desc,
            descs.len() as u32,
            batch.units,
            slot.stream,
        )?;
        for (pl, &d) in batch.pieces.iter().zip(is_direct) {
            if d {
                sys::cuMemcpyDtoHAsync_v2(
                    pl.piece.ptr as *mut c_void,
                    output + pl.off as u64,
                    pl.piece.len,
                    slot.stream,
                )
                .result()
                .map_err(|e| err("copy-out", e))?;
            }
        }
        for &(from, to) in &staged {
            sys::cuMemcpyDtoHAsync_v2(
                slot.host.add(from) as *mut c_void,
                output + from as u64,
                to - from,
                slot.stream,
            )
            .result()
            .map_err(|e| err("copy-out", e))?;
        }
    }
    Ok(())
}

/// Queues the CTR kernel over `nsegs` descriptors at `segs` covering
/// `units` units of `data`, on `stream`.
///
/// # Safety
/// `kernel.keys`, `data`, `out` and `segs` must be device pointers valid for
/// the kernel. `out != data` (results written at the same offsets from
/// `out`) only for the AES kernels, which take that offset.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn launch_ctr(
    dev: &Device,
    kernel: &CtrKernel,
    data: u64,
    out: u64,
    segs: u64,
    nsegs: u32,
    units: u64,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    if units == 0 {
        return Ok(());
    }
    let in_place_only = !matches!(kernel.keys, CtrKeys::Aes { .. });
    if out != data && in_place_only {
        return Err(format!("{} only runs in place", kernel.name()));
    }
    let threads = units.div_ceil(kernel.units_per_thread);
    let shape = Shape {
        grid: threads
            .div_ceil(kernel.block as u64)
            .clamp(1, (kernel.blocks_per_sm * dev.multiprocessors) as u64) as u32,
        block: kernel.block,
        shared: kernel.shared,
    };
    match kernel.keys {
        CtrKeys::Aes { kernel, rk, .. } => {
            let args = AesCtrArgs {
                rk: rk.into(),
                data: data.into(),
                segs: segs.into(),
                nsegs,
                total_units: units,
                out_delta: out.wrapping_sub(data) as i64,
            };
            dev.launch(kernel, shape, stream, args)
        }
        CtrKeys::Tea { key } => {
            let args = TeaCtrArgs {
                key: key.into(),
                data: data.into(),
                segs: segs.into(),
                nsegs,
                total_units: units,
            };
            dev.launch(TEA_CTR, shape, stream, args)
        }
        CtrKeys::Blowfish { kernel, pbox, sbox } => {
            let args = BlowfishCtrArgs {
                pbox: pbox.into(),
                sbox: sbox.into(),
                data: data.into(),
                segs: segs.into(),
                nsegs,
                total_units: units,
            };
            dev.launch(kernel, shape, stream, args)
        }
    }
}

/// Device-resident segments: descriptors carry absolute addresses and the
/// kernel's data base is 0, so no byte crosses the link.
pub(crate) fn run_device(
    dev: &Device,
    kernel: &CtrKernel,
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
    upload(buf.ptr, as_bytes(&descs))?;
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
            0,
            0,
            buf.ptr,
            descs.len() as u32,
            units,
            stream,
        )?
    };
    sync(stream)
}

#[cfg(test)]
mod tests {
    use super::{advance, batch_cap, pack, Piece, RAMP_BYTES, SLOT_BYTES};

    fn segments(bufs: &mut [Vec<u8>]) -> Vec<Piece> {
        bufs.iter_mut()
            .enumerate()
            .map(|(i, b)| Piece {
                ptr: b.as_mut_ptr(),
                len: b.len(),
                iv: [i as u8; 16],
            })
            .collect()
    }

    #[test]
    fn batches_ramp_up_then_down() {
        let mut bufs = vec![vec![0u8; 1 << 30]];
        let batches = pack(&segments(&mut bufs), 16);
        let used: Vec<usize> = batches.iter().map(|b| b.used >> 20).collect();
        assert_eq!(&used[..5], &[4, 8, 16, 32, 64]);
        assert_eq!(used.iter().sum::<usize>(), 1024);
        assert!(used.iter().all(|&u| u << 20 <= SLOT_BYTES));
        assert_eq!(*used.last().unwrap() << 20, RAMP_BYTES);
        // Past the ramp and before the end, batches are whole slots.
        assert_eq!(batch_cap(9, 1 << 30), SLOT_BYTES);
        assert_eq!(batch_cap(9, 20 << 20), 10 << 20);
        assert_eq!(batch_cap(0, 100), RAMP_BYTES);
    }

    #[test]
    fn segments_stay_contiguous_across_batches() {
        // Mixed sizes: tiny, odd, larger than a slot, 0-byte.
        let sizes = [1usize, 17, 5 << 20, 3, (70 << 20) + 5, 0, 1 << 20, 4095];
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
        let segs = segments(&mut bufs);
        let batches = pack(&segs, 16);
        // Lay batches end to end; every segment must be one run there.
        let mut base = 0usize;
        let mut seen: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); sizes.len()];
        for b in &batches {
            assert!(b.used <= b.cap && b.cap <= SLOT_BYTES);
            let mut units = 0u64;
            for (pl, d) in b.pieces.iter().zip(&b.descs) {
                assert_eq!(pl.off % 16, 0);
                assert_eq!(d.offset as usize, pl.off);
                assert_eq!(d.first_unit, units);
                assert_eq!(d.iv, advance(segs[pl.seg].iv, 16, (pl.at / 16) as u64));
                units += pl.piece.len.div_ceil(16) as u64;
                seen[pl.seg].push((pl.at, base + pl.off, pl.piece.len));
            }
            assert_eq!(b.units, units);
            base += b.area();
        }
        for (s, runs) in seen.iter().enumerate() {
            let total: usize = runs.iter().map(|r| r.2).sum();
            assert_eq!(total, sizes[s], "segment {s} fully covered");
            for w in runs.windows(2) {
                assert_eq!(w[0].0 + w[0].2, w[1].0, "pieces in order");
                assert_eq!(w[0].1 + w[0].2, w[1].1, "segment {s} contiguous");
            }
        }
        // A batch that continues a segment is not a clean cut.
        for b in &batches {
            assert_eq!(b.starts_clean(), b.pieces[0].at == 0);
        }
    }
}
