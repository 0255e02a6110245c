//! The fused job on one device: chunk boundaries and each chunk's keyed
//! BLAKE3 over the same device-resident bytes. Host segments cross the link
//! once (pinned slots, then a device-to-device copy into one job buffer);
//! `gear_candidates` marks candidates, `cdc_compact` packs the nonzero
//! bitmap words, the host resolves boundaries (`cdc_resolve`), and the
//! BLAKE3 kernels hash every chunk where it lies. Only candidate words,
//! boundary heads of device-resident segments and digests come back.

use std::collections::HashMap;
use std::ffi::c_void;

use rayon::prelude::*;

use super::blake3::{hash_all, Input};
use super::runtime::{download, DevError, Device, DeviceBuffer};
use super::stage::{as_bytes, copy_in, cut, upload_on};
use crate::cdc_resolve::{masks, resolve, Candidates, SparseHits};
use crate::chunking::ChunkParams;
use crate::job::{ChunkSpan, DigestedChunk};
use crate::types::Blake3Key;

const BLOCK: u32 = 256;
/// Positions per `gear_candidates` thread (kernels/cdc.cu).
const SPAN: u64 = 256;
/// Segment bytes resident on the device at once (plus a quarter of that
/// for candidate bitmaps and 1/32 for chaining values). 1 GiB: a 4 GiB
/// group (4 x 1 GiB segments) hit an illegal address on an H200
/// (2026-11-22, not yet found; 4 x 256 MiB passed), so groups stay small
/// until that is understood.
const GROUP_BYTES: usize = 1 << 30;
/// Bytes of a boundary head window (`cdc_gather` copies up to 64).
const HEAD: usize = 63;

/// `CdcHit` of kernels/cdc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CdcHit {
    word: u32,
    s: u32,
    l: u32,
}

/// `CdcWindow` of kernels/cdc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CdcWindow {
    offset: u64,
    len: u32,
    pad: u32,
}

/// Chunks and digests of each input, in order.
pub(crate) fn run(
    dev: &Device,
    params: &ChunkParams,
    key: &Blake3Key,
    inputs: &[Input<'_>],
) -> Result<Vec<Vec<DigestedChunk>>, DevError> {
    dev.bind()?;
    let mut out = Vec::with_capacity(inputs.len());
    let mut start = 0;
    while start < inputs.len() {
        let mut end = start;
        let mut bytes = 0usize;
        while end < inputs.len() && (end == start || bytes + inputs[end].len() <= GROUP_BYTES) {
            bytes += inputs[end].len();
            end += 1;
        }
        out.extend(run_group(dev, params, key, &inputs[start..end])?);
        start = end;
    }
    Ok(out)
}

/// One segment on the device: where its bytes are, and its host copy if any.
struct Placed<'a> {
    ptr: u64,
    len: usize,
    host: Option<&'a [u8]>,
    /// First bitmap word of the segment in the job-wide bitmaps.
    word: usize,
}

