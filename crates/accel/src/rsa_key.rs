//! An RSA private key prepared for the CRT private-key operation. The CRT
//! parameters (p, q, dp, dq, qinv) are what a GPU batch kernel needs too.

use rsa::pkcs1::DecodeRsaPrivateKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::traits::{PrivateKeyParts, PublicKeyParts};

use crate::error::KeyError;

pub struct RsaPrivateKey {
    inner: rsa::RsaPrivateKey,
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
        Ok(Self { inner })
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
