//! Host input for read-only jobs (digests, chunking): pieces of host memory
//! are packed into the device's pinned slots and copied in on the slot's
//! stream, alternating slots so that packing one overlaps the copy and
//! kernel of the other. Nothing is copied back: the kernels leave their
//! results (digests, chaining values) in job-scoped device buffers.

use std::ffi::c_void;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::host_copy::{copy_parallel, CopyJob};
use super::runtime::{err, sync, DevError, Device, Slot, SLOT_BYTES};

/// Where a piece landed in the slot's device buffer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Staged {
    /// Index into the caller's piece list.
    pub idx: usize,
    /// Byte offset in the slot (16-byte aligned).
    pub off: usize,
}

/// Copy of host pieces into a pinned slot, spread over the pool.
fn pack(slot: &Slot, parts: &[(usize, &[u8])]) {
    let jobs: Vec<CopyJob> = parts
        .iter()
        // SAFETY: off + src.len() <= SLOT_BYTES (checked by the caller), and
        // the pinned slot does not overlap the user's bytes.
        .map(|&(off, src)| (unsafe { slot.host.add(off) }, src.as_ptr(), src.len()))
        .collect();
    copy_parallel(&jobs);
}

/// Stages `pieces` (each at most `SLOT_BYTES`) and calls `launch(slot,
/// batch)` after each slot's copy-in is queued; `launch` queues its
/// descriptors (at most `max_batch` per call) and kernel on `slot.stream`.
/// With `ordered = Some(segment of each piece)`, each launch also waits for
/// the previous one and a batch never holds two pieces of one segment
/// (kernels that carry per-segment state from one piece to the next, one
/// thread per piece). Returns once all queued work is done.
pub(crate) fn stage_host<F>(
    dev: &Device,
    pieces: &[&[u8]],
    max_batch: usize,
    ordered: Option<&[u32]>,
    mut launch: F,
) -> Result<(), DevError>
where
    F: FnMut(&Slot, &[Staged]) -> Result<(), DevError>,
{
    dev.bind()?;
    let slots = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?;
    let event = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| err("creating event", e))?;
    let result = (|| {
        let mut next = 0usize;
        let mut k = 0usize;
        let mut busy = vec![false; slots.len()];
        // Per segment: 1 + the last batch that took one of its pieces.
        let mut taken_in: Vec<usize> = match ordered {
            Some(segs) => vec![0; segs.iter().map(|&s| s as usize + 1).max().unwrap_or(0)],
            None => Vec::new(),
        };
        let mut times = HostTimes::new();
        while next < pieces.len() {
            let s = k % slots.len();
            let slot = &slots[s];
            if busy[s] {
                sync(slot.stream)?;
            }
            times.lap(0);
            let (batch, used) =
                next_batch(pieces, &mut next, max_batch, ordered, &mut taken_in, k)?;
            // Page-locked pieces are copied by the DMA engine straight from
            // the caller's memory; the rest are packed into the pinned slot.
            // Runs of equal page-locked pieces at a constant stride go by
            // one 2D copy each.
            let direct: Vec<bool> = batch.iter().map(|st| is_direct(pieces[st.idx])).collect();
            let (mut runs, mut unpacked) = strided_runs(&batch, pieces, &direct, |p, n| {
                super::runtime::is_page_locked(p, n)
            });
            share_runs(&mut runs, &mut unpacked, &batch, pieces, strided_share());
            // SAFETY: the slot's stream was synchronised before reuse; the
            // runs are page-locked memory borrowed until every stream is
            // synchronised below. Queued first, they move while we pack.
            unsafe {
                for run in &runs {
                    copy_run(slot.dev, slot.stream, &batch, pieces, run)?;
                }
            }
            let parts: Vec<(usize, &[u8])> = batch
                .iter()
                .zip(&unpacked)
                .filter(|(_, &d)| !d)
                .map(|(st, _)| (st.off, pieces[st.idx]))
                .collect();
            pack(slot, &parts);
            times.lap(1);
            debug_assert!(used <= SLOT_BYTES);
            // SAFETY: the slot holds SLOT_BYTES >= used; its stream was
            // synchronised before the host buffer was refilled; direct
            // pieces are page-locked memory borrowed until every stream is
            // synchronised below.
            unsafe {
                for (from, to) in packed_ranges(&batch, &unpacked, pieces) {
                    sys::cuMemcpyHtoDAsync_v2(
                        slot.dev + from as u64,
                        slot.host.add(from) as *const c_void,
                        to - from,
                        slot.stream,
                    )
                    .result()
                    .map_err(|e| err("copy-in", e))?;
                }
                for (st, _) in batch.iter().zip(&direct).filter(|(_, &d)| d) {
                    let p = pieces[st.idx];
                    sys::cuMemcpyHtoDAsync_v2(
                        slot.dev + st.off as u64,
                        p.as_ptr() as *const c_void,
                        p.len(),
                        slot.stream,
                    )
                    .result()
                    .map_err(|e| err("copy-in", e))?;
                }
                if ordered.is_some() && k > 0 {
                    cu::stream::wait_event(
                        slot.stream,
                        event,
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                    .map_err(|e| err("stream wait", e))?;
                }
            }
            launch(slot, &batch)?;
            if ordered.is_some() {
                // SAFETY: event and stream are live.
                unsafe { cu::event::record(event, slot.stream) }
                    .map_err(|e| err("event record", e))?;
            }
            busy[s] = true;
            k += 1;
            times.lap(2);
        }
        times.report(k);
        for (s, b) in busy.iter().enumerate() {
            if *b {
                sync(slots[s].stream)?;
            }
        }
        Ok(())
    })();
    if result.is_err() {
        for s in slots.iter() {
            let _ = sync(s.stream);
        }
    }
    // SAFETY: all streams that used the event are synchronised.
    unsafe {
        let _ = cu::event::destroy(event);
    }
    result
}

