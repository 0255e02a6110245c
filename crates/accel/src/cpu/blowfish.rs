//! Blowfish in CTR mode over the `blowfish` crate's block function, with the
//! real key schedule (seed 003 used random tables). Counter layout as TEA's.

use blowfish::cipher::KeyInit;
use blowfish::Blowfish;

use super::tea::ctr64_apply;
use crate::types::{BlowfishKey, Iv64};

pub(super) struct BlowfishCtr(Blowfish);

impl BlowfishCtr {
    pub fn new(key: &BlowfishKey) -> Self {
        BlowfishCtr(
            Blowfish::new_from_slice(key.expose())
                .expect("BlowfishKey guarantees 4..=56 bytes, all valid"),
        )
    }

    pub fn apply(&self, iv: &Iv64, skip: u64, data: &mut [u8]) {
        ctr64_apply(iv, skip, data, |c| self.0.bc_encrypt(c));
    }
}

/// The raw Blowfish block function (big-endian words), for test vectors.
pub fn encrypt_block(key: &BlowfishKey, block: [u8; 8]) -> [u8; 8] {
    let c = BlowfishCtr::new(key);
    let v = [
        u32::from_be_bytes(block[..4].try_into().unwrap()),
        u32::from_be_bytes(block[4..].try_into().unwrap()),
    ];
    super::tea::words_to_bytes(c.0.bc_encrypt(v))
}