fn run_group(
    dev: &Device,
    params: &ChunkParams,
    key: &Blake3Key,
    inputs: &[Input<'_>],
) -> Result<Vec<Vec<DigestedChunk>>, DevError> {
    let (placed, _resident) = place(dev, inputs)?;
    let words: usize = placed.iter().map(|p| p.len.div_ceil(32)).sum();
    let (hits_s, hits_l) = candidates(dev, params, &placed, words)?;
    let heads = gather_heads(dev, params, &placed, &hits_s, &hits_l)?;
    let copies = placed
        .iter()
        .zip(hits_s.iter().zip(&hits_l))
        .map(|(p, (s, l))| {
            if !wants_copy(p, s, l) {
                return Ok(None);
            }
            let mut v = vec![0u8; p.len];
            download(&mut v, p.ptr)?;
            Ok(Some(v))
        })
        .collect::<Result<Vec<_>, DevError>>()?;

    // Boundaries, segments in parallel on the host.
    let spans: Vec<Result<Vec<ChunkSpan>, DevError>> = placed
        .par_iter()
        .zip(hits_s.par_iter().zip(&hits_l))
        .zip(heads.par_iter().zip(&copies))
        .map(|((p, (s, l)), (heads, copy))| {
            let mut failed = None;
            let spans = resolve(params, p.len, s, l, |at, k| {
                if let Some(b) = p.host.or(copy.as_deref()) {
                    return b[at..at + k].to_vec();
                }
                if let Some(h) = heads.get(&at).filter(|h| h.len() >= k) {
                    return h[..k].to_vec();
                }
                // Not prefetched (a cut at the maximum size, or inside a
                // head window): read it from the device.
                // (On a rayon worker: bind the device's context first.)
                let mut v = vec![0u8; k];
                if let Err(e) = dev
                    .bind()
                    .and_then(|()| download(&mut v, p.ptr + at as u64))
                {
                    failed = Some(e);
                }
                v
            });
            match failed {
                Some(e) => Err(e),
                None => Ok(spans),
            }
        })
        .collect();
    let spans = spans.into_iter().collect::<Result<Vec<_>, _>>()?;
    dev.bind()?;

    // Every chunk of every segment is one BLAKE3 input, read in place.
    let chunk_inputs: Vec<Input<'_>> = placed
        .iter()
        .zip(&spans)
        .flat_map(|(p, spans)| {
            spans.iter().map(move |s| Input::Device {
                ptr: p.ptr + s.offset,
                len: s.len as usize,
            })
        })
        .collect();
    let mut digests = hash_all(dev, Some(key), &chunk_inputs)?.into_iter();
    Ok(spans
        .into_iter()
        .map(|spans| {
            spans
                .into_iter()
                .map(|span| DigestedChunk {
                    span,
                    digest: digests.next().expect("one digest per chunk"),
                })
                .collect()
        })
        .collect())
}

/// Device addresses for every input: host bytes are copied through the
/// pinned slots into one job buffer (returned, to keep it alive).
fn place<'a>(
    dev: &Device,
    inputs: &[Input<'a>],
) -> Result<(Vec<Placed<'a>>, Option<DeviceBuffer>), DevError> {
    let mut host_len = 0usize;
    let mut offsets = Vec::with_capacity(inputs.len());
    for i in inputs {
        offsets.push(host_len);
        if let Input::Host(b) = i {
            host_len = (host_len + b.len()).next_multiple_of(16);
        }
    }
    let resident = if host_len > 0 {
        Some(dev.alloc(host_len)?)
    } else {
        None
    };
    let base = resident.as_ref().map_or(0, |r| r.ptr);
    let mut word = 0usize;
    let mut placed = Vec::with_capacity(inputs.len());
    let mut pieces: Vec<&[u8]> = Vec::new();
    let mut targets: Vec<u64> = Vec::new();
    for (i, &off) in inputs.iter().zip(&offsets) {
        let (ptr, len, host) = match *i {
            Input::Host(b) => {
                for (at, piece) in cut(b) {
                    if !piece.is_empty() {
                        pieces.push(piece);
                        targets.push(base + (off + at) as u64);
                    }
                }
                (base + off as u64, b.len(), Some(b))
            }
            Input::Device { ptr, len } => (ptr, len, None),
        };
        placed.push(Placed {
            ptr,
            len,
            host,
            word,
        });
        word += len.div_ceil(32);
    }
    copy_in(dev, &pieces, &targets)?;
    Ok((placed, resident))
}

/// Candidate positions of each segment, small and large mask.
fn candidates(
    dev: &Device,
    params: &ChunkParams,
    placed: &[Placed<'_>],
    words: usize,
) -> Result<(Vec<Hits>, Vec<Hits>), DevError> {
    let empty = || placed.iter().map(|_| Hits::Sparse(SparseHits::default()));
    if words == 0 {
        return Ok((empty().collect(), empty().collect()));
    }
    let (mask_s, mask_l) = masks(params);
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;
    let bitmaps = dev.alloc(words * 8)?;
    let (all_s, all_l) = (bitmaps.ptr, bitmaps.ptr + words as u64 * 4);
    for p in placed.iter().filter(|p| p.len > 0) {
        let (mut d, mut n, mut ms, mut ml, mut hs, mut hl) = (
            p.ptr,
            p.len as u64,
            mask_s,
            mask_l,
            all_s + p.word as u64 * 4,
            all_l + p.word as u64 * 4,
        );
        let mut args = [
            &mut d as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
            &mut ms as *mut u64 as *mut c_void,
            &mut ml as *mut u64 as *mut c_void,
            &mut hs as *mut u64 as *mut c_void,
            &mut hl as *mut u64 as *mut c_void,
        ];
        let grid = dev.grid_for((p.len as u64).div_ceil(SPAN), BLOCK);
        // SAFETY: parameters match gear_candidates; p.ptr holds p.len bytes;
        // the segment's bitmap words lie inside `bitmaps`.
        unsafe { dev.launch("gear_candidates", grid, BLOCK, 0, stream, &mut args)? };
    }
    // Sparse hits (large average sizes) come back as a list of nonzero
    // words; dense ones as the bitmaps themselves.
    let cap = (words / 8).max(1024);
    let list = dev.alloc(cap * std::mem::size_of::<CdcHit>())?;
    let count = dev.alloc(8)?;
    upload_on(stream, count.ptr, &[0u8; 8])?;
    let (mut s, mut l, mut w, mut o, mut c, mut k) =
        (all_s, all_l, words as u64, list.ptr, count.ptr, cap as u64);
    let mut args = [
        &mut s as *mut u64 as *mut c_void,
        &mut l as *mut u64 as *mut c_void,
        &mut w as *mut u64 as *mut c_void,
        &mut o as *mut u64 as *mut c_void,
        &mut c as *mut u64 as *mut c_void,
        &mut k as *mut u64 as *mut c_void,
    ];
    // SAFETY: parameters match cdc_compact; both bitmaps hold `words`
    // words, the list `cap` entries, count one u64.
    unsafe {
        dev.launch(
            "cdc_compact",
            dev.grid_for(words as u64, BLOCK),
            BLOCK,
            0,
            stream,
            &mut args,
        )?
    };
    super::runtime::sync(stream)?;
    let mut n = [0u8; 8];
    download(&mut n, count.ptr)?;
    let n = u64::from_le_bytes(n) as usize;
    if n > cap {
        let mut bits = vec![0u8; words * 8];
        download(&mut bits, bitmaps.ptr)?;
        let all: Vec<u32> = bits
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let per = |half: &[u32]| -> Vec<Hits> {
            placed
                .iter()
                .map(|p| Hits::Dense(half[p.word..p.word + p.len.div_ceil(32)].to_vec()))
                .collect()
        };
        return Ok((per(&all[..words]), per(&all[words..])));
    }
    let mut raw = vec![CdcHit::default(); n];
    if n > 0 {
        // SAFETY: CdcHit is plain repr(C) data; `raw` holds n entries.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                raw.as_mut_ptr() as *mut u8,
                n * std::mem::size_of::<CdcHit>(),
            )
        };
        download(bytes, list.ptr)?;
    }
    let first_words: Vec<usize> = placed.iter().map(|p| p.word).collect();
    Ok(split_sparse(&first_words, raw))
}