/// Host time of the staging loop by phase (waiting for a slot, packing,
/// queueing), printed when `GVAULT_GPU_TRACE=2`: where a host-bound
/// pipeline loses its time, without the syncs of `Trace`.
struct HostTimes {
    on: bool,
    start: std::time::Instant,
    last: std::time::Instant,
    spent: [f64; 3],
}

impl HostTimes {
    fn new() -> HostTimes {
        let now = std::time::Instant::now();
        HostTimes {
            on: crate::tuning::tuning().gpu_trace == 2,
            start: now,
            last: now,
            spent: [0.0; 3],
        }
    }

    fn lap(&mut self, phase: usize) {
        if self.on {
            let now = std::time::Instant::now();
            self.spent[phase] += (now - self.last).as_secs_f64() * 1e3;
            self.last = now;
        }
    }

    fn report(&self, batches: usize) {
        if self.on && batches > 0 {
            eprintln!(
                "stage: {batches} batches in {:.2} ms: waiting {:.2}, packing {:.2}, queueing {:.2} (ms)",
                self.start.elapsed().as_secs_f64() * 1e3,
                self.spent[0],
                self.spent[1],
                self.spent[2]
            );
        }
    }
}

/// Pieces at least this long in page-locked memory skip the staging copy
/// (as in ctr.rs; shorter ones are cheaper to pack than to DMA one by one).
const DIRECT_MIN: usize = 256 << 10;

fn is_direct(piece: &[u8]) -> bool {
    piece.len() >= DIRECT_MIN && super::runtime::is_page_locked(piece.as_ptr(), piece.len())
}

/// Equal pieces of one page-locked buffer at a constant stride, staged at
/// consecutive slot offsets: batch entries `first..first + count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StridedRun {
    pub first: usize,
    pub count: usize,
    pub pitch: usize,
}

/// A run must carry this much to be worth a 2D copy rather than packing.
const STRIDED_MIN: usize = 1 << 20;

