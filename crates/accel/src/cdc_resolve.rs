//! FastCDC 2020 boundaries from per-position candidate bitmaps: the CPU
//! twin of the GPU resolution (kernels/cdc.cu `cdc_chunk_len`, which the
//! device walks run in parallel). The GPU marks every position whose
//! full-window gear hash passes the small or large mask; this serial walk
//! applies the min / avg / max rules of `fastcdc::v2020::cut_gear` over
//! those sparse hits and gives exactly its boundaries.
//!
//! Why it is exact: the crate's hash restarts at 0 at `chunk start + 2 *
//! (min / 2)`; a gear hash forgets a byte after 64 steps, so from the 64th
//! position on it equals the full-window hash the GPU computed. The first 63
//! positions are recomputed here from the bytes. The crate tests even
//! positions as `(h << 1) & (mask << 1)`, which is `h & mask` because no mask
//! uses bit 63.

use fastcdc::v2020::{get_gear_with_seed, logarithm2, MASKS};

use crate::chunking::ChunkParams;
use crate::job::ChunkSpan;

/// The two masks of normalized chunking for `params` (as the crate picks
/// them: by the average's log2 rounded to the nearest integer, so 725
/// takes the masks of 1024, not of 512).
pub fn masks(params: &ChunkParams) -> (u64, u64) {
    let bits = logarithm2(params.avg());
    let n = params.level() as u32;
    (MASKS[(bits + n) as usize], MASKS[(bits - n) as usize])
}

/// Candidate bitmaps on the CPU, as the GPU kernel `gear_candidates` writes
/// them: bit p % 32 of word p / 32 is set iff the gear hash of the 64 bytes
/// ending at p (fewer before position 63) passes the mask.
pub fn candidates(data: &[u8], mask_s: u64, mask_l: u64) -> (Vec<u32>, Vec<u32>) {
    let (gear, _) = get_gear_with_seed(0);
    let words = data.len().div_ceil(32);
    let (mut s, mut l) = (vec![0u32; words], vec![0u32; words]);
    let mut h = 0u64;
    for (p, &b) in data.iter().enumerate() {
        h = (h << 1).wrapping_add(gear[b as usize]);
        s[p / 32] |= ((h & mask_s == 0) as u32) << (p % 32);
        l[p / 32] |= ((h & mask_l == 0) as u32) << (p % 32);
    }
    (s, l)
}

/// Candidate positions of one mask, as the resolver asks for them.
pub trait Candidates {
    /// The first candidate in positions `from..to`, if any.
    fn first(&self, from: usize, to: usize) -> Option<usize>;
}

/// Dense bitmaps, as `gear_candidates` writes them.
impl Candidates for [u32] {
    fn first(&self, from: usize, to: usize) -> Option<usize> {
        first_hit(self, from, to)
    }
}

/// The nonzero words of a bitmap, sorted by word index (sparse hits, as
/// with large average chunk sizes).
#[derive(Debug, Default, Clone)]
pub struct SparseHits {
    pub words: Vec<u32>,
    pub bits: Vec<u32>,
}

impl Candidates for SparseHits {
    fn first(&self, from: usize, to: usize) -> Option<usize> {
        let start = self.words.partition_point(|&w| (w as usize) < from / 32);
        for (&w, &bits) in self.words[start..].iter().zip(&self.bits[start..]) {
            let base = w as usize * 32;
            if base >= to {
                return None;
            }
            let bits = if base < from {
                bits & (u32::MAX << (from - base))
            } else {
                bits
            };
            if bits != 0 {
                let hit = base + bits.trailing_zeros() as usize;
                return (hit < to).then_some(hit);
            }
        }
        None
    }
}

/// First set bit of `bits` in positions `from..to`, if any.
fn first_hit(bits: &[u32], from: usize, to: usize) -> Option<usize> {
    let mut p = from;
    while p < to {
        let w = bits[p / 32] >> (p % 32);
        if w != 0 {
            let hit = p + w.trailing_zeros() as usize;
            return (hit < to).then_some(hit);
        }
        p = (p / 32 + 1) * 32;
    }
    None
}

/// Candidate positions of one mask as a sorted list (the CPU's parallel
/// scan, `cpu::chunk`, finds them a piece at a time).
/// Positions are `u32`, as segments are at most `MAX_SEGMENT_LEN` bytes.
#[derive(Debug, Default, Clone)]
pub struct Positions(pub Vec<u32>);

impl Candidates for Positions {
    fn first(&self, from: usize, to: usize) -> Option<usize> {
        let at = self.0.partition_point(|&p| (p as usize) < from);
        self.0.get(at).map(|&p| p as usize).filter(|&p| p < to)
    }
}

