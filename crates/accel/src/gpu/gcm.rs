//! AES-256-GCM seal/open on one device (kernels/README.md, "AES-256-GCM").
//!
//! Host segments flow through the CTR pipeline of `ctr.rs` (GCM's keystream
//! for block j is AES(nonce ‖ BE32(2 + j)), i.e. 128-bit CTR from
//! nonce ‖ 00000002, since a segment of at most 4 GiB never carries out of
//! the 32-bit counter), and each slot's ciphertext is also copied into a
//! device buffer where one parallel GHASH pass per round of slots computes
//! every tag: only tags come back. Device-resident segments run the four GCM
//! kernels where they lie.

use std::ops::Range;

use cudarc::driver::sys::CUstream;

use super::abi::{GcmSeg, GCM_GHASH_SMEM_BYTES, GCM_W_PIECES};
use super::ctr::{self, CtrKernel, CtrKeys, Mirror, Piece};
use super::launch::{
    GcmCtrArgs, GcmFinalizeArgs, GcmGhashArgs, GcmSetupArgs, Kernel, Shape, GCM_FINALIZE,
    GCM_GHASH, GCM_GHASH_WIDE, GCM_SETUP, GCM_SETUP_WIDE,
};
use super::runtime::{download, sync, upload, DevError, Device, DeviceBuffer, SLOT_BYTES};
use super::stage::as_bytes;

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

/// Rounds of at least this many bytes share one GHASH pass, which runs
/// while the next round streams through the slots.
const ROUND_BYTES: usize = 4 * SLOT_BYTES;
/// Rounds are grouped while they fit in this many bytes of device
/// ciphertext buffer (two such buffers at most).
const GROUP_BYTES: usize = 16 * SLOT_BYTES;

pub(crate) fn run(
    dev: &Device,
    rk: u64,
    ctr_kernel: &CtrKernel,
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
        let pass = Pass::prepare(dev, items, &descs)?;
        let tags = pass.run_sync(dev, rk, ctr_kernel, seal, 0, true)?;
        finish(dev, seal, items, &descs, &tags, &mut out)?;
    }
    if !host.is_empty() {
        run_host(dev, rk, ctr_kernel, seal, items, &host, &mut out)?;
    }
    Ok(out)
}

