//! An RSA private key prepared for the CRT private-key operation. The CRT
//! parameters (p, q, dp, dq, qinv) are what a GPU batch kernel needs too.

use std::sync::OnceLock;

use num_bigint_dig::{BigUint, ModInverse};
use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use zeroize::Zeroizing;

use crate::error::KeyError;

pub struct RsaPrivateKey {
    inner: rsa::RsaPrivateKey,
    /// The batch kernels' form of the key, made on first use and kept
    /// with the key (so a key used by many jobs is prepared once).
    plan: OnceLock<Result<CrtPlan, String>>,
}

impl RsaPrivateKey {
    /// Accepts PKCS#1 ("BEGIN RSA PRIVATE KEY") or PKCS#8 ("BEGIN PRIVATE KEY") PEM.
    pub fn from_pem(pem: &str) -> Result<Self, KeyError> {
        let key = rsa::RsaPrivateKey::from_pkcs1_pem(pem)
            .or_else(|_| rsa::RsaPrivateKey::from_pkcs8_pem(pem))
            .map_err(|e| KeyError::Rsa(e.to_string()))?;
        Self::from_key(key)
    }

    pub fn from_key(mut inner: rsa::RsaPrivateKey) -> Result<Self, KeyError> {
        inner.validate().map_err(|e| KeyError::Rsa(e.to_string()))?;
        if inner.primes().len() != 2 {
            return Err(KeyError::Rsa("multi-prime keys are not supported".into()));
        }
        inner
            .precompute()
            .map_err(|e| KeyError::Rsa(e.to_string()))?;
        Ok(Self {
            inner,
            plan: OnceLock::new(),
        })
    }

    /// Whether the batch kernels (GPU) take this key: 1024, 2048 or
    /// 4096 bits with primes of at most half the modulus length.
    pub fn batch_kernels_take(&self) -> bool {
        self.plan().is_ok()
    }

    /// The key prepared for the batch kernels (GPU and its CPU
    /// emulation), computed once per key; an error names why a key cannot
    /// take that path (a size other than 1024, 2048 or 4096 bits, or
    /// primes of unequal length).
    pub(crate) fn plan(&self) -> Result<&CrtPlan, String> {
        self.plan
            .get_or_init(|| CrtPlan::new(&self.inner))
            .as_ref()
            .map_err(|e| e.clone())
    }

    /// Modulus size in bits (1024, 2048, 4096, ...).
    pub fn bits(&self) -> usize {
        self.inner.n().bits()
    }

    /// Modulus size in bytes: every input and output is exactly this long.
    pub fn size(&self) -> usize {
        self.inner.size()
    }

    pub fn inner(&self) -> &rsa::RsaPrivateKey {
        &self.inner
    }

    /// The public modulus, big-endian.
    pub fn modulus(&self) -> Vec<u8> {
        self.inner.n().to_bytes_be()
    }
}

impl std::fmt::Debug for RsaPrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RsaPrivateKey({} bits, redacted)", self.bits())
    }
}

/// Modulus sizes the batch kernels take.
pub const BATCH_KEY_BITS: [usize; 3] = [1024, 2048, 4096];

/// Words of one key record (`kernels/rsa.cu`): twelve blocks of `limbs`
/// words.
pub(crate) const fn key_record_words(limbs: usize) -> usize {
    12 * limbs
}

/// An RSA key as the batch kernels read it: 32-bit little-endian limbs,
/// p > q, Montgomery constants for R = 2^(32 * limbs).
pub(crate) struct CrtPlan {
    /// Modulus size in bits: 1024, 2048 or 4096.
    pub bits: usize,
    /// Limbs of p and q (bits / 64).
    pub limbs: usize,
    /// The key record (`key_record_words(limbs)` words): p, q, dp, dq,
    /// R mod p, R mod q, R^2 mod p, R^2 mod q, R^3 mod p, R^3 mod q,
    /// qinv * R mod p, then -p^-1 and -q^-1 mod 2^32 and zeros. Secret;
    /// wiped on drop.
    pub record: Zeroizing<Vec<u32>>,
    pub n: BigUint,
    pub e: BigUint,
    /// Host Montgomery constants modulo n (blinding and checks).
    pub mont: crate::rsa_mont::Mont,
}

impl CrtPlan {
    fn new(key: &rsa::RsaPrivateKey) -> Result<CrtPlan, String> {
        let bits = key.size() * 8;
        if !BATCH_KEY_BITS.contains(&bits) {
            return Err(format!(
                "RSA-{bits} keys are not supported by the batch kernels (1024, 2048 and 4096-bit keys are)"
            ));
        }
        let limbs = bits / 64;
        let [a, b] = key.primes() else {
            return Err("multi-prime keys are not supported".into());
        };
        let (p, q) = if a > b { (a, b) } else { (b, a) };
        if p.bits() > 32 * limbs || q.bits() > 32 * limbs || q.bits() < 2 {
            return Err(format!(
                "the primes of this RSA-{bits} key are not both of at most {} bits",
                32 * limbs
            ));
        }
        let one = BigUint::from(1u32);
        let d = key.d();
        let dp = Zeroizing::new(d % (p - &one));
        let dq = Zeroizing::new(d % (q - &one));
        let qinv = q
            .clone()
            .mod_inverse(p)
            .and_then(|v| v.to_biguint())
            .ok_or("q has no inverse modulo p")?;
        let r = one << (32 * limbs);
        let mut record = Zeroizing::new(vec![0u32; key_record_words(limbs)]);
        let parts: [BigUint; 11] = [
            p.clone(),
            q.clone(),
            (*dp).clone(),
            (*dq).clone(),
            &r % p,
            &r % q,
            (&r * &r) % p,
            (&r * &r) % q,
            (&r * &r * &r) % p,
            (&r * &r * &r) % q,
            (qinv * &r) % p,
        ];
        for (k, v) in parts.iter().enumerate() {
            put_limbs(&mut record[k * limbs..(k + 1) * limbs], v);
        }
        record[11 * limbs] = neg_inv32(record[0]);
        record[11 * limbs + 1] = neg_inv32(record[limbs]);
        let mont = crate::rsa_mont::Mont::new(key.n()).ok_or("the modulus is even")?;
        Ok(CrtPlan {
            bits,
            limbs,
            record,
            n: key.n().clone(),
            e: key.e().clone(),
            mont,
        })
    }
}

/// `v` as little-endian 32-bit limbs into `out` (v must fit).
pub(crate) fn put_limbs(out: &mut [u32], v: &BigUint) {
    let bytes = Zeroizing::new(v.to_bytes_le());
    out.fill(0);
    for (i, c) in bytes.chunks(4).enumerate().take(out.len()) {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        out[i] = u32::from_le_bytes(w);
    }
}

/// -x^-1 mod 2^32 for odd x (Newton's iteration: each step doubles the
/// correct low bits).
pub(crate) fn neg_inv32(x: u32) -> u32 {
    let mut inv: u32 = 1;
    for _ in 0..5 {
        inv = inv.wrapping_mul(2u32.wrapping_sub(x.wrapping_mul(inv)));
    }
    inv.wrapping_neg()
}
