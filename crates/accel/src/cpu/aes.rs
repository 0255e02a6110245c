//! AES-256-GCM and AES-256-CTR through aws-lc-rs (the assembly paths of
//! OpenSSL / BoringSSL: AES-NI, VAES, PCLMULQDQ).

use aws_lc_rs::aead::{self, Aad, LessSafeKey, UnboundKey, AES_256_GCM};
use aws_lc_rs::cipher::{EncryptingKey, EncryptionContext, UnboundCipherKey, AES_256};
use aws_lc_rs::iv::FixedLength;

use crate::error::SegmentErrorKind;
use crate::types::{Aes256Key, Iv128, Nonce96, Tag};

pub(super) struct GcmKey(LessSafeKey);

impl GcmKey {
    pub fn new(key: &Aes256Key) -> Self {
        let unbound = UnboundKey::new(&AES_256_GCM, key.expose())
            .expect("a 32-byte key is always valid for AES-256-GCM");
        GcmKey(LessSafeKey::new(unbound))
    }

    pub fn seal(&self, nonce: &Nonce96, aad: &[u8], data: &mut [u8]) -> Tag {
        let nonce = aead::Nonce::assume_unique_for_key(nonce.0);
        let tag = self
            .0
            .seal_in_place_separate_tag(nonce, Aad::from(aad), data)
            .expect("sealing fails only past GCM's 64 GiB limit, above MAX_SEGMENT_LEN");
        let mut out = [0u8; 16];
        out.copy_from_slice(tag.as_ref());
        Tag(out)
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
        let nonce = aead::Nonce::assume_unique_for_key(nonce.0);
        match self
            .0
            .open_in_place_separate_tag(nonce, Aad::from(aad), &tag.0, data)
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
        let start = u128::from_be_bytes(iv.0).wrapping_add(skip as u128);
        let unbound = UnboundCipherKey::new(&AES_256, self.0.expose())
            .expect("a 32-byte key is always valid for AES-256");
        let key = EncryptingKey::ctr(unbound).expect("CTR is a valid mode for AES-256");
        let ctx = EncryptionContext::Iv128(FixedLength::from(start.to_be_bytes()));
        key.less_safe_encrypt(data, ctx)
            .expect("CTR accepts any length and a 16-byte IV");
    }
}
