//! Content-defined chunk boundaries with the `fastcdc` crate's 2020
//! algorithm (normalized chunking), and the fused job that then hashes each
//! chunk (keyed BLAKE3, and CRC-32C when asked), chunks in parallel.
//!
//! A segment is chunked by the crate itself, serially, unless the job
//! leaves it several threads and it is large. Then it is cut into pieces
//! whose candidate positions (gear hashes of the 64 bytes ending there that
//! pass either mask) are found on all threads, and the boundaries are
//! resolved in order over those sparse candidates by `cdc_resolve::resolve`,
//! the walk that already turns the GPU's candidates into exactly the
//! crate's boundaries. The crate skips the first `min` bytes of every
//! chunk and the scan cannot (no chunk start is known before the walk), so
//! the scan hashes more bytes: with the default sizes (512 KiB minimum,
//! ~1.1 MiB mean) about twice as many. Its loop runs four independent hash
//! chains at once where the crate runs one, which wins back part of that;
//! the rest is the price of using idle threads, so the serial path stays
//! where the job's segments already keep every thread busy.

use fastcdc::v2020::{get_gear_with_seed, FastCDC};
use rayon::prelude::*;

use crate::cdc_resolve::{self, Positions};
use crate::chunking::ChunkParams;
use crate::job::{ChunkSpan, DigestedChunk};
use crate::types::Blake3Key;

/// The smallest piece the parallel scan makes of a segment (unless the
/// backend's split size is smaller, as in tests): handing a piece to a
/// thread costs a few microseconds, scanning 64 KiB about 40.
const MIN_PIECE: usize = 64 << 10;
/// Pieces per thread the segment may use: more pieces than threads keep
/// the threads evenly loaded when pieces run at different speeds.
const PIECES_PER_THREAD: usize = 4;
/// A segment is cut only when it has at least this many bytes (or the
/// backend's split size, if smaller) and at least `MIN_CHUNKS` minimum
/// chunks: below, the crate's serial walk, which skips each chunk's first
/// `min` bytes, does less work than the threads would share.
const PARALLEL_MIN_BYTES: usize = 1 << 20;
const MIN_CHUNKS: usize = 4;

/// How many threads a segment's chunking may use, and the size of its
/// pieces.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spread {
    /// Threads the job leaves to each segment (1: the serial chunker).
    ways: usize,
    /// The backend's split size: the largest piece.
    split: usize,
}

impl Spread {
    /// One segment of a job of `segments` on `threads` threads (`inline`:
    /// the job runs on the calling thread), cut at most every `split` bytes.
    pub(super) fn new(threads: usize, segments: usize, inline: bool, split: usize) -> Self {
        let ways = if inline { 1 } else { threads / segments.max(1) };
        Spread {
            ways,
            split: split.max(1),
        }
    }

    /// The piece length for `len` bytes chunked with `params`, or `None`
    /// for the serial chunker.
    fn piece(&self, params: &ChunkParams, len: usize) -> Option<usize> {
        let min = params.min() as usize;
        if self.ways < 2 || len < min.saturating_mul(MIN_CHUNKS) || len > u32::MAX as usize {
            return None;
        }
        let piece = len
            .div_ceil(self.ways * PIECES_PER_THREAD)
            .clamp(self.split.min(MIN_PIECE), self.split);
        (len >= 2 * piece && len >= self.split.min(PARALLEL_MIN_BYTES)).then_some(piece)
    }
}

pub(super) fn boundaries(params: &ChunkParams, data: &[u8], spread: Spread) -> Vec<ChunkSpan> {
    match spread.piece(params, data.len()) {
        Some(piece) => parallel_boundaries(params, data, piece),
        None => serial_boundaries(params, data),
    }
}

/// The crate's own walk.
fn serial_boundaries(params: &ChunkParams, data: &[u8]) -> Vec<ChunkSpan> {
    FastCDC::with_level(
        data,
        params.min(),
        params.avg(),
        params.max(),
        params.normalization(),
    )
    .map(|c| ChunkSpan {
        offset: c.offset as u64,
        len: c.length as u32,
    })
    .collect()
}

