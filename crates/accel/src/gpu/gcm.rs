//! AES-256-GCM seal/open on one device (kernels/README.md, "AES-256-GCM").
//!
//! Host segments flow through the CTR pipeline of `ctr.rs` (GCM's keystream
//! for block j is AES(nonce ‖ BE32(2 + j)), i.e. 128-bit CTR from
//! nonce ‖ 00000002, since a segment of at most 4 GiB never carries out of
//! the 32-bit counter), and each slot's ciphertext is also copied into a
//! device buffer where one parallel GHASH pass per round of slots computes
//! every tag: only tags come back. Device-resident segments run the four GCM
//! kernels where they lie.

use std::ffi::c_void;

use super::ctr::{self, CtrKernel, Mirror, Piece};
use super::runtime::{download, sync, upload, DevError, Device, SLOT_BYTES};

/// The kernels' segment descriptor (`GcmSeg`, 56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GcmSeg {
    offset: u64,
    len: u64,
    first_unit: u64,
    aad_offset: u64,
    aad_len: u64,
    nonce: [u8; 12],
    reserved: u32,
}

/// Where a segment's bytes are.
pub(crate) enum Loc {
    Host(*mut u8, usize),
    /// A 16-byte-aligned device pointer on this device.
    Device(u64, usize),
}

impl Loc {
    fn len(&self) -> usize {
        match *self {
            Loc::Host(_, n) | Loc::Device(_, n) => n,
        }
    }
}

/// One segment of a seal or open job.
pub(crate) struct GcmItem<'a> {
    pub nonce: [u8; 12],
    pub aad: &'a [u8],
    /// The tag to verify (open) or None (seal).
    pub expected: Option<[u8; 16]>,
    pub data: Loc,
}

/// Per item: the tag (seal), or whether it verified (open: `Ok(None)` /
/// `Err(())`, the plaintext wiped).
pub(crate) type GcmOutcome = Result<Option<[u8; 16]>, ()>;

/// Rounds of at least this many slots share one GHASH pass; a round's
/// device ciphertext buffer holds this many slots (or one whole segment).
const ROUND_SLOTS: usize = 16;