/// Chunk boundaries of `len` bytes. `head(at, n)` returns the `n` bytes at
/// `at` (the first positions after each hash start, recomputed here).
pub fn resolve<C: Candidates + ?Sized, H: AsRef<[u8]>>(
    params: &ChunkParams,
    len: usize,
    hits_s: &C,
    hits_l: &C,
    mut head: impl FnMut(usize, usize) -> H,
) -> Vec<ChunkSpan> {
    let (gear, _) = get_gear_with_seed(0);
    let (mask_s, mask_l) = masks(params);
    let (min, avg, max) = (
        params.min() as usize,
        params.avg() as usize,
        params.max() as usize,
    );
    let mut out = Vec::new();
    let mut start = 0usize;
    while start < len {
        let cut = cut_at(len - start, (min, avg, max), |hs, (center_end, end)| {
            // Chunk-relative positions: mask_s below `center_end`, mask_l up
            // to `end`, both from the crate's rules.
            let direct = (hs + 63).min(end);
            let bytes = head(start + hs, direct - hs);
            let mut h = 0u64;
            for (i, &b) in bytes.as_ref().iter().enumerate() {
                let a = hs + i;
                h = (h << 1).wrapping_add(gear[b as usize]);
                let mask = if a < center_end { mask_s } else { mask_l };
                if h & mask == 0 {
                    return a;
                }
            }
            let abs = |p: usize| start + p;
            if direct < center_end {
                if let Some(p) = hits_s.first(abs(direct), abs(center_end)) {
                    return p - start;
                }
            }
            let from = direct.max(center_end);
            if let Some(p) = hits_l.first(abs(from), abs(end)) {
                return p - start;
            }
            end
        });
        out.push(ChunkSpan {
            offset: start as u64,
            len: cut as u32,
        });
        start += cut;
    }
    out
}

/// The crate's size rules for one chunk of at most `remaining` bytes;
/// `scan(hash_start, (center_end, end))` returns the cut.
fn cut_at(
    remaining: usize,
    (min, avg, max): (usize, usize, usize),
    scan: impl FnOnce(usize, (usize, usize)) -> usize,
) -> usize {
    if remaining <= min {
        return remaining;
    }
    let mut center = avg;
    let mut remaining = remaining;
    if remaining > max {
        remaining = max;
    } else if remaining < center {
        center = remaining;
    }
    let hash_start = min / 2 * 2;
    let center_end = center / 2 * 2;
    let end = remaining / 2 * 2;
    if hash_start >= end {
        return remaining;
    }
    let cut = scan(hash_start, (center_end.max(hash_start), end));
    if cut >= end {
        remaining
    } else {
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastcdc::v2020::FastCDC;
    use rand::{RngCore, SeedableRng};

    fn want(p: &ChunkParams, data: &[u8]) -> Vec<ChunkSpan> {
        FastCDC::with_level(data, p.min(), p.avg(), p.max(), p.normalization())
            .map(|c| ChunkSpan {
                offset: c.offset as u64,
                len: c.length as u32,
            })
            .collect()
    }

    fn check(p: &ChunkParams, data: &[u8]) {
        let (ms, ml) = masks(p);
        let (s, l) = candidates(data, ms, ml);
        let got = resolve(p, data.len(), &s[..], &l[..], |at, n| {
            data[at..at + n].to_vec()
        });
        assert_eq!(got, want(p, data), "params {p:?}, {} bytes", data.len());
        let sparse = |bits: &[u32]| {
            let (words, bits): (Vec<u32>, Vec<u32>) = bits
                .iter()
                .enumerate()
                .filter(|(_, &b)| b != 0)
                .map(|(w, &b)| (w as u32, b))
                .unzip();
            SparseHits { words, bits }
        };
        let (ss, sl) = (sparse(&s), sparse(&l));
        let got = resolve(p, data.len(), &ss, &sl, |at, n| data[at..at + n].to_vec());
        assert_eq!(
            got,
            want(p, data),
            "sparse, params {p:?}, {} bytes",
            data.len()
        );
    }

    #[test]
    fn matches_fastcdc_on_random_repetitive_and_odd_sizes() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut random = vec![0u8; 3 << 20];
        rng.fill_bytes(&mut random);
        let period: Vec<u8> = (0..(2 << 20)).map(|k| (k % 13) as u8 * 19).collect();
        let zeros = vec![0u8; 1 << 20];
        let mut text = Vec::new();
        while text.len() < (1 << 20) {
            text.extend_from_slice(include_bytes!("cdc_resolve.rs"));
        }
        for p in [
            ChunkParams::new(64, 256, 1024, 0).unwrap(),
            ChunkParams::new(64, 256, 1024, 3).unwrap(),
            ChunkParams::new(1000, 4096, 16384, 1).unwrap(),
            ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
            ChunkParams::new(65, 300, 1025, 1).unwrap(),
            // Averages whose log2 rounds up.
            ChunkParams::new(64, 725, 1749, 0).unwrap(),
            ChunkParams::new(1000, 6000, 20_000, 2).unwrap(),
            ChunkParams::new(4096, 4096, 4096, 0).unwrap(),
            ChunkParams::DEFAULT,
        ] {
            for d in [&random[..], &period, &zeros, &text] {
                check(&p, d);
            }
            for n in [0usize, 1, 63, 64, 65, 1023, 1024, 1025, 4095, 70_001] {
                check(&p, &random[..n]);
            }
        }
    }
}