/// Host segments: one continuous pipeline through the slots; each round of
/// batches, once queued, gets its GHASH pass on the auxiliary stream while
/// later rounds keep both copy engines busy. Rounds live in a device
/// ciphertext buffer per group of rounds; groups take turns in two buffers
/// (bounded device memory, no drain between groups).
fn run_host(
    dev: &Device,
    rk: u64,
    ctr_kernel: &CtrKernel,
    seal: bool,
    items: &[GcmItem<'_>],
    host: &[usize],
    out: &mut [GcmOutcome],
) -> Result<(), DevError> {
    // Whole segments in item order; `pack` cuts them into batches.
    let mut segments: Vec<Piece> = Vec::new();
    let mut seg_item: Vec<usize> = Vec::new();
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
        segments.push(Piece { ptr, len, iv });
        seg_item.push(i);
    }
    if !empty.is_empty() {
        // Empty segments: a tag over their AAD alone; no data to stream.
        let descs: Vec<(usize, u64)> = empty.iter().map(|&i| (i, 0)).collect();
        let scratch = dev.alloc(16)?;
        let pass = Pass::prepare(dev, items, &descs)?;
        let tags = pass.run_sync(dev, rk, ctr_kernel, seal, scratch.ptr, false)?;
        finish(dev, seal, items, &descs, &tags, out)?;
    }
    if segments.is_empty() {
        return Ok(());
    }
    let batches = ctr::pack(&segments, 16);
    let areas: Vec<usize> = batches.iter().map(|b| b.area()).collect();
    let clean: Vec<bool> = batches.iter().map(|b| b.starts_clean()).collect();
    let rounds = cut(&areas, ROUND_BYTES, &|k| clean[k]);
    let groups = cut_groups(&rounds, &areas, GROUP_BYTES);
    // Groups alternate between two ciphertext buffers, so the next group
    // streams in while the last GHASH pass of this one still reads; a
    // group waits only for the one before it in the same buffer.
    let group_of = |k: usize| groups.partition_point(|g| rounds[g.end - 1].end <= k);
    // Buffer 0 holds the even groups, buffer 1 the odd ones.
    let mut buf_bytes = [0usize; 2];
    let mut at = vec![0usize; batches.len()];
    for (i, g) in groups.iter().enumerate() {
        let mut bytes = 0usize;
        for k in rounds[g.start].start..rounds[g.end - 1].end {
            at[k] = bytes;
            bytes += areas[k];
        }
        buf_bytes[i % 2] = buf_bytes[i % 2].max(bytes);
    }
    let scratch = dev.scratch(buf_bytes[0] + buf_bytes[1])?;
    let cbuf = scratch.as_ref().expect("scratch() fills it");
    let buf_base = |g: usize| cbuf.ptr + (g % 2 * buf_bytes[0]) as u64;
    // Every round's descriptors and buffers, ready before streaming starts
    // (allocation and upload mid-pipeline would stall it).
    let mut passes = Vec::with_capacity(rounds.len());
    for r in &rounds {
        let mut descs: Vec<(usize, u64)> = Vec::new();
        for k in r.clone() {
            for pl in batches[k].pieces.iter().filter(|pl| pl.at == 0) {
                descs.push((seg_item[pl.seg], (at[k] + pl.off) as u64));
            }
        }
        let pass = Pass::prepare(dev, items, &descs)?;
        passes.push((r.end - 1, group_of(r.start), descs, pass));
    }
    let mirror = Mirror {
        at: (0..batches.len())
            .map(|k| buf_base(group_of(k)) + at[k] as u64)
            .collect(),
        before_kernel: !seal,
    };
    let aux = dev.aux_stream;
    let done = [BufferEvent::new()?, BufferEvent::new()?];
    let mut next_pass = 0usize;
    let mut after = |k: usize, slots: &[super::runtime::Slot]| -> Result<(), DevError> {
        while next_pass < passes.len() && passes[next_pass].0 == k {
            let (_, g, _, pass) = &passes[next_pass];
            // SAFETY: streams are live; the GHASH kernels read the round's
            // ciphertext, which the slot streams finish writing before the
            // points aux waits for.
            unsafe {
                for slot in slots {
                    wait_for(aux, slot.stream)?;
                }
                pass.launch(dev, rk, ctr_kernel, seal, buf_base(*g), false, aux)?;
            }
            next_pass += 1;
        }
        let g = group_of(k);
        if k + 1 == rounds[groups[g].end - 1].end {
            // the group's last pass is queued: its buffer is free after it
            done[g % 2].record(aux)?;
            if g >= 1 && g + 1 < groups.len() {
                // group g + 1 reuses group g - 1's buffer: the slot streams
                // wait for g - 1's passes (long done, normally), never for
                // g's, which run while g + 1 streams in
                for slot in slots {
                    done[(g + 1) % 2].wait(slot.stream)?;
                }
            }
        }
        Ok(())
    };
    ctr::run_batches(dev, ctr_kernel, batches, Some(mirror), Some(&mut after))?;
    sync(aux)?;
    // Tags come back after the pipeline (a few bytes per segment; a pinned
    // buffer per call cost more than the copies).
    for (_, _, descs, pass) in &passes {
        let tags = pass.download_tags()?;
        finish(dev, seal, items, descs, &tags, out)?;
    }
    Ok(())
}

/// An event marking when a ciphertext buffer's GHASH passes are done.
struct BufferEvent(cudarc::driver::sys::CUevent);

impl BufferEvent {
    fn new() -> Result<Self, DevError> {
        use cudarc::driver::{result as cu, sys};
        cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map(BufferEvent)
            .map_err(|e| super::runtime::err("creating event", e))
    }

    fn record(&self, stream: CUstream) -> Result<(), DevError> {
        // SAFETY: the event and the stream are live.
        unsafe { cudarc::driver::result::event::record(self.0, stream) }
            .map_err(|e| super::runtime::err("event record", e))
    }

    fn wait(&self, stream: CUstream) -> Result<(), DevError> {
        use cudarc::driver::sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT;
        // SAFETY: the event and the stream are live.
        unsafe { cudarc::driver::result::stream::wait_event(stream, self.0, CU_EVENT_WAIT_DEFAULT) }
            .map_err(|e| super::runtime::err("stream wait", e))
    }
}

impl Drop for BufferEvent {
    fn drop(&mut self) {
        // SAFETY: run_host synchronises every stream that used the event
        // before it is dropped (or the device is being torn down by an
        // error, when destroying a pending event is still allowed).
        unsafe {
            let _ = cudarc::driver::result::event::destroy(self.0);
        }
    }
}