/// The runs of a batch that one 2D DMA each can copy straight from the
/// caller's page-locked memory: a striped round of equal segments laid end
/// to end (SHA-256 over 4096 x 1 MiB puts a 16 KiB piece of every segment
/// in each slot; packing them on the CPU bound that job at ~45 GB/s).
/// Returns the runs and, per batch entry, whether it is not packed (direct
/// or in a run). `locked(ptr, len)` says whether memory is page-locked.
pub(crate) fn strided_runs(
    batch: &[Staged],
    pieces: &[&[u8]],
    direct: &[bool],
    locked: impl Fn(*const u8, usize) -> bool,
) -> (Vec<StridedRun>, Vec<bool>) {
    // CUDA's limit on a 2D copy's pitch.
    const MAX_PITCH: usize = i32::MAX as usize;
    let mut unpacked = direct.to_vec();
    let mut runs = Vec::new();
    let addr = |i: usize| pieces[batch[i].idx].as_ptr() as usize;
    let len = |i: usize| pieces[batch[i].idx].len();
    let mut i = 0;
    while i < batch.len() {
        let n = len(i);
        let pitch = if i + 1 < batch.len() {
            addr(i + 1).wrapping_sub(addr(i))
        } else {
            0
        };
        let fits = |j: usize| {
            !direct[j]
                && len(j) == n
                && addr(j) == addr(i) + (j - i) * pitch
                && batch[j].off == batch[i].off + (j - i) * n
        };
        let mut j = i + 1;
        if !direct[i] && n > 0 && (n..=MAX_PITCH).contains(&pitch) {
            while j < batch.len() && fits(j) {
                j += 1;
            }
        }
        let count = j - i;
        if count >= 2
            && count * n >= STRIDED_MIN
            && locked(addr(i) as *const u8, (count - 1) * pitch + n)
        {
            unpacked[i..j].fill(true);
            runs.push(StridedRun {
                first: i,
                count,
                pitch,
            });
        }
        i = j;
    }
    (runs, unpacked)
}

/// Percent of each strided run that goes by 2D copy (the rest is packed,
/// so the CPU's copy and the DMA engine's share the work):
/// `GVAULT_STRIDED_SHARE`, 0..=100.
fn strided_share() -> usize {
    crate::tuning::tuning()
        .strided_share
        .unwrap_or(STRIDED_SHARE)
}

const STRIDED_SHARE: usize = 100;

/// Keeps the first `share` percent of each run's pieces in the run and
/// marks the rest for packing; runs left under STRIDED_MIN are packed whole.
fn share_runs(
    runs: &mut Vec<StridedRun>,
    unpacked: &mut [bool],
    batch: &[Staged],
    pieces: &[&[u8]],
    share: usize,
) {
    runs.retain_mut(|run| {
        let keep = (run.count * share).div_ceil(100);
        let n = pieces[batch[run.first].idx].len();
        let keep = if keep >= 2 && keep * n >= STRIDED_MIN {
            keep
        } else {
            0
        };
        unpacked[run.first + keep..run.first + run.count].fill(false);
        run.count = keep;
        keep > 0
    });
}

/// Queues one run's 2D copy from the caller's memory into the device
/// buffer at `dst` (pieces at their batch offsets), on `stream`.
///
/// # Safety
/// The run's pieces are page-locked and stay borrowed until `stream` is
/// synchronised; the buffer at `dst` holds them at their batch offsets.
pub(crate) unsafe fn copy_run(
    dst: u64,
    stream: sys::CUstream,
    batch: &[Staged],
    pieces: &[&[u8]],
    run: &StridedRun,
) -> Result<(), DevError> {
    let first = batch[run.first];
    let piece = pieces[first.idx];
    let copy = sys::CUDA_MEMCPY2D {
        srcXInBytes: 0,
        srcY: 0,
        srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
        srcHost: piece.as_ptr() as *const c_void,
        srcDevice: 0,
        srcArray: std::ptr::null_mut(),
        srcPitch: run.pitch,
        dstXInBytes: 0,
        dstY: 0,
        dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
        dstHost: std::ptr::null_mut(),
        dstDevice: dst + first.off as u64,
        dstArray: std::ptr::null_mut(),
        dstPitch: piece.len(),
        WidthInBytes: piece.len(),
        Height: run.count,
    };
    sys::cuMemcpy2DAsync_v2(&copy, stream)
        .result()
        .map_err(|e| err("strided copy-in", e))
}