/// Candidates of `piece`-byte pieces on the pool's threads, then the
/// crate's size rules over them in order.
fn parallel_boundaries(params: &ChunkParams, data: &[u8], piece: usize) -> Vec<ChunkSpan> {
    let (gear, _) = get_gear_with_seed(0);
    let masks = cdc_resolve::masks(params);
    // No chunk ends before the first chunk's hash start.
    let from = (params.min() as usize / 2 * 2).min(data.len());
    let pieces: Vec<Hits> = (from..data.len())
        .step_by(piece)
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|at| scan(data, at, (at + piece).min(data.len()), &gear, masks))
        .collect();
    let mut hits = Hits::default();
    for mut p in pieces {
        hits.append(&mut p);
    }
    cdc_resolve::resolve(
        params,
        data.len(),
        &Positions(hits.s),
        &Positions(hits.l),
        |at, n| &data[at..at + n],
    )
}

/// Boundaries, then the keyed BLAKE3 (and, if asked, the CRC-32C) of every
/// chunk, chunks in parallel.
pub(super) fn digested(
    params: &ChunkParams,
    key: &Blake3Key,
    crc32c: bool,
    data: &[u8],
    spread: Spread,
) -> Vec<DigestedChunk> {
    let parallel = spread.piece(params, data.len()).is_some();
    boundaries(params, data, spread)
        .into_par_iter()
        .map(|span| {
            let at = span.offset as usize;
            let bytes = &data[at..at + span.len as usize];
            // A segment on several threads has few chunks a thread (the
            // default sizes give ~60 in 64 MiB): large ones are hashed as
            // BLAKE3 subtrees on the pool, so that no thread waits on the
            // last few whole chunks.
            let digest = if parallel && bytes.len() >= SPLIT_CHUNK_HASH_BYTES {
                blake3::Hasher::new_keyed(key.expose())
                    .update_rayon(bytes)
                    .finalize()
            } else {
                blake3::keyed_hash(key.expose(), bytes)
            };
            DigestedChunk {
                span,
                digest: *digest.as_bytes(),
                crc32c: crc32c.then(|| crc32c::crc32c(bytes)),
            }
        })
        .collect()
}

/// Chunks of at least this many bytes of a segment chunked in parallel are
/// hashed on several threads (the blake3 crate's subtrees, 128 KiB
/// apart at the least).
const SPLIT_CHUNK_HASH_BYTES: usize = 256 << 10;

/// Independent hash chains per scan: sub-ranges hashed in one loop so the
/// CPU overlaps their shift-and-add dependencies (one chain runs at the
/// latency of its adds; four keep the load and ALU ports busy without
/// running out of registers).
const LANES: usize = 4;

/// Candidate positions, ascending: those passing the small mask (`s`,
/// tested before the average size) and the large one (`l`).
#[derive(Debug, Default)]
struct Hits {
    s: Vec<u32>,
    l: Vec<u32>,
}

impl Hits {
    /// `p` fits: the parallel path takes segments of at most `u32::MAX`
    /// bytes (`MAX_SEGMENT_LEN`).
    fn record(&mut self, p: usize, h: u64, (mask_s, mask_l): (u64, u64)) {
        if h & mask_s == 0 {
            self.s.push(p as u32);
        }
        if h & mask_l == 0 {
            self.l.push(p as u32);
        }
    }

    fn append(&mut self, other: &mut Hits) {
        self.s.append(&mut other.s);
        self.l.append(&mut other.l);
    }
}

/// The gear hash that position `at` inherits from the bytes before it (the
/// 63 before it, fewer near the start: bytes further back have been
/// shifted out).
fn warm(data: &[u8], at: usize, gear: &[u64; 256]) -> u64 {
    data[at.saturating_sub(63)..at]
        .iter()
        .fold(0u64, |h, &b| (h << 1).wrapping_add(gear[b as usize]))
}

/// Positions `from..to` of `data` whose gear hash over the 64 bytes ending
/// there (every byte from 0, before position 63) passes `masks.0` or
/// `masks.1`: `cdc_resolve::candidates` as sorted lists, `LANES` chains at
/// a time.
fn scan(data: &[u8], from: usize, to: usize, gear: &[u64; 256], masks: (u64, u64)) -> Hits {
    let any = masks.0 & masks.1;
    let n = (to - from) / LANES;
    let mut lanes: [Hits; LANES] = Default::default();
    let mut h: [u64; LANES] = std::array::from_fn(|k| warm(data, from + k * n, gear));
    let bytes: [&[u8]; LANES] = std::array::from_fn(|k| &data[from + k * n..][..n]);
    let mut i = 0;
    while i < n {
        i = run_to_hit(&bytes, &mut h, i, any, gear);
        if i == n {
            break;
        }
        for (k, lane) in lanes.iter_mut().enumerate() {
            if h[k] & any == 0 {
                lane.record(from + k * n + i, h[k], masks);
            }
        }
        i += 1;
    }
    // The last lane runs on over the bytes that did not divide evenly.
    let last = &mut lanes[LANES - 1];
    let tail = from + LANES * n;
    let mut hl = h[LANES - 1];
    for (p, &b) in data[tail..to].iter().enumerate() {
        hl = (hl << 1).wrapping_add(gear[b as usize]);
        if hl & any == 0 {
            last.record(tail + p, hl, masks);
        }
    }
    let [first, rest @ ..] = &mut lanes;
    for lane in rest {
        first.append(lane);
    }
    std::mem::take(first)
}