/// Cuts batches (of `areas` bytes) into rounds of at least `min` bytes (the
/// last may be smaller), only before clean batches.
fn cut(areas: &[usize], min: usize, clean: &dyn Fn(usize) -> bool) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut from = 0;
    let mut bytes = 0;
    for k in 1..areas.len() {
        bytes += areas[k - 1];
        if bytes >= min && clean(k) {
            out.push(from..k);
            from = k;
            bytes = 0;
        }
    }
    out.push(from..areas.len());
    out
}

/// Groups consecutive rounds while their batches fit in `max` bytes (a
/// round larger than that is a group of its own).
fn cut_groups(rounds: &[Range<usize>], areas: &[usize], max: usize) -> Vec<Range<usize>> {
    let bytes = |r: &Range<usize>| areas[r.clone()].iter().sum::<usize>();
    let mut out = Vec::new();
    let mut from = 0;
    let mut sum = 0;
    for (r, round) in rounds.iter().enumerate() {
        let b = bytes(round);
        if r > from && sum + b > max {
            out.push(from..r);
            from = r;
            sum = 0;
        }
        sum += b;
    }
    out.push(from..rounds.len());
    out
}

/// Makes `waiter` wait for everything queued on `on` so far.
///
/// # Safety
/// Both streams must be live.
unsafe fn wait_for(waiter: CUstream, on: CUstream) -> Result<(), DevError> {
    use cudarc::driver::result as cu;
    use cudarc::driver::sys;
    let ev = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| super::runtime::err("creating event", e))?;
    let r = cu::event::record(ev, on)
        .and_then(|_| {
            cu::stream::wait_event(waiter, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })
        .map_err(|e| super::runtime::err("stream wait", e));
    // Destroying a recorded event is allowed; the wait keeps its own reference.
    let _ = cu::event::destroy(ev);
    r
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
    // A synchronous memset of device memory may return before it is done
    // (it is ordered on the legacy stream only): wait for it, so that no
    // later work on another stream can read the forged plaintext.
    unsafe {
        use cudarc::driver::{result as cu, sys};
        sys::cuMemsetD8_v2(ptr, 0, len)
            .result()
            .and_then(|()| cu::stream::synchronize(std::ptr::null_mut()))
    }
    .map_err(|e| super::runtime::err("wiping a forged segment", e))
}

/// One GHASH pass (plus, for device-resident data, the keystream): the
/// segments' descriptors, AAD and scratch on the device, ready to launch.
struct Pass {
    n: usize,
    units: u64,
    ghash_blocks: u64,
    segs: DeviceBuffer,
    aad: DeviceBuffer,
    work: DeviceBuffer,
    tags: DeviceBuffer,
}