/// `cdc_compact`'s unordered entries as sorted sparse hits per segment;
/// `first_words[i]` is segment i's first word in the job-wide bitmaps.
fn split_sparse(first_words: &[usize], mut raw: Vec<CdcHit>) -> (Vec<Hits>, Vec<Hits>) {
    let empty = || {
        first_words
            .iter()
            .map(|_| Hits::Sparse(SparseHits::default()))
            .collect::<Vec<_>>()
    };
    let (mut out_s, mut out_l) = (empty(), empty());
    raw.sort_unstable_by_key(|h| h.word);
    for h in raw {
        // The segment holding this word: the last one starting at or before
        // it (empty segments own no word).
        let seg = first_words.partition_point(|&w| w <= h.word as usize) - 1;
        let local = h.word - first_words[seg] as u32;
        for (bits, out) in [(h.s, &mut out_s), (h.l, &mut out_l)] {
            if let (true, Hits::Sparse(sp)) = (bits != 0, &mut out[seg]) {
                sp.words.push(local);
                sp.bits.push(bits);
            }
        }
    }
    (out_s, out_l)
}

/// Where the resolver will read head bytes of a segment of `len` bytes if
/// every chunk starts at 0 or at a candidate: `start + hash_start`.
fn head_positions(hash_start: usize, len: usize, s: &SparseHits, l: &SparseHits) -> Vec<usize> {
    let mut at: Vec<usize> = std::iter::once(0)
        .chain(
            [s, l]
                .into_iter()
                .flat_map(|h| h.words.iter().zip(&h.bits))
                .flat_map(|(&w, &bits)| {
                    (0..32)
                        .filter(move |b| bits >> b & 1 == 1)
                        .map(move |b| w as usize * 32 + b)
                }),
        )
        .map(|start| start + hash_start)
        .filter(|&at| at < len)
        .collect();
    at.sort_unstable();
    at.dedup();
    at
}