/// Slot byte ranges covering runs of consecutive packed (not direct) pieces.
fn packed_ranges(batch: &[Staged], direct: &[bool], pieces: &[&[u8]]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut prev_packed = false;
    for (st, &d) in batch.iter().zip(direct) {
        if d {
            prev_packed = false;
            continue;
        }
        let end = st.off + pieces[st.idx].len();
        match out.last_mut() {
            Some(r) if prev_packed => r.1 = end,
            _ => out.push((st.off, end)),
        }
        prev_packed = true;
    }
    out
}

/// The pieces from `*next` on that go into batch `k`: as many as fit one
/// slot (16-byte aligned) and `max_batch`, stopping before a second piece
/// of a segment when `ordered` names them. Returns the batch and the bytes
/// it fills.
fn next_batch(
    pieces: &[&[u8]],
    next: &mut usize,
    max_batch: usize,
    ordered: Option<&[u32]>,
    taken_in: &mut [usize],
    k: usize,
) -> Result<(Vec<Staged>, usize), DevError> {
    let mut batch = Vec::new();
    let mut used = 0usize;
    while *next < pieces.len() && batch.len() < max_batch.max(1) {
        let p = pieces[*next];
        let off = used.next_multiple_of(16);
        if !batch.is_empty() && off + p.len() > SLOT_BYTES {
            break;
        }
        if p.len() > SLOT_BYTES {
            return Err(format!("piece of {} bytes exceeds a slot", p.len()));
        }
        if let Some(segs) = ordered {
            let seg = segs[*next] as usize;
            if taken_in[seg] == k + 1 {
                break; // its state is still being carried in this batch
            }
            taken_in[seg] = k + 1;
        }
        batch.push(Staged { idx: *next, off });
        used = off + p.len();
        *next += 1;
    }
    Ok((batch, used))
}

/// Copies `descs` (plain `repr(C)` data) into the slot's descriptor area
/// and queues their copy to the device on the slot's stream.
pub(crate) fn upload_descs<T: Copy>(slot: &Slot, descs: &[T]) -> Result<(), DevError> {
    let bytes = std::mem::size_of_val(descs);
    if bytes > super::runtime::DESC_BYTES {
        return Err("descriptor batch exceeds the slot's descriptor area".into());
    }
    // SAFETY: T is plain data; the area holds DESC_BYTES; the stream was
    // synchronised before this slot was reused.
    unsafe {
        std::ptr::copy_nonoverlapping(descs.as_ptr() as *const u8, slot.host_desc, bytes);
        sys::cuMemcpyHtoDAsync_v2(
            slot.dev_desc,
            slot.host_desc as *const c_void,
            bytes,
            slot.stream,
        )
        .result()
        .map_err(|e| err("descriptor copy-in", e))
    }
}

/// The bytes of a plain `repr(C)` slice, for synchronous uploads.
pub(crate) fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: T is plain data without padding-dependent meaning; the slice
    // lives as long as the returned borrow.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// Cuts `data` into pieces of at most `SLOT_BYTES` (a multiple of 1 KiB, so
/// BLAKE3 chunks and hash blocks never straddle two pieces); an empty input
/// is one empty piece.
pub(crate) fn cut(data: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let n = data.len().div_ceil(SLOT_BYTES).max(1);
    (0..n).map(move |i| {
        let at = i * SLOT_BYTES;
        (at, &data[at..(at + SLOT_BYTES).min(data.len())])
    })
}