/// Advances every lane from row `i` through the first row at which some
/// lane's hash passes `any` and returns that row (the hashes as after it),
/// or the lanes' length. Kept apart so that its chains stay in registers.
#[inline(never)]
fn run_to_hit(
    bytes: &[&[u8]; LANES],
    h: &mut [u64; LANES],
    mut i: usize,
    any: u64,
    gear: &[u64; 256],
) -> usize {
    let [b0, b1, b2, b3] = *bytes;
    let n = b0.len();
    let (b1, b2, b3) = (&b1[..n], &b2[..n], &b3[..n]);
    let [mut h0, mut h1, mut h2, mut h3] = *h;
    macro_rules! row {
        () => {
            h0 = (h0 << 1).wrapping_add(gear[b0[i] as usize]);
            h1 = (h1 << 1).wrapping_add(gear[b1[i] as usize]);
            h2 = (h2 << 1).wrapping_add(gear[b2[i] as usize]);
            h3 = (h3 << 1).wrapping_add(gear[b3[i] as usize]);
            if h0 & any == 0 || h1 & any == 0 || h2 & any == 0 || h3 & any == 0 {
                *h = [h0, h1, h2, h3];
                return i;
            }
        };
    }
    while i + 1 < n {
        row!();
        i += 1;
        row!();
        i += 1;
    }
    if i < n {
        row!();
        i += 1;
    }
    *h = [h0, h1, h2, h3];
    i
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngCore, SeedableRng};

    /// `scan` finds exactly the positions of the dense bitmaps of
    /// `cdc_resolve::candidates`, for any range and any lane remainder.
    #[test]
    fn scan_matches_dense_candidates() {
        let mut data = vec![0u8; 20_000];
        rand::rngs::StdRng::seed_from_u64(3).fill_bytes(&mut data);
        let p = ChunkParams::new(64, 256, 1024, 2).unwrap();
        let masks = cdc_resolve::masks(&p);
        let (gear, _) = get_gear_with_seed(0);
        let (s, l) = cdc_resolve::candidates(&data, masks.0, masks.1);
        let bit = |v: &[u32], q: usize| v[q / 32] >> (q % 32) & 1 == 1;
        for (from, to) in [
            (0, 20_000),
            (0, 5),
            (1, 64),
            (63, 70),
            (100, 4099),
            (7, 19_999),
        ] {
            let hits = scan(&data, from, to, &gear, masks);
            let want_s: Vec<u32> = (from..to)
                .filter(|&q| bit(&s, q))
                .map(|q| q as u32)
                .collect();
            let want_l: Vec<u32> = (from..to)
                .filter(|&q| bit(&l, q))
                .map(|q| q as u32)
                .collect();
            assert!(!want_l.is_empty() || to - from < 100);
            assert_eq!(hits.s, want_s, "{from}..{to}");
            assert_eq!(hits.l, want_l, "{from}..{to}");
        }
    }

    /// Random bytes with the 64-byte window of a position that passes
    /// both masks copied to end at, just before and just after every
    /// `piece`-th position from `from`: candidates exactly on piece edges.
    fn edged(params: &ChunkParams, len: usize, from: usize, piece: usize, seed: u64) -> Vec<u8> {
        let mut data = vec![0u8; len.max(1 << 16)];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut data);
        let (ms, ml) = cdc_resolve::masks(params);
        let (gear, _) = get_gear_with_seed(0);
        let mut h = 0u64;
        let at = (64..data.len())
            .find(|&q| {
                h = (h << 1).wrapping_add(gear[data[q] as usize]);
                q >= 127 && h & (ms | ml) == 0
            })
            .expect("64 KiB of random bytes hold a position passing both masks");
        let window: Vec<u8> = data[at - 63..=at].to_vec();
        data.truncate(len);
        for (k, edge) in (from + piece..len).step_by(piece).enumerate() {
            let end = edge + k % 3 - 1;
            if end >= 63 && end < len {
                data[end - 63..=end].copy_from_slice(&window);
            }
        }
        data
    }

    /// The parallel walk gives the crate's boundaries for every size
    /// around the chunk sizes and the piece size, and for data built to
    /// defeat it: all zeros, short periods, candidates on piece edges.
    #[test]
    fn parallel_boundaries_match_the_crate() {
        let params = [
            ChunkParams::new(64, 256, 1024, 0).unwrap(),
            ChunkParams::new(64, 256, 1024, 3).unwrap(),
            ChunkParams::new(65, 300, 1025, 1).unwrap(),
            ChunkParams::new(1000, 4096, 16384, 2).unwrap(),
            ChunkParams::new(4096, 4096, 4096, 0).unwrap(),
        ];
        let mut random = vec![0u8; 200_000];
        rand::rngs::StdRng::seed_from_u64(11).fill_bytes(&mut random);
        let zeros = vec![0u8; 100_000];
        let period: Vec<u8> = (0..100_000).map(|k| (k % 7) as u8 * 37).collect();
        let mut checked_edges = 0;
        for p in &params {
            let (min, avg, max) = (p.min() as usize, p.avg() as usize, p.max() as usize);
            for piece in [1, 5, 63, 64, 65, 333, 4096] {
                let from = min / 2 * 2;
                let mut lens = vec![0, 1, 2, 63, 64, 65, piece, piece + 1, 2 * piece + 3];
                for s in [min, avg, max, from + piece, from + 4 * piece] {
                    lens.extend([s - 1, s, s + 1]);
                }
                for len in lens {
                    let d = &random[..len];
                    assert_eq!(
                        parallel_boundaries(p, d, piece),
                        serial_boundaries(p, d),
                        "{p:?}, {len} bytes, pieces of {piece}"
                    );
                }
                for d in [&random[..], &zeros, &period] {
                    assert_eq!(
                        parallel_boundaries(p, d, piece),
                        serial_boundaries(p, d),
                        "{p:?}, {} bytes, pieces of {piece}",
                        d.len()
                    );
                }
                let len = 50_000 + piece;
                let d = edged(p, len, from, piece, piece as u64);
                let want = serial_boundaries(p, &d);
                assert_eq!(
                    parallel_boundaries(p, &d, piece),
                    want,
                    "{p:?}, edged, {piece}"
                );
                // A chunk ends where its cut candidate starts the next one.
                let cut_on_edge = |c: &ChunkSpan| {
                    let q = (c.offset + c.len as u64) as usize;
                    let r = q.wrapping_sub(from) % piece;
                    q > from + 1 && q < len && (r <= 1 || r == piece - 1)
                };
                checked_edges += want.iter().filter(|c| cut_on_edge(c)).count();
            }
        }
        // The edged data did put boundaries at piece edges.
        assert!(
            checked_edges > 100,
            "only {checked_edges} cuts on piece edges"
        );
    }

    #[test]
    fn spread_keeps_small_segments_and_busy_jobs_serial() {
        let p = ChunkParams::DEFAULT;
        let s16 = Spread::new(16, 1, false, 1 << 20);
        assert_eq!(s16.piece(&p, 64 << 20), Some(1 << 20));
        // 4 x 16 MiB on 16 threads: four threads a segment.
        assert_eq!(
            Spread::new(16, 4, false, 1 << 20).piece(&p, 16 << 20),
            Some(1 << 20)
        );
        // Pieces shrink to spread a mid-sized segment, down to 64 KiB.
        assert_eq!(s16.piece(&p, 4 << 20), Some(64 << 10));
        // Fewer than four minimum chunks: the crate's walk.
        assert_eq!(s16.piece(&p, (2 << 20) - 1), None);
        // As many segments as threads, one thread, or inline: serial.
        assert_eq!(
            Spread::new(16, 16, false, 1 << 20).piece(&p, 64 << 20),
            None
        );
        assert_eq!(Spread::new(1, 1, false, 1 << 20).piece(&p, 64 << 20), None);
        assert_eq!(Spread::new(16, 1, true, 1 << 20).piece(&p, 64 << 20), None);
        // Small sizes below 1 MiB stay serial.
        let small = ChunkParams::new(64, 256, 1024, 1).unwrap();
        assert_eq!(s16.piece(&small, (1 << 20) - 1), None);
        assert_eq!(s16.piece(&small, 1 << 20), Some(64 << 10));
    }
}