pub(crate) fn run(
    dev: &Device,
    rk: u64,
    ctr_kernel: &CtrKernel<'_>,
    seal: bool,
    items: &[GcmItem<'_>],
) -> Result<Vec<GcmOutcome>, DevError> {
    dev.bind()?;
    let mut out: Vec<GcmOutcome> = vec![Ok(None); items.len()];
    let (resident, host): (Vec<usize>, Vec<usize>) =
        (0..items.len()).partition(|&i| matches!(items[i].data, Loc::Device(..)));
    if !resident.is_empty() {
        let descs: Vec<(usize, u64)> = resident
            .iter()
            .map(|&i| match items[i].data {
                Loc::Device(p, _) => (i, p),
                Loc::Host(..) => unreachable!("partitioned"),
            })
            .collect();
        let tags = gcm_pass(dev, rk, seal, items, &descs, 0, true)?;
        finish(dev, seal, items, &descs, &tags, &mut out)?;
    }
    if !host.is_empty() {
        run_host(dev, rk, ctr_kernel, seal, items, &host, &mut out)?;
    }
    Ok(out)
}

/// Host segments: rounds of pipelined slots, then GHASH per round.
fn run_host(
    dev: &Device,
    rk: u64,
    ctr_kernel: &CtrKernel<'_>,
    seal: bool,
    items: &[GcmItem<'_>],
    host: &[usize],
    out: &mut [GcmOutcome],
) -> Result<(), DevError> {
    // Pieces in item order; remember which item each piece starts.
    let mut pieces: Vec<Piece> = Vec::new();
    let mut starts: Vec<Option<usize>> = Vec::new();
    let mut empty: Vec<usize> = Vec::new();
    for &i in host {
        let Loc::Host(ptr, len) = items[i].data else {
            unreachable!("host items only")
        };
        if len == 0 {
            empty.push(i);
            continue;
        }
        let mut iv = [0u8; 16];
        iv[..12].copy_from_slice(&items[i].nonce);
        iv[15] = 2;
        // SAFETY: the job borrows the segment's `&mut [u8]` for the call.
        let data = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
        let before = pieces.len();
        ctr::pieces_of(data, iv, 16, &mut pieces);
        starts.push(Some(i));
        starts.extend(std::iter::repeat_n(None, pieces.len() - before - 1));
    }
    let batches = ctr::pack(pieces, 16);
    // Where each piece went: (batch, offset), in piece order.
    let placed: Vec<(usize, usize)> = batches
        .iter()
        .enumerate()
        .flat_map(|(k, b)| b.pieces.iter().map(move |(_, off)| (k, *off)))
        .collect();
    // Cut into rounds at batches that begin with a segment's first piece.
    let mut first_piece_of_batch = Vec::with_capacity(batches.len());
    let mut pi = 0;
    for b in &batches {
        first_piece_of_batch.push(pi);
        pi += b.pieces.len();
    }
    let mut rounds: Vec<std::ops::Range<usize>> = Vec::new();
    let mut from = 0;
    for k in 1..batches.len() {
        let clean_cut = starts[first_piece_of_batch[k]].is_some();
        if k - from >= ROUND_SLOTS && clean_cut {
            rounds.push(from..k);
            from = k;
        }
    }
    if from < batches.len() || rounds.is_empty() {
        rounds.push(from..batches.len());
    }
    let round_bytes = |r: &std::ops::Range<usize>| match r.len() {
        0 => 16,
        n => (n - 1) * SLOT_BYTES + batches[r.end - 1].used,
    };
    let cbuf = dev.alloc(rounds.iter().map(round_bytes).max().unwrap_or(16))?;
    let mut batches = batches.into_iter();
    for (ri, r) in rounds.iter().enumerate() {
        // The round's segments: those whose first piece lies in it, with
        // their offset in the round's ciphertext buffer; empty ones ride
        // with the first round.
        let mut descs: Vec<(usize, u64)> = Vec::new();
        if ri == 0 {
            descs.extend(empty.iter().map(|&i| (i, 0u64)));
        }
        let first_piece = first_piece_of_batch.get(r.start).copied().unwrap_or(0);
        let last_piece = first_piece_of_batch
            .get(r.end)
            .copied()
            .unwrap_or(starts.len());
        for p in first_piece..last_piece {
            if let Some(i) = starts[p] {
                let (k, off) = placed[p];
                descs.push((i, ((k - r.start) * SLOT_BYTES + off) as u64));
            }
        }
        let round: Vec<ctr::Batch> = batches.by_ref().take(r.len()).collect();
        let mirror = Mirror {
            base: cbuf.ptr,
            before_kernel: !seal,
        };
        ctr::run_batches(dev, ctr_kernel, round, Some(mirror))?;
        let tags = gcm_pass(dev, rk, seal, items, &descs, cbuf.ptr, false)?;
        finish(dev, seal, items, &descs, &tags, out)?;
    }
    Ok(())
}

/// Records tags (seal) or verifies them and wipes what failed (open).
fn finish(
    dev: &Device,
    seal: bool,
    items: &[GcmItem<'_>],
    descs: &[(usize, u64)],
    tags: &[[u8; 16]],
    out: &mut [GcmOutcome],
) -> Result<(), DevError> {
    for (&(i, _), tag) in descs.iter().zip(tags) {
        if seal {
            out[i] = Ok(Some(*tag));
            continue;
        }
        let expected = items[i].expected.unwrap_or_default();
        if constant_time_eq(tag, &expected) {
            out[i] = Ok(None);
            continue;
        }
        out[i] = Err(());
        match items[i].data {
            // SAFETY: the job borrows this segment's buffer for the call.
            Loc::Host(ptr, len) => unsafe { std::ptr::write_bytes(ptr, 0, len) },
            Loc::Device(ptr, len) => wipe_device(dev, ptr, len)?,
        }
    }
    Ok(())
}

fn constant_time_eq(a: &[u8; 16], b: &[u8; 16]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn wipe_device(dev: &Device, ptr: u64, len: usize) -> Result<(), DevError> {
    dev.bind()?;
    // SAFETY: ptr..ptr+len is caller-guaranteed device memory of this device
    // (DeviceSlice::new's contract).
    unsafe { cudarc::driver::sys::cuMemsetD8_v2(ptr, 0, len).result() }
        .map_err(|e| super::runtime::err("wiping a forged segment", e))
}

/// Runs the GCM kernels over the segments `descs` (item, byte offset from
/// `base`) and returns their computed tags. `with_ctr`: also apply the
/// keystream here (device-resident data; host data got it in the pipeline).
fn gcm_pass(
    dev: &Device,
    rk: u64,
    seal: bool,
    items: &[GcmItem<'_>],
    descs: &[(usize, u64)],
    base: u64,
    with_ctr: bool,
) -> Result<Vec<[u8; 16]>, DevError> {
    if descs.is_empty() {
        return Ok(Vec::new());
    }
    let mut segs = Vec::with_capacity(descs.len());
    let mut aad = Vec::new();
    let (mut units, mut ghash_blocks) = (0u64, 0u64);
    for &(i, off) in descs {
        let it = &items[i];
        let len = it.data.len() as u64;
        segs.push(GcmSeg {
            offset: off,
            len,
            first_unit: units,
            aad_offset: aad.len() as u64,
            aad_len: it.aad.len() as u64,
            nonce: it.nonce,
            reserved: 0,
        });
        aad.extend_from_slice(it.aad);
        units += len.div_ceil(16);
        ghash_blocks += len.div_ceil(16) + (it.aad.len() as u64).div_ceil(16);
    }
    let n = segs.len();
    let seg_bytes = std::mem::size_of_val(segs.as_slice());
    let work_bytes = 16384 + (8 * (n + 1)).next_multiple_of(16) + 16 * n;
    let dsegs = dev.alloc(seg_bytes)?;
    let daad = dev.alloc(aad.len())?;
    let work = dev.alloc(work_bytes)?;
    let dtags = dev.alloc(16 * n)?;
    // SAFETY: GcmSeg is repr(C) plain data.
    upload(dsegs.ptr, unsafe {
        std::slice::from_raw_parts(segs.as_ptr() as *const u8, seg_bytes)
    })?;
    upload(daad.ptr, &aad)?;
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;
    let p = piece_blocks(ghash_blocks);
    let sms = dev.multiprocessors;
    let data = base;
    // SAFETY: every pointer is a live device allocation of the size the
    // kernel contract (kernels/README.md) requires; argument order and
    // types follow the signatures there; all on one stream, in the
    // documented order.
    unsafe {
        let ctr = |dev: &Device| -> Result<(), DevError> {
            if !with_ctr || units == 0 {
                return Ok(());
            }
            let grid = units.div_ceil(2).div_ceil(256).clamp(1, 6 * sms as u64) as u32;
            let mut a = (rk, data, dsegs.ptr, n as u32, units);
            dev.launch(
                "aes256_gcm_ctr_v2",
                grid,
                256,
                0,
                stream,
                &mut [
                    &mut a.0 as *mut u64 as *mut c_void,
                    &mut a.1 as *mut u64 as *mut c_void,
                    &mut a.2 as *mut u64 as *mut c_void,
                    &mut a.3 as *mut u32 as *mut c_void,
                    &mut a.4 as *mut u64 as *mut c_void,
                ],
            )
        };
        if seal {
            ctr(dev)?;
        }
        let mut s = (rk, dsegs.ptr, n as u32, p, work.ptr);
        dev.launch(
            "gcm_setup",
            1,
            1024,
            0,
            stream,
            &mut [
                &mut s.0 as *mut u64 as *mut c_void,
                &mut s.1 as *mut u64 as *mut c_void,
                &mut s.2 as *mut u32 as *mut c_void,
                &mut s.3 as *mut u32 as *mut c_void,
                &mut s.4 as *mut u64 as *mut c_void,
            ],
        )?;
        let pieces = ghash_blocks.div_ceil(p as u64).max(n as u64);
        let grid = pieces.div_ceil(256).clamp(1, 3 * sms as u64) as u32;
        let mut g = (dsegs.ptr, n as u32, data, daad.ptr, p, work.ptr);
        dev.launch(
            "gcm_ghash",
            grid,
            256,
            65536,
            stream,
            &mut [
                &mut g.0 as *mut u64 as *mut c_void,
                &mut g.1 as *mut u32 as *mut c_void,
                &mut g.2 as *mut u64 as *mut c_void,
                &mut g.3 as *mut u64 as *mut c_void,
                &mut g.4 as *mut u32 as *mut c_void,
                &mut g.5 as *mut u64 as *mut c_void,
            ],
        )?;
        let mut f = (rk, dsegs.ptr, n as u32, work.ptr, dtags.ptr);
        dev.launch(
            "gcm_finalize",
            (n as u32).div_ceil(256),
            256,
            0,
            stream,
            &mut [
                &mut f.0 as *mut u64 as *mut c_void,
                &mut f.1 as *mut u64 as *mut c_void,
                &mut f.2 as *mut u32 as *mut c_void,
                &mut f.3 as *mut u64 as *mut c_void,
                &mut f.4 as *mut u64 as *mut c_void,
            ],
        )?;
        if !seal {
            ctr(dev)?;
        }
    }
    sync(stream)?;
    let mut raw = vec![0u8; 16 * n];
    download(&mut raw, dtags.ptr)?;
    Ok(raw
        .chunks_exact(16)
        .map(|c| c.try_into().expect("16-byte chunks"))
        .collect())
}

/// GHASH piece length P (blocks per thread), as kernels/README.md advises:
/// enough pieces to fill the GPU, long enough to hide the power step.
fn piece_blocks(total_blocks: u64) -> u32 {
    let target = (total_blocks / 65536).max(1);
    let pow2 = 1u64 << (63 - target.leading_zeros());
    pow2.clamp(16, 64) as u32
}

#[cfg(test)]
mod tests {
    use super::piece_blocks;

    #[test]
    fn piece_blocks_follows_the_recipe() {
        assert_eq!(piece_blocks(0), 16);
        assert_eq!(piece_blocks(65536 * 20), 16);
        assert_eq!(piece_blocks(65536 * 40), 32);
        assert_eq!(piece_blocks(65536 * 1000), 64);
    }
}
