//! Digests: BLAKE3 (the `blake3` crate, SIMD + rayon), SHA-256 (aws-lc-rs:
//! SHA-NI / AVX2 assembly), MD5 (`md-5`), CRC-32 (`crc32fast`, PCLMULQDQ)
//! and CRC-32C (`crc32c`, SSE4.2). Large segments are hashed by several
//! cores where the algorithm allows: BLAKE3's tree, and CRC combination.

use aws_lc_rs::digest as lc;
use md5::{Digest as _, Md5};
use rayon::prelude::*;

use super::CpuBackend;
use crate::job::{Digest, DigestAlgo};

pub(super) fn digest(cpu: &CpuBackend, algo: &DigestAlgo<'_>, data: &[u8]) -> Digest {
    let split = cpu.split_for(data.len(), 1024);
    match algo {
        DigestAlgo::Blake3 => Digest::B256(blake3_with(blake3::Hasher::new(), data, split)),
        DigestAlgo::Blake3Keyed(key) => Digest::B256(blake3_with(
            blake3::Hasher::new_keyed(key.expose()),
            data,
            split,
        )),
        DigestAlgo::Sha256 => {
            let d = lc::digest(&lc::SHA256, data);
            Digest::B256(d.as_ref().try_into().expect("SHA-256 is 32 bytes"))
        }
        DigestAlgo::Md5 => Digest::B128(Md5::digest(data).into()),
        DigestAlgo::Crc32 => Digest::Crc(match split {
            None => crc32fast::hash(data),
            Some(piece) => data
                .par_chunks(piece)
                .map(|p| {
                    let mut h = crc32fast::Hasher::new();
                    h.update(p);
                    h
                })
                .reduce_with(|mut a, b| {
                    a.combine(&b);
                    a
                })
                .map(|h| h.finalize())
                .unwrap_or(0),
        }),
        DigestAlgo::Crc32c => Digest::Crc(match split {
            None => crc32c::crc32c(data),
            Some(piece) => data
                .par_chunks(piece)
                .map(|p| (crc32c::crc32c(p), p.len()))
                .reduce_with(|(a, len_a), (b, len_b)| {
                    (crc32c::crc32c_combine(a, b, len_b), len_a + len_b)
                })
                .map(|(c, _)| c)
                .unwrap_or(0),
        }),
    }
}

fn blake3_with(mut h: blake3::Hasher, data: &[u8], split: Option<usize>) -> [u8; 32] {
    match split {
        Some(_) => h.update_rayon(data),
        None => h.update(data),
    };
    *h.finalize().as_bytes()
}