/// One mask's candidates of one segment.
enum Hits {
    Dense(Vec<u32>),
    Sparse(SparseHits),
}

impl Candidates for Hits {
    fn first(&self, from: usize, to: usize) -> Option<usize> {
        match self {
            Hits::Dense(d) => Candidates::first(&d[..], from, to),
            Hits::Sparse(s) => s.first(from, to),
        }
    }
}

/// Whether the resolver of a device-resident segment with these candidates
/// should read a host copy of the whole segment: dense candidates, where
/// head windows (64 bytes a candidate) would outweigh 1/16 of the bytes.
fn wants_copy(p: &Placed<'_>, s: &Hits, l: &Hits) -> bool {
    let ones = |h: &Hits| match h {
        Hits::Dense(_) => None,
        Hits::Sparse(sp) => Some(
            sp.bits
                .iter()
                .map(|b| b.count_ones() as usize)
                .sum::<usize>(),
        ),
    };
    let heads = match (ones(s), ones(l)) {
        (Some(a), Some(b)) => (a + b + 1).saturating_mul(64),
        _ => usize::MAX,
    };
    p.host.is_none() && p.len > 0 && heads > p.len / 16
}

/// For device-resident segments with sparse candidates: the head bytes the
/// resolver reads after every chunk start that is a candidate (and after
/// 0), fetched in one gather and one download.
fn gather_heads(
    dev: &Device,
    params: &ChunkParams,
    placed: &[Placed<'_>],
    hits_s: &[Hits],
    hits_l: &[Hits],
) -> Result<Vec<HashMap<usize, Vec<u8>>>, DevError> {
    let hash_start = (params.min() / 2 * 2) as usize;
    let mut windows: Vec<CdcWindow> = Vec::new();
    let mut owners: Vec<(usize, usize)> = Vec::new();
    for (i, p) in placed.iter().enumerate() {
        let (Hits::Sparse(s), Hits::Sparse(l)) = (&hits_s[i], &hits_l[i]) else {
            continue;
        };
        if p.host.is_some() || p.len == 0 || wants_copy(p, &hits_s[i], &hits_l[i]) {
            continue;
        }
        for at in head_positions(hash_start, p.len, s, l) {
            windows.push(CdcWindow {
                offset: 0, // set below, from the common base
                len: HEAD.min(p.len - at) as u32,
                pad: 0,
            });
            owners.push((i, at));
        }
    }
    let mut heads: Vec<HashMap<usize, Vec<u8>>> = placed.iter().map(|_| HashMap::new()).collect();
    if windows.is_empty() {
        return Ok(heads);
    }
    // Offsets are relative to the lowest device-resident address, so the
    // kernel reads with one base pointer.
    let base = placed
        .iter()
        .filter(|p| p.host.is_none() && p.len > 0)
        .map(|p| p.ptr)
        .min()
        .unwrap_or(0);
    for (w, &(i, at)) in windows.iter_mut().zip(&owners) {
        w.offset = placed[i].ptr - base + at as u64;
    }
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;
    let descs = dev.alloc(std::mem::size_of_val(windows.as_slice()))?;
    upload_on(stream, descs.ptr, as_bytes(&windows))?;
    let out = dev.alloc(windows.len() * 64)?;
    let (mut d, mut w, mut n, mut o) = (base, descs.ptr, windows.len() as u32, out.ptr);
    let mut args = [
        &mut d as *mut u64 as *mut c_void,
        &mut w as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
        &mut o as *mut u64 as *mut c_void,
    ];
    // SAFETY: parameters match cdc_gather; every window lies inside its
    // caller-guaranteed segment; `out` holds 64 bytes per window.
    unsafe {
        dev.launch(
            "cdc_gather",
            dev.grid_for(windows.len() as u64 * 64, BLOCK),
            BLOCK,
            0,
            stream,
            &mut args,
        )?
    };
    super::runtime::sync(stream)?;
    let mut bytes = vec![0u8; windows.len() * 64];
    download(&mut bytes, out.ptr)?;
    for ((w, &(i, at)), b) in windows.iter().zip(&owners).zip(bytes.chunks(64)) {
        heads[i].insert(at, b[..w.len as usize].to_vec());
    }
    Ok(heads)
}

#[cfg(test)]
mod tests {
    //! The host half of the fused job without a GPU: job-wide candidate
    //! bitmaps (computed here as the kernel does), compacted and shuffled as
    //! `cdc_compact` leaves them, split per segment and resolved with head
    //! bytes served only from the prefetched windows where possible.
    use super::*;
    use crate::cdc_resolve::candidates;
    use fastcdc::v2020::FastCDC;
    use rand::{RngCore, SeedableRng};

    #[test]
    fn split_hits_and_head_windows_give_fastcdc_boundaries() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let mut random = vec![0u8; 2 << 20];
        rng.fill_bytes(&mut random);
        let mut text = Vec::new();
        while text.len() < (1 << 20) {
            text.extend_from_slice(include_bytes!("chunk_digest.rs"));
        }
        let period: Vec<u8> = (0..300_000u32).map(|k| (k % 13) as u8 * 19).collect();
        let segs: Vec<&[u8]> = vec![
            &random,
            &[],
            &text,
            &random[..1],
            &period,
            &[],
            &random[..70_001],
        ];
        for p in [
            ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
            ChunkParams::new(4096, 16384, 65536, 1).unwrap(),
            ChunkParams::new(64, 256, 1024, 3).unwrap(),
        ] {
            let (ms, ml) = masks(&p);
            let mut first_words = Vec::new();
            let mut raw = Vec::new();
            let mut word = 0usize;
            for d in &segs {
                first_words.push(word);
                let (s, l) = candidates(d, ms, ml);
                for (w, (&s, &l)) in s.iter().zip(&l).enumerate() {
                    if s | l != 0 {
                        raw.push(CdcHit {
                            word: (word + w) as u32,
                            s,
                            l,
                        });
                    }
                }
                word += d.len().div_ceil(32);
            }
            raw.reverse(); // the kernel's order is arbitrary
            let (hs, hl) = split_sparse(&first_words, raw);
            let hash_start = (p.min() / 2 * 2) as usize;
            for (i, d) in segs.iter().enumerate() {
                let (Hits::Sparse(s), Hits::Sparse(l)) = (&hs[i], &hl[i]) else {
                    unreachable!("split_sparse gives sparse hits")
                };
                let prefetched: std::collections::HashSet<usize> =
                    head_positions(hash_start, d.len(), s, l)
                        .into_iter()
                        .collect();
                let (mut reads, mut misses) = (0, 0);
                let got = resolve(&p, d.len(), &hs[i], &hl[i], |at, k| {
                    reads += 1;
                    misses += usize::from(!prefetched.contains(&at));
                    assert!(k <= HEAD);
                    d[at..at + k].to_vec()
                });
                let want: Vec<ChunkSpan> =
                    FastCDC::with_level(d, p.min(), p.avg(), p.max(), p.normalization())
                        .map(|c| ChunkSpan {
                            offset: c.offset as u64,
                            len: c.length as u32,
                        })
                        .collect();
                assert_eq!(got, want, "{p:?} segment {i}");
                // Only cuts at the maximum size (or inside a head window)
                // start where no candidate is.
                let forced = want.iter().filter(|c| c.len == p.max()).count();
                assert!(
                    misses <= forced + reads / 4,
                    "{p:?} segment {i}: {misses} of {reads} heads missed, {forced} forced cuts"
                );
            }
        }
    }
}