impl Pass {
    /// `descs`: (item, byte offset of its data from the pass's base).
    fn prepare(
        dev: &Device,
        items: &[GcmItem<'_>],
        descs: &[(usize, u64)],
    ) -> Result<Pass, DevError> {
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
        // GHASH tables and H, the piece index (n + 1 words, 16-aligned),
        // the accumulators (gcm.cu, "work buffer layout").
        let work_bytes = GCM_W_PIECES as usize + (8 * (n + 1)).next_multiple_of(16) + 16 * n;
        let pass = Pass {
            n,
            units,
            ghash_blocks,
            segs: dev.alloc(seg_bytes)?,
            aad: dev.alloc(aad.len())?,
            work: dev.alloc(work_bytes)?,
            tags: dev.alloc(16 * n)?,
        };
        upload(pass.segs.ptr, as_bytes(&segs))?;
        upload(pass.aad.ptr, &aad)?;
        Ok(pass)
    }

    /// Launches and waits; returns the computed tags.
    fn run_sync(
        &self,
        dev: &Device,
        rk: u64,
        ctr_kernel: &CtrKernel,
        seal: bool,
        base: u64,
        with_ctr: bool,
    ) -> Result<Vec<[u8; 16]>, DevError> {
        if self.n == 0 {
            return Ok(Vec::new());
        }
        let stream = dev.aux_stream;
        // SAFETY: the pass's buffers are live; `base` + offsets name device
        // memory holding each segment (caller's contract).
        unsafe { self.launch(dev, rk, ctr_kernel, seal, base, with_ctr, stream)? };
        sync(stream)?;
        self.download_tags()
    }

    /// The tags the pass computed (its stream must be synchronised).
    fn download_tags(&self) -> Result<Vec<[u8; 16]>, DevError> {
        let mut raw = vec![0u8; 16 * self.n];
        download(&mut raw, self.tags.ptr)?;
        Ok(raw
            .chunks_exact(16)
            .map(|c| c.try_into().expect("16-byte chunks"))
            .collect())
    }

    /// Queues the GCM kernels on `stream` in the documented order.
    ///
    /// # Safety
    /// `base` + each descriptor's offset must be device memory of the
    /// segment's length, not written by other work until the pass is done.
    #[allow(clippy::too_many_arguments)]
    unsafe fn launch(
        &self,
        dev: &Device,
        rk: u64,
        ctr_kernel: &CtrKernel,
        seal: bool,
        base: u64,
        with_ctr: bool,
        stream: CUstream,
    ) -> Result<(), DevError> {
        if self.n == 0 {
            return Ok(());
        }
        let (n, units) = (self.n as u32, self.units);
        let plan = GhashPlan::new(self.ghash_blocks, self.n as u64);
        let p = plan.piece_blocks;
        let sms = dev.multiprocessors;
        let data = base;
        let ctr = || -> Result<(), DevError> {
            if !with_ctr || units == 0 {
                return Ok(());
            }
            // The GCM twin of the CTR kernel the job's shape names (same
            // tables, same launch shape).
            let CtrKeys::Aes { gcm, .. } = ctr_kernel.keys else {
                return Err(format!("{} has no GCM twin", ctr_kernel.name()));
            };
            let per_sm = ctr_kernel.blocks_per_sm as u64 * sms as u64;
            let grid = units
                .div_ceil(ctr_kernel.units_per_thread)
                .div_ceil(ctr_kernel.block as u64)
                .clamp(1, per_sm) as u32;
            let shape = Shape {
                grid,
                block: ctr_kernel.block,
                shared: ctr_kernel.shared,
            };
            let args = GcmCtrArgs {
                rk: rk.into(),
                data: data.into(),
                segs: self.segs.ptr.into(),
                nsegs: n,
                total_units: units,
            };
            dev.launch(gcm, shape, stream, args)
        };
        let mut trace = super::runtime::Trace::new("gcm", stream);
        if seal {
            ctr()?;
            trace.mark("ctr");
        }
        let setup = GcmSetupArgs {
            rk: rk.into(),
            segs: self.segs.ptr.into(),
            nsegs: n,
            piece_blocks: p,
            work: self.work.ptr.into(),
        };
        let one_block = Shape {
            grid: 1,
            block: 1024,
            shared: 0,
        };
        dev.launch(plan.setup_kernel(), one_block, stream, setup)?;
        trace.mark("gcm_setup");
        let ghash = GcmGhashArgs {
            segs: self.segs.ptr.into(),
            nsegs: n,
            data: data.into(),
            aad: self.aad.ptr.into(),
            piece_blocks: p,
            work: self.work.ptr.into(),
        };
        let ghash_shape = Shape {
            grid: plan.grid(self.ghash_blocks, n as u64, sms),
            block: 256,
            shared: GCM_GHASH_SMEM_BYTES,
        };
        dev.launch(plan.ghash_kernel(), ghash_shape, stream, ghash)?;
        trace.mark("gcm_ghash");
        let finalize = GcmFinalizeArgs {
            rk: rk.into(),
            segs: self.segs.ptr.into(),
            nsegs: n,
            work: self.work.ptr.into(),
            tags_out: self.tags.ptr.into(),
        };
        let per_segment = Shape {
            grid: n.div_ceil(256),
            block: 256,
            shared: 0,
        };
        dev.launch(GCM_FINALIZE, per_segment, stream, finalize)?;
        trace.mark("gcm_finalize");
        if !seal {
            ctr()?;
            trace.mark("ctr");
        }
        Ok(())
    }
}

/// Which GHASH kernels a pass runs, and their piece length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GhashPlan {
    /// `gcm_ghash_wide` (a warp per piece of 32 P blocks, coalesced loads)
    /// rather than `gcm_ghash` (a thread per piece of P blocks).
    wide: bool,
    piece_blocks: u32,
}

impl GhashPlan {
    /// Wide when the segments average at least one warp piece: its lanes
    /// read 512 consecutive bytes a step where gcm_ghash's touch 32 lines,
    /// but each lane of a warp piece pays the piece's weighting, which
    /// short segments would pay 32 times over. `GVAULT_GCM_GHASH=narrow`
    /// or `wide` forces a kernel (for measurements).
    fn new(total_blocks: u64, nsegs: u64) -> GhashPlan {
        let force = crate::tuning::tuning().gcm_ghash_wide;
        let wide_p = piece_blocks(total_blocks / 32);
        let wide = force.unwrap_or(total_blocks >= nsegs.max(1).saturating_mul(32 * wide_p as u64));
        GhashPlan {
            wide,
            piece_blocks: if wide {
                wide_p
            } else {
                piece_blocks(total_blocks)
            },
        }
    }

