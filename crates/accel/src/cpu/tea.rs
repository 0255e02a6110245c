//! TEA (Wheeler & Needham, 1994), hand-written: no maintained crate exists.
//! 32 cycles = 64 Feistel rounds, as in seed 000. For reproducing the seed,
//! not for protecting data: TEA has related-key weaknesses.
//!
//! Byte order: a block is two big-endian words (v0, v1); the key is four
//! big-endian words. CTR: counter = IV + block index (64-bit, wrapping),
//! split into v0 = high word, v1 = low word; keystream = E(counter) as bytes.

use crate::types::{Iv64, TeaKey};

const DELTA: u32 = 0x9E37_79B9;

pub struct Tea {
    k: [u32; 4],
}

impl Tea {
    pub fn new(key: &TeaKey) -> Self {
        Tea { k: key.words() }
    }

    pub fn encrypt_words(&self, [mut v0, mut v1]: [u32; 2]) -> [u32; 2] {
        let [k0, k1, k2, k3] = self.k;
        let mut sum = 0u32;
        for _ in 0..32 {
            sum = sum.wrapping_add(DELTA);
            v0 = v0.wrapping_add(
                (v1 << 4).wrapping_add(k0) ^ v1.wrapping_add(sum) ^ (v1 >> 5).wrapping_add(k1),
            );
            v1 = v1.wrapping_add(
                (v0 << 4).wrapping_add(k2) ^ v0.wrapping_add(sum) ^ (v0 >> 5).wrapping_add(k3),
            );
        }
        [v0, v1]
    }

    pub fn decrypt_words(&self, [mut v0, mut v1]: [u32; 2]) -> [u32; 2] {
        let [k0, k1, k2, k3] = self.k;
        let mut sum = DELTA.wrapping_mul(32);
        for _ in 0..32 {
            v1 = v1.wrapping_sub(
                (v0 << 4).wrapping_add(k2) ^ v0.wrapping_add(sum) ^ (v0 >> 5).wrapping_add(k3),
            );
            v0 = v0.wrapping_sub(
                (v1 << 4).wrapping_add(k0) ^ v1.wrapping_add(sum) ^ (v1 >> 5).wrapping_add(k1),
            );
            sum = sum.wrapping_sub(DELTA);
        }
        [v0, v1]
    }

    /// The raw block function on 8 bytes (two big-endian words).
    pub fn encrypt_block(&self, block: [u8; 8]) -> [u8; 8] {
        let v = [
            u32::from_be_bytes(block[..4].try_into().unwrap()),
            u32::from_be_bytes(block[4..].try_into().unwrap()),
        ];
        words_to_bytes(self.encrypt_words(v))
    }

    pub fn decrypt_block(&self, block: [u8; 8]) -> [u8; 8] {
        let v = [
            u32::from_be_bytes(block[..4].try_into().unwrap()),
            u32::from_be_bytes(block[4..].try_into().unwrap()),
        ];
        words_to_bytes(self.decrypt_words(v))
    }

    /// XORs the keystream starting at counter `iv + skip` onto `data`.
    pub fn ctr_apply(&self, iv: &Iv64, skip: u64, data: &mut [u8]) {
        ctr64_apply(iv, skip, data, |c| self.encrypt_words(c));
    }
}

pub(super) fn words_to_bytes([a, b]: [u32; 2]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..4].copy_from_slice(&a.to_be_bytes());
    out[4..].copy_from_slice(&b.to_be_bytes());
    out
}

/// CTR mode over any 64-bit block cipher given as a function on two words.
pub(super) fn ctr64_apply(
    iv: &Iv64,
    skip: u64,
    data: &mut [u8],
    encrypt: impl Fn([u32; 2]) -> [u32; 2],
) {
    let mut counter = u64::from_be_bytes(*iv.as_bytes()).wrapping_add(skip);
    for block in data.chunks_mut(8) {
        let ks = words_to_bytes(encrypt([(counter >> 32) as u32, counter as u32]));
        for (b, k) in block.iter_mut().zip(ks) {
            *b ^= k;
        }
        counter = counter.wrapping_add(1);
    }
}
