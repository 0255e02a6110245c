//! The CPU's share of a host-data pipeline: parallel copies between user
//! memory and the pinned staging slots. One core cannot feed the link, so
//! copies are cut into pieces spread over the rayon pool.
//!
//! Staged bytes are not read again by the CPU (the DMA engine takes them,
//! or the user gets them back long after the slot is reused), so the copy
//! writes them with non-temporal stores: a plain copy first reads every
//! destination line into the cache (read-for-ownership), so each byte costs
//! three memory transfers instead of two, and host memory bandwidth is what
//! bounds packing on a 16-core host (SHA-256 over 4096 x 1 MiB: ~50 GB/s
//! of packing against a 55 GB/s link). `GVAULT_STAGE_COPY=memcpy` restores
//! plain copies, for side-by-side measurement.

use std::sync::OnceLock;

use rayon::prelude::*;

/// Work per rayon task: large enough to amortise the task, small enough to
/// spread one slot over every core.
const CHUNK: usize = 4 << 20;

/// Batches smaller than this are copied with plain stores.
const STREAM_MIN: usize = 8 << 20;

/// One copy: `len` bytes from `src` to `dst`, which must be valid, live for
/// the call, and not overlap each other or any other job's memory.
pub(crate) type CopyJob = (*mut u8, *const u8, usize);

/// Copies every job, in parallel, with the configured store kind.
pub(crate) fn copy_parallel(jobs: &[CopyJob]) {
    struct Raw(*mut u8, *const u8, usize);
    // SAFETY (Send/Sync): each Raw names disjoint live memory (the caller's
    // contract on `jobs`), so moving it to another thread races with nothing.
    unsafe impl Send for Raw {}
    unsafe impl Sync for Raw {}
    let parts: Vec<Raw> = jobs
        .iter()
        .flat_map(|&(d, s, n)| {
            (0..n).step_by(CHUNK).map(move |o| {
                // SAFETY: o < n, so both offsets stay inside their jobs.
                unsafe { Raw(d.add(o), s.add(o), CHUNK.min(n - o)) }
            })
        })
        .collect();
    // A small batch stays in cache until it is used (the DMA engine snoops
    // it, or the caller reads its results next): plain stores there.
    let total: usize = jobs.iter().map(|j| j.2).sum();
    let streaming = total >= STREAM_MIN && streaming();
    parts.par_iter().for_each(|r| {
        // SAFETY: dst and src are valid for len bytes and do not overlap
        // (one is user memory, the other a pinned slot).
        unsafe {
            if streaming {
                copy_streaming(r.0, r.1, r.2)
            } else {
                std::ptr::copy_nonoverlapping(r.1, r.0, r.2)
            }
        }
    });
}

fn streaming() -> bool {
    static MODE: OnceLock<bool> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("GVAULT_STAGE_COPY").as_deref() {
        Ok("memcpy") => false,
        Ok("stream") | Err(_) => true,
        Ok(other) => {
            eprintln!(
                "gvault: GVAULT_STAGE_COPY={other:?} is neither \"stream\" nor \"memcpy\"; using stream"
            );
            true
        }
    })
}

/// `len` bytes from `src` to `dst` with non-temporal stores for the
/// 16-byte-aligned middle; the stores are fenced before returning, so a
/// DMA queued after this call (on any thread, ordered by the pool's join)
/// sees them.
///
/// # Safety
/// `src` is readable and `dst` writable for `len` bytes; they do not overlap.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
    let head = ((16 - (dst as usize & 15)) & 15).min(len);
    std::ptr::copy_nonoverlapping(src, dst, head);
    let mut i = head;
    // SSE2 is part of x86_64, so these need no feature detection; `dst + i`
    // is 16-byte aligned from here on, as _mm_stream_si128 requires.
    while i + 64 <= len {
        let s = src.add(i) as *const __m128i;
        let d = dst.add(i) as *mut __m128i;
        let (a, b, c, e) = (
            _mm_loadu_si128(s),
            _mm_loadu_si128(s.add(1)),
            _mm_loadu_si128(s.add(2)),
            _mm_loadu_si128(s.add(3)),
        );
        _mm_stream_si128(d, a);
        _mm_stream_si128(d.add(1), b);
        _mm_stream_si128(d.add(2), c);
        _mm_stream_si128(d.add(3), e);
        i += 64;
    }
    std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
    _mm_sfence();
}

/// Elsewhere a plain copy: the store kind is an x86 optimisation.
///
/// # Safety
/// As for the x86_64 version.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_streaming(dst: *mut u8, src: *const u8, len: usize) {
    std::ptr::copy_nonoverlapping(src, dst, len)
}

#[cfg(test)]
mod tests {
    use super::{copy_parallel, copy_streaming, CopyJob};

    #[test]
    fn streaming_copy_is_exact_at_every_alignment_and_length() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for dst_off in 0..17 {
            for src_off in [0usize, 1, 5, 16] {
                for len in [0usize, 1, 15, 16, 63, 64, 65, 127, 1000, 3000] {
                    let mut dst = vec![0xEEu8; 3100];
                    // SAFETY: both ranges are in bounds and distinct vectors.
                    unsafe {
                        copy_streaming(
                            dst.as_mut_ptr().add(dst_off),
                            src.as_ptr().add(src_off),
                            len,
                        )
                    };
                    assert_eq!(&dst[dst_off..dst_off + len], &src[src_off..src_off + len]);
                    assert!(dst[..dst_off].iter().all(|&b| b == 0xEE));
                    assert!(dst[dst_off + len..].iter().all(|&b| b == 0xEE));
                }
            }
        }
    }

    #[test]
    fn parallel_copy_covers_jobs_larger_than_a_chunk() {
        let n = (9 << 20) + 77;
        let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut a = vec![0u8; n];
        let mut b = vec![0u8; 100];
        let jobs: Vec<CopyJob> = vec![
            (a.as_mut_ptr(), src.as_ptr(), n),
            (b.as_mut_ptr(), src.as_ptr().wrapping_add(3), 100),
        ];
        copy_parallel(&jobs);
        assert_eq!(a, src);
        assert_eq!(&b[..], &src[3..103]);
    }
}
