//! Serial hashes (SHA-256, MD5, CRCs) of page-locked host segments with no
//! CPU copy: every round of the stripe (piece r of each segment) goes by 2D
//! DMA straight from the caller's memory into one of a few wide device
//! buffers, and the whole job is queued before the first wait.
//!
//! Why wide: the DMA engine pays per row of a 2D copy. Through the 64 MiB
//! staging slots, 4096 x 1 MiB segments make 16 KiB rows, which crossed at
//! ~34 GB/s on an H100 (link 55); a 256 MiB round makes 64 KiB rows.
//! Device memory is plentiful; the pinned slots are not needed at all.

use std::ffi::c_void;

use cudarc::driver::result as cu;
use cudarc::driver::sys;

use super::abi::SerialPiece;
use super::launch::{Kernel, SerialArgs};
use super::runtime::{err, page_locked_range, sync, upload, DevError, Device, DeviceBuffer};
use super::serial::{launch, piece_for, stripe};
use super::stage::{as_bytes, copy_run, strided_runs, Staged, StridedRun};

/// Jobs smaller than this take the staging slots (setup would dominate).
const MIN_JOB_BYTES: usize = 64 << 20;
/// Pieces outside 2D runs are copied one call each; past this many per job
/// (segments of many different lengths) the slots' packing is faster.
const MAX_SINGLE_COPIES: usize = 512;

/// Bytes per round (`GVAULT_SERIAL_WIDE_MIB`, 0 turns the path off).
fn wide_bytes() -> usize {
    crate::tuning::tuning()
        .serial_wide_mib
        .map_or(256 << 20, |m| m << 20)
}

/// Whether every segment lies in page-locked memory (one driver query per
/// allocation, not per segment: 4096 queries cost ~10 ms).
fn all_page_locked(segs: &[(u32, &[u8])]) -> bool {
    let mut known: Option<(usize, usize)> = None;
    segs.iter().all(|(_, b)| {
        let (lo, hi) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        if known.is_some_and(|(s, n)| lo >= s && hi <= s + n) {
            return true;
        }
        known = page_locked_range(b.as_ptr());
        known.is_some_and(|(s, n)| lo >= s && hi <= s + n)
    })
}

/// One round: its pieces at their offsets in a wide buffer, its 2D runs,
/// and the pieces left to copy one by one.
struct Round {
    first: usize,
    batch: Vec<Staged>,
    runs: Vec<StridedRun>,
    singles: Vec<usize>,
}

/// Cuts the stripe into rounds (a new round starts when the segment number
/// stops rising) and finds each round's 2D runs.
fn rounds(pieces: &[&[u8]], descs: &[SerialPiece]) -> Vec<Round> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < pieces.len() {
        let mut end = start + 1;
        while end < pieces.len() && descs[end].seg > descs[end - 1].seg {
            end += 1;
        }
        let mut off = 0usize;
        let batch: Vec<Staged> = (start..end)
            .map(|idx| {
                let st = Staged { idx, off };
                off = (off + pieces[idx].len()).next_multiple_of(16);
                st
            })
            .collect();
        let none = vec![false; batch.len()];
        let (runs, in_run) = strided_runs(&batch, pieces, &none, |_, _| true);
        let singles = (0..batch.len()).filter(|&i| !in_run[i]).collect();
        out.push(Round {
            first: start,
            batch,
            runs,
            singles,
        });
        start = end;
    }
    out
}