/// Copies host `pieces` (each at most `SLOT_BYTES`) to device addresses
/// `targets` through the pinned slots: the link is crossed once, at the
/// slots' rate, and a device-to-device copy places each piece.
pub(crate) fn copy_in(dev: &Device, pieces: &[&[u8]], targets: &[u64]) -> Result<(), DevError> {
    if pieces.len() != targets.len() {
        return Err("copy_in: one target per piece".into());
    }
    stage_host(dev, pieces, usize::MAX, None, |slot, batch| {
        for st in batch {
            // SAFETY: the slot's device buffer holds the staged piece at
            // st.off; the caller owns `targets[st.idx]` for its length.
            unsafe {
                sys::cuMemcpyDtoDAsync_v2(
                    targets[st.idx],
                    slot.dev + st.off as u64,
                    pieces[st.idx].len(),
                    slot.stream,
                )
                .result()
                .map_err(|e| err("device copy", e))?;
            }
        }
        Ok(())
    })
}

/// Queues a copy of small host data (descriptors, counters) on `stream`, so
/// that kernels queued after it on that stream see it; the runtime's
/// streams do not wait for the legacy stream that `upload` uses.
pub(crate) fn upload_on(
    stream: sys::CUstream,
    dst: sys::CUdeviceptr,
    src: &[u8],
) -> Result<(), DevError> {
    // SAFETY: dst holds src.len() bytes (the caller's allocation); a copy
    // from pageable memory returns once the source has been staged.
    unsafe {
        sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr() as *const c_void, src.len(), stream)
            .result()
            .map_err(|e| err("upload", e))
    }
}

#[cfg(test)]
mod tests {
    use super::{
        next_batch, packed_ranges, share_runs, strided_runs, Staged, StridedRun, SLOT_BYTES,
    };

    /// Round `r` of striping `segs` equal segments of `seg` bytes laid end
    /// to end in `buf`, `piece` bytes each, staged back to back.
    fn round(buf: &[u8], seg: usize, segs: usize, piece: usize, r: usize) -> Vec<&[u8]> {
        (0..segs)
            .map(|s| &buf[s * seg + r * piece..s * seg + (r + 1) * piece])
            .collect()
    }

    fn staged(pieces: &[&[u8]]) -> Vec<Staged> {
        let mut off = 0;
        pieces
            .iter()
            .enumerate()
            .map(|(idx, p)| {
                let st = Staged { idx, off };
                off = (off + p.len()).next_multiple_of(16);
                st
            })
            .collect()
    }

    #[test]
    fn a_striped_round_of_locked_memory_is_one_strided_run() {
        let buf = vec![0u8; 64 << 20];
        let pieces = round(&buf, 1 << 20, 64, 16 << 10, 3);
        let batch = staged(&pieces);
        let direct = vec![false; batch.len()];
        let (runs, unpacked) = strided_runs(&batch, &pieces, &direct, |p, n| {
            // The whole span must be asked about, from the first piece.
            assert_eq!(p, pieces[0].as_ptr());
            assert_eq!(n, 63 * (1 << 20) + (16 << 10));
            true
        });
        assert_eq!(
            runs,
            vec![StridedRun {
                first: 0,
                count: 64,
                pitch: 1 << 20
            }]
        );
        assert!(unpacked.iter().all(|&u| u));
        // Pageable memory: nothing changes.
        let (runs, unpacked) = strided_runs(&batch, &pieces, &direct, |_, _| false);
        assert!(runs.is_empty() && unpacked.iter().all(|&u| !u));
    }

    #[test]
    fn a_share_of_each_run_goes_by_dma_and_the_rest_is_packed() {
        let buf = vec![0u8; 64 << 20];
        let pieces = round(&buf, 1 << 20, 64, 64 << 10, 0);
        let batch = staged(&pieces);
        let direct = vec![false; 64];
        for (share, want) in [(100, 64), (50, 32), (30, 20), (1, 0), (0, 0)] {
            let (mut runs, mut unpacked) = strided_runs(&batch, &pieces, &direct, |_, _| true);
            share_runs(&mut runs, &mut unpacked, &batch, &pieces, share);
            // 1 % would keep one piece: below two pieces and 1 MiB, packed.
            assert_eq!(
                runs.iter().map(|r| r.count).sum::<usize>(),
                want,
                "{share}%"
            );
            assert_eq!(unpacked.iter().filter(|&&u| u).count(), want, "{share}%");
            assert!(unpacked[..want].iter().all(|&u| u));
        }
    }

