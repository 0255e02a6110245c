//! The RSA private-key operation with CRT and blinding (the `rsa` crate's
//! hazmat layer); padding is the caller's business.

use rsa::hazmat::rsa_decrypt_and_check;
use rsa::BigUint;

use crate::error::SegmentErrorKind;
use crate::rsa_key::RsaPrivateKey;

pub(crate) fn private_op(key: &RsaPrivateKey, input: &[u8]) -> Result<Vec<u8>, SegmentErrorKind> {
    let c = BigUint::from_bytes_be(input);
    let mut rng = rand_core::OsRng;
    // `_and_check` re-encrypts the result: a fault in the CRT path (which
    // would leak a prime) becomes an error instead of an output.
    let m = rsa_decrypt_and_check(key.inner(), Some(&mut rng), &c).map_err(|e| match e {
        rsa::Error::Decryption => SegmentErrorKind::InputOutOfRange,
        other => SegmentErrorKind::Internal(other.to_string()),
    })?;
    let bytes = m.to_bytes_be();
    let mut out = vec![0u8; key.size()];
    out[key.size() - bytes.len()..].copy_from_slice(&bytes);
    Ok(out)
}