    fn setup_kernel(&self) -> Kernel<GcmSetupArgs> {
        if self.wide {
            GCM_SETUP_WIDE
        } else {
            GCM_SETUP
        }
    }

    fn ghash_kernel(&self) -> Kernel<GcmGhashArgs> {
        if self.wide {
            GCM_GHASH_WIDE
        } else {
            GCM_GHASH
        }
    }

    /// Blocks of 256 threads: one per 256 pieces (8 warp pieces when
    /// wide), at most 3 per SM (their 64 KiB tables fill the SM).
    fn grid(&self, total_blocks: u64, nsegs: u64, sms: u32) -> u32 {
        let per_piece = self.piece_blocks as u64 * if self.wide { 32 } else { 1 };
        let pieces = total_blocks.div_ceil(per_piece).max(nsegs);
        let per_block = if self.wide { 8 } else { 256 };
        pieces.div_ceil(per_block).clamp(1, 3 * sms as u64) as u32
    }
}

/// GHASH piece length P (blocks per thread), as kernels/README.md advises:
/// enough pieces to fill the GPU, long enough to hide the power step.
/// The cap is 256 blocks: on an H100 (2026-11-22) caps of 128–512 gave
/// 296–299 GB/s against 293–295 at 64 (the power step is amortised over
/// longer pieces) and 1024 fell to 284. `GVAULT_GCM_PIECE_MAX` (a power of
/// two, 16..=4096) overrides it (`scripts/gpu.sh variants` sweeps it).
fn piece_blocks(total_blocks: u64) -> u32 {
    let cap = crate::tuning::tuning().gcm_piece_max.unwrap_or(256);
    piece_blocks_capped(total_blocks, cap)
}

fn piece_blocks_capped(total_blocks: u64, cap: u64) -> u32 {
    let target = (total_blocks / 65536).max(1);
    let pow2 = 1u64 << (63 - target.leading_zeros());
    pow2.clamp(16, cap.max(16)) as u32
}

#[cfg(test)]
mod tests {
    use super::{cut, cut_groups, piece_blocks_capped, GhashPlan};

    #[test]
    fn rounds_cut_only_at_clean_points_and_cover_everything() {
        // Batches 3..=6 continue one long segment: no cut inside it.
        let clean = |k: usize| !(3..=6).contains(&k);
        let ones = [1usize; 12];
        let rounds = cut(&ones, 2, &clean);
        assert_eq!(rounds, vec![0..2, 2..7, 7..9, 9..11, 11..12]);
        assert_eq!(cut(&[1], 4, &|_| true), vec![0..1]);
        let groups = cut_groups(&rounds, &ones, 6);
        assert_eq!(groups, vec![0..1, 1..2, 2..5]);
        // A round longer than a group's budget stands alone.
        assert_eq!(cut_groups(&[0..10, 10..11], &[1; 11], 4), vec![0..1, 1..2]);
        // Rounds count bytes, not batches: small ramp batches join a round.
        assert_eq!(
            cut(&[1, 2, 4, 8, 8, 4, 2, 1], 8, &|_| true),
            vec![0..4, 4..5, 5..8]
        );
    }

    #[test]
    fn ghash_goes_wide_for_long_segments_only() {
        // 1 GiB x 4: warp pieces of 32 x 256 blocks, a grid that fills 3 per SM
        let big = GhashPlan::new(4 << 26, 4);
        assert!(big.wide);
        assert_eq!(big.grid(4 << 26, 4, 132), 396);
        // 4 KiB segments: a thread per piece
        let small = GhashPlan::new(256 * 16384, 16384);
        assert!(!small.wide);
        assert_eq!(small.piece_blocks, piece_blocks_capped(256 * 16384, 256));
        // a lone 1 KiB segment: narrow
        assert!(!GhashPlan::new(64, 1).wide);
    }

    #[test]
    fn piece_blocks_follows_the_recipe() {
        assert_eq!(piece_blocks_capped(0, 64), 16);
        assert_eq!(piece_blocks_capped(65536 * 20, 64), 16);
        assert_eq!(piece_blocks_capped(65536 * 40, 64), 32);
        assert_eq!(piece_blocks_capped(65536 * 1000, 64), 64);
        assert_eq!(piece_blocks_capped(65536 * 1000, 256), 256);
        assert_eq!(piece_blocks_capped(65536 * 100, 4096), 64);
    }
}
