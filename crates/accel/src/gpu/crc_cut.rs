//! CRC-32 and CRC-32C of long segments on the GPU. The serial kernels run
//! one thread per segment, so a few large segments ran at one thread's
//! rate (~0.6 GB/s for 4 x 16 MiB on an H200). Here each segment is cut
//! into pieces that the kernels hash as segments of their own, and the
//! pieces' CRCs are combined on the host: crc(A || B) = mul(x^(8 |B|),
//! crc(A)) ^ crc(B) (zlib's crc32_combine), a few dozen carry-less steps a
//! piece.

use super::blake3::Input;

/// A CRC's polynomial.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Poly {
    /// CRC-32C.
    Castagnoli,
    /// CRC-32 (zlib, crc32fast).
    Ieee,
}

impl Poly {
    /// Bit-reflected (x^0 = bit 31).
    const fn bits(self) -> u32 {
        match self {
            Poly::Castagnoli => 0x82F6_3B78,
            Poly::Ieee => 0xEDB8_8320,
        }
    }
}

/// About this many pieces a job: threads for every SM several times over,
/// few enough that combining them costs the host well under a millisecond.
const TARGET_PIECES: u64 = 8192;

/// Shortest piece: a thread's setup and the host's combine stay small
/// against its bytes.
const MIN_PIECE: u64 = 16 << 10;

/// The piece length of a CRC job of `bytes` in all: a multiple of 4 KiB
/// (device pointers keep their alignment), at least [`MIN_PIECE`].
fn piece_len(bytes: u64) -> u64 {
    (bytes / TARGET_PIECES)
        .next_multiple_of(4096)
        .max(MIN_PIECE)
}

/// a * b modulo `poly`, bit-reflected (zlib's multmodp).
pub(crate) fn mul(poly: Poly, a: u32, mut b: u32) -> u32 {
    let poly = poly.bits();
    let mut p = 0u32;
    let mut m = 1u32 << 31;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        b = (b >> 1) ^ (poly & 0u32.wrapping_sub(b & 1));
        m >>= 1;
    }
    p
}

fn pow2_table(poly: Poly) -> [u32; 64] {
    let mut t = [0u32; 64];
    t[0] = 1 << 23; // x^8: one byte
    for k in 1..64 {
        t[k] = mul(poly, t[k - 1], t[k - 1]);
    }
    t
}

/// x^(8 * 2^k) modulo `poly` for k = 0..64.
pub(crate) fn pow2(poly: Poly) -> &'static [u32; 64] {
    use std::sync::OnceLock;
    static C: OnceLock<[u32; 64]> = OnceLock::new();
    static I: OnceLock<[u32; 64]> = OnceLock::new();
    match poly {
        Poly::Castagnoli => C.get_or_init(|| pow2_table(poly)),
        Poly::Ieee => I.get_or_init(|| pow2_table(poly)),
    }
}

/// x^(8 len) modulo `poly`: the factor that moves a CRC register past
/// `len` more bytes. One multiply per set bit of `len`.
pub(crate) fn shift(poly: Poly, len: u64) -> u32 {
    let table = pow2(poly);
    let mut power = 1u32 << 31; // x^0
    let mut n = len;
    while n != 0 {
        power = mul(poly, table[n.trailing_zeros() as usize], power);
        n &= n - 1;
    }
    power
}

/// Segments cut into pieces: the pieces, in segment order, and each
/// segment's first piece and piece count.
pub(crate) struct Cut<'a> {
    pub(crate) pieces: Vec<Input<'a>>,
    spans: Vec<(usize, usize)>,
    piece: u64,
}

/// `inputs` cut into pieces of [`piece_len`] of their total (a segment
/// shorter than two pieces stays whole).
pub(crate) fn cut<'a>(inputs: &[Input<'a>]) -> Cut<'a> {
    let total: u64 = inputs.iter().map(|i| i.len() as u64).sum();
    let piece = piece_len(total);
    let mut pieces = Vec::new();
    let mut spans = Vec::with_capacity(inputs.len());
    for input in inputs {
        let len = input.len() as u64;
        let first = pieces.len();
        if len < 2 * piece {
            pieces.push(*input);
        } else {
            let mut at = 0u64;
            while at < len {
                let n = piece.min(len - at);
                pieces.push(match *input {
                    Input::Host(b) => Input::Host(&b[at as usize..(at + n) as usize]),
                    Input::Device { ptr, .. } => Input::Device {
                        ptr: ptr + at,
                        len: n as usize,
                    },
                });
                at += n;
            }
        }
        spans.push((first, pieces.len() - first));
    }
    Cut {
        pieces,
        spans,
        piece,
    }
}

impl Cut<'_> {
    /// Each segment's CRC from its pieces' (`crcs`, one per piece in
    /// order) under `poly`.
    pub(crate) fn combine(&self, poly: Poly, crcs: &[u32]) -> Vec<u32> {
        let full = shift(poly, self.piece);
        self.spans
            .iter()
            .map(|&(first, count)| {
                let mut c = crcs[first];
                for (k, &next) in crcs[first + 1..first + count].iter().enumerate() {
                    let len = self.pieces[first + 1 + k].len() as u64;
                    let by = if len == self.piece {
                        full
                    } else {
                        shift(poly, len)
                    };
                    c = mul(poly, by, c) ^ next;
                }
                c
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn pieces_combine_to_the_crates_crcs() {
        // Lengths around the piece (16 KiB here): whole, exactly two
        // pieces, a short last piece, empty.
        let lens = [
            0usize,
            1,
            16 << 10,
            32 << 10,
            (32 << 10) + 1,
            100_003,
            5 << 20,
        ];
        let bufs: Vec<Vec<u8>> = lens.iter().map(|&n| data(n)).collect();
        let inputs: Vec<Input<'_>> = bufs.iter().map(|b| Input::Host(b)).collect();
        let cut = cut(&inputs);
        assert_eq!(cut.piece, MIN_PIECE);
        assert!(cut.pieces.len() > inputs.len());
        assert!(cut.pieces.iter().all(|p| p.len() as u64 <= 2 * cut.piece));
        for (poly, crc) in [
            (Poly::Castagnoli, crc32c::crc32c as fn(&[u8]) -> u32),
            (Poly::Ieee, crc32fast::hash),
        ] {
            let of_pieces: Vec<u32> = cut
                .pieces
                .iter()
                .map(|p| match p {
                    Input::Host(b) => crc(b),
                    Input::Device { .. } => unreachable!(),
                })
                .collect();
            let want: Vec<u32> = bufs.iter().map(|b| crc(b)).collect();
            assert_eq!(cut.combine(poly, &of_pieces), want, "{poly:?}");
        }
    }

    #[test]
    fn device_pieces_keep_their_addresses_and_alignment() {
        let len = (3 << 20) + 5;
        let inputs = [Input::Device { ptr: 1 << 20, len }];
        let cut = cut(&inputs);
        let mut at = 1u64 << 20;
        for p in &cut.pieces {
            let Input::Device { ptr, len } = *p else {
                panic!("a host piece")
            };
            assert_eq!(ptr, at);
            assert_eq!(ptr % 4096, 0);
            at += len as u64;
        }
        assert_eq!(at, (1 << 20) + len as u64);
    }

    #[test]
    fn pieces_grow_with_the_job() {
        assert_eq!(piece_len(0), MIN_PIECE);
        assert_eq!(piece_len(64 << 20), MIN_PIECE);
        assert_eq!(piece_len(256 << 20), 32 << 10);
        assert_eq!(piece_len(4 << 30), 512 << 10);
        assert_eq!(piece_len((256 << 20) + 1) % 4096, 0);
    }
}