    #[test]
    fn runs_break_at_odd_pieces_and_small_runs_are_packed() {
        let buf = vec![0u8; 64 << 20];
        let mut pieces = round(&buf, 1 << 20, 64, 64 << 10, 0);
        // An odd-length piece (end of a segment) and one from elsewhere.
        pieces[20] = &buf[20 << 20..(20 << 20) + 1000];
        let other = vec![0u8; 64 << 10];
        pieces[40] = &other;
        let batch = staged(&pieces);
        let mut direct = vec![false; batch.len()];
        direct[45] = true;
        let (runs, unpacked) = strided_runs(&batch, &pieces, &direct, |_, _| true);
        // 0..20 (20 x 64 KiB), 21..40 (19), 41..45 (4 x 64 KiB: below
        // STRIDED_MIN, packed), 46..64 (18).
        assert_eq!(
            runs,
            vec![
                StridedRun {
                    first: 0,
                    count: 20,
                    pitch: 1 << 20
                },
                StridedRun {
                    first: 21,
                    count: 19,
                    pitch: 1 << 20
                },
                StridedRun {
                    first: 46,
                    count: 18,
                    pitch: 1 << 20
                },
            ]
        );
        for (i, &u) in unpacked.iter().enumerate() {
            let want = !(i == 20 || i == 40 || (41..45).contains(&i));
            assert_eq!(u, want, "piece {i}");
        }
        // Contiguous equal segments (pitch = length) form a run too.
        let pieces: Vec<&[u8]> = buf.chunks(4096).take(1024).collect();
        let batch = staged(&pieces);
        let (runs, _) = strided_runs(&batch, &pieces, &vec![false; 1024], |_, _| true);
        assert_eq!(
            runs,
            vec![StridedRun {
                first: 0,
                count: 1024,
                pitch: 4096
            }]
        );
    }

    #[test]
    fn packed_ranges_skip_direct_pieces() {
        let a = [0u8; 10];
        let pieces: Vec<&[u8]> = vec![&a, &a, &a, &a];
        let batch: Vec<Staged> = (0..4)
            .map(|i| Staged {
                idx: i,
                off: 16 * i,
            })
            .collect();
        assert_eq!(
            packed_ranges(&batch, &[false, false, true, false], &pieces),
            vec![(0, 26), (48, 58)]
        );
        assert_eq!(packed_ranges(&batch, &[true; 4], &pieces), vec![]);
    }

    #[test]
    fn ordered_batches_never_hold_two_pieces_of_a_segment() {
        let small = vec![0u8; 100];
        let big = vec![0u8; SLOT_BYTES / 3];
        // Segment 0 has three consecutive pieces, then 1, 2, then 0 again.
        let pieces: Vec<&[u8]> = vec![&small, &small, &small, &small, &big, &small];
        let segs = [0u32, 0, 0, 1, 2, 0];
        let mut taken = vec![0usize; 3];
        let (mut next, mut k, mut batches) = (0usize, 0usize, Vec::new());
        while next < pieces.len() {
            let (b, used) =
                next_batch(&pieces, &mut next, 1000, Some(&segs), &mut taken, k).unwrap();
            assert!(used <= SLOT_BYTES);
            batches.push(b.iter().map(|st| st.idx).collect::<Vec<_>>());
            k += 1;
        }
        assert_eq!(batches, vec![vec![0], vec![1], vec![2, 3, 4], vec![5]]);
        // Unordered: everything that fits shares a slot.
        let (mut next, mut none) = (0usize, Vec::new());
        let (b, _) = next_batch(&pieces, &mut next, 1000, None, &mut none, 0).unwrap();
        assert_eq!(b.len(), 6);
        // Offsets are 16-byte aligned and do not overlap.
        assert!(b
            .windows(2)
            .all(|w| w[1].off >= w[0].off + pieces[w[0].idx].len() && w[1].off % 16 == 0));
    }
}