/// Hashes `segs` this way if they qualify (all page-locked, large enough,
/// regular enough); returns false, having done nothing, if not.
pub(super) fn hash(
    dev: &Device,
    kernel: Kernel<SerialArgs>,
    segs: &[(u32, &[u8])],
    state: u64,
    digests: u64,
) -> Result<bool, DevError> {
    let wide = wide_bytes();
    let total: usize = segs.iter().map(|(_, b)| b.len()).sum();
    if wide == 0 || total < MIN_JOB_BYTES || !all_page_locked(segs) {
        return Ok(false);
    }
    let (pieces, mut descs) = stripe(segs, piece_for(segs.len(), wide));
    let rounds = rounds(&pieces, &descs);
    let singles: usize = rounds.iter().map(|r| r.singles.len()).sum();
    let fits = rounds.iter().all(|r| {
        r.batch
            .last()
            .is_some_and(|st| st.off + pieces[st.idx].len() <= wide)
    });
    if singles > MAX_SINGLE_COPIES || !fits {
        return Ok(false);
    }
    for r in &rounds {
        for st in &r.batch {
            descs[st.idx].offset = st.off as u64;
        }
    }
    let desc_buf = dev.alloc(std::mem::size_of_val(descs.as_slice()))?;
    upload(desc_buf.ptr, as_bytes(&descs))?;
    let slots = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?;
    let streams: Vec<sys::CUstream> = slots.iter().map(|s| s.stream).collect();
    // One wide buffer per slot stream, rotating together, so stream order
    // keeps each copy behind the kernel that last read its buffer.
    let buffers = (0..streams.len().min(rounds.len()))
        .map(|_| dev.alloc(wide))
        .collect::<Result<Vec<DeviceBuffer>, DevError>>()?;
    let event = cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
        .map_err(|e| err("creating event", e))?;
    let queued = (|| {
        for (k, round) in rounds.iter().enumerate() {
            let stream = streams[k % streams.len()];
            let buf = buffers[k % streams.len()].ptr;
            let round_pieces = &pieces[round.first..round.first + round.batch.len()];
            let local: Vec<Staged> = round
                .batch
                .iter()
                .map(|st| Staged {
                    idx: st.idx - round.first,
                    off: st.off,
                })
                .collect();
            // SAFETY: all pieces are page-locked (checked) and borrowed until
            // every stream is synchronised below; `buf` holds `wide` bytes and
            // every offset + length fits (checked: `fits`).
            unsafe {
                for run in &round.runs {
                    copy_run(buf, stream, &local, round_pieces, run)?;
                }
                for &i in &round.singles {
                    let p = round_pieces[i];
                    sys::cuMemcpyHtoDAsync_v2(
                        buf + local[i].off as u64,
                        p.as_ptr() as *const c_void,
                        p.len(),
                        stream,
                    )
                    .result()
                    .map_err(|e| err("copy-in", e))?;
                }
                if k > 0 {
                    // Segment state carries over: round k after round k - 1.
                    cu::stream::wait_event(
                        stream,
                        event,
                        sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                    )
                    .map_err(|e| err("stream wait", e))?;
                }
            }
            let desc_at = desc_buf.ptr + (round.first * std::mem::size_of::<SerialPiece>()) as u64;
            launch(
                dev,
                kernel,
                buf,
                desc_at,
                round.batch.len(),
                state,
                digests,
                stream,
            )?;
            // SAFETY: event and stream are live.
            unsafe { cu::event::record(event, stream) }.map_err(|e| err("event record", e))?;
        }
        Ok(())
    })();
    // Every stream is drained before the borrowed memory or buffers go, on
    // success and on error alike.
    let mut drained = Ok(());
    for &s in &streams {
        if let Err(e) = sync(s) {
            drained = drained.and(Err(e));
        }
    }
    // SAFETY: all streams that used the event are synchronised.
    unsafe {
        let _ = cu::event::destroy(event);
    }
    queued.and(drained).map(|()| true)
}

#[cfg(test)]
mod tests {
    use super::rounds;
    use crate::gpu::serial::stripe;

    #[test]
    fn equal_segments_make_one_run_per_round_and_odd_ones_single_copies() {
        let (n, len) = (80usize, 40_000usize);
        let buf = vec![7u8; n * len + 100];
        let mut segs: Vec<(u32, &[u8])> = (0..n)
            .map(|i| (i as u32, &buf[i * len..(i + 1) * len]))
            .collect();
        segs.push((n as u32, &buf[n * len..]));
        let (pieces, descs) = stripe(&segs, 16 << 10);
        let rounds = rounds(&pieces, &descs);
        assert_eq!(rounds.len(), 3, "40 000 bytes in 16 KiB pieces");
        let covered: usize = rounds.iter().map(|r| r.batch.len()).sum();
        assert_eq!(covered, pieces.len());
        // Rounds 0 and 1: 80 pieces of 16 KiB at a constant stride (1.25
        // MiB, worth a 2D copy); the 100-byte segment rides alone in round 0.
        for r in &rounds[..2] {
            assert_eq!(r.runs.len(), 1);
            assert_eq!(r.runs[0].count, n);
            assert_eq!(r.runs[0].pitch, len);
        }
        assert_eq!(rounds[0].singles, vec![n]);
        assert!(rounds[1].singles.is_empty());
        // Round 2: 80 tails of 7232 bytes, too little for a 2D copy.
        assert!(rounds[2].runs.is_empty());
        assert_eq!(rounds[2].singles.len(), n);
        for r in &rounds {
            for w in r.batch.windows(2) {
                assert!(w[1].off >= w[0].off + pieces[w[0].idx].len());
                assert_eq!(w[1].off % 16, 0);
            }
        }
    }
}
