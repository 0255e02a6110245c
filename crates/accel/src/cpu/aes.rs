//! AES-256-GCM and AES-256-CTR through aws-lc-rs (the assembly paths of
//! OpenSSL / BoringSSL: AES-NI, VAES, PCLMULQDQ).

use std::cell::RefCell;
use std::sync::Arc;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, UnboundKey, AES_256_GCM};
use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_256};
use aws_lc_rs::iv::FixedLength;

use crate::error::SegmentErrorKind;
use crate::types::{Aes256Key, Iv128, Nonce96, Tag};

pub(super) struct GcmKey(Arc<LessSafeKey>);

thread_local! {
    /// The last GCM key this thread expanded. A store opens single blocks
    /// and seals small group commits under one data key, each its own job;
    /// expanding the key schedule and GHASH powers every time cost about
    /// as much as sealing a 100-byte value. The cached copy lives no longer
    /// than the thread or the next different key (the key copy is wiped on
    /// drop; aws-lc cleanses the expanded key when freed).
    static LAST_GCM_KEY: RefCell<Option<(Aes256Key, Arc<LessSafeKey>)>> = const { RefCell::new(None) };
}

/// Equality of two keys in time independent of where they differ.
fn same_key(a: &Aes256Key, b: &Aes256Key) -> bool {
    a.expose()
        .iter()
        .zip(b.expose())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

impl GcmKey {
    pub fn new(key: &Aes256Key) -> Self {
        LAST_GCM_KEY.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((k, expanded)) = last.as_ref() {
                if same_key(k, key) {
                    return GcmKey(expanded.clone());
                }
            }
            let unbound = UnboundKey::new(&AES_256_GCM, key.expose())
                .expect("a 32-byte key is always valid for AES-256-GCM");
            let expanded = Arc::new(LessSafeKey::new(unbound));
            *last = Some((key.clone(), expanded.clone()));
            GcmKey(expanded)
        })
    }

    /// The expanded aws-lc key (for [`super::gcm_cut::GcmCut`]).
    pub fn aead(&self) -> &LessSafeKey {
        &self.0
    }

    pub fn seal(&self, nonce: &Nonce96, aad: &[u8], data: &mut [u8]) -> Tag {
        let nonce = aead::Nonce::assume_unique_for_key(*nonce.as_bytes());
        let tag = self
            .0
            .seal_in_place_separate_tag(nonce, Aad::from(aad), data)
            .expect("sealing fails only past GCM's 64 GiB limit, above MAX_SEGMENT_LEN");
        let mut out = [0u8; 16];
        out.copy_from_slice(tag.as_ref());
        Tag::from_bytes(out)
    }

    /// Decrypts in place; on a bad tag the buffer is zeroed so no plaintext
    /// of a forged ciphertext is ever visible.
    pub fn open(
        &self,
        nonce: &Nonce96,
        aad: &[u8],
        tag: &Tag,
        data: &mut [u8],
    ) -> Result<(), SegmentErrorKind> {
        let nonce = aead::Nonce::assume_unique_for_key(*nonce.as_bytes());
        match self
            .0
            .open_in_place_separate_tag(nonce, Aad::from(aad), tag.as_bytes(), data)
        {
            Ok(_) => Ok(()),
            Err(_) => {
                data.fill(0);
                Err(SegmentErrorKind::AuthenticationFailed)
            }
        }
    }
}

pub(super) struct CtrKey(Aes256Key);

impl CtrKey {
    pub fn new(key: &Aes256Key) -> Self {
        CtrKey(key.clone())
    }

    /// XORs the keystream starting at counter block `iv + skip` onto `data`.
    pub fn apply(&self, iv: &Iv128, skip: u64, data: &mut [u8]) {
        if data.is_empty() {
            return;
        }
        let start = u128::from_be_bytes(*iv.as_bytes()).wrapping_add(skip as u128);
        let unbound = UnboundCipherKey::new(&AES_256, self.0.expose())
            .expect("a 32-byte key is always valid for AES-256");
        let key = EncryptingKey::ctr(unbound).expect("CTR is a valid mode for AES-256");
        let ctx = EncryptionContext::Iv128(FixedLength::from(start.to_be_bytes()));
        key.less_safe_encrypt(data, ctx)
            .expect("CTR accepts any length and a 16-byte IV");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The per-thread cache must never hand out another key's schedule.
    #[test]
    fn cached_keys_seal_as_fresh_ones() {
        let k1 = Aes256Key::from_bytes([1; 32]);
        let mut k2b = [1u8; 32];
        k2b[31] = 2;
        let k2 = Aes256Key::from_bytes(k2b);
        let nonce = Nonce96::from_bytes([5; 12]);
        let tag = |k: &Aes256Key| {
            let mut d = *b"sixteen byte msg";
            (GcmKey::new(k).seal(&nonce, b"ad", &mut d), d)
        };
        let fresh = |k: &Aes256Key| {
            let key = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, k.expose()).unwrap());
            let mut d = *b"sixteen byte msg";
            let t = key
                .seal_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(*nonce.as_bytes()),
                    Aad::from(b"ad"),
                    &mut d,
                )
                .unwrap();
            (Tag::from_bytes(t.as_ref().try_into().unwrap()), d)
        };
        for k in [&k1, &k1, &k2, &k1, &k2, &k2] {
            assert_eq!(tag(k), fresh(k));
        }
        assert_ne!(fresh(&k1), fresh(&k2));
    }
}
