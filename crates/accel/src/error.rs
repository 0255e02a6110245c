//! Errors of the batch API: per segment (a bad tag, a bad IV) and per job
//! (a backend that cannot run the job at all).

use thiserror::Error;

use crate::job::OpKind;

/// A key, nonce or IV built from bytes of the wrong length.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KeyError {
    #[error("{what} must be {expected} bytes, got {got}")]
    Length {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("invalid RSA private key: {0}")]
    Rsa(String),
}

/// What went wrong with one segment of a job. The other segments of the job
/// are unaffected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("segment {index}: {kind}")]
pub struct SegmentError {
    pub index: usize,
    pub kind: SegmentErrorKind,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SegmentErrorKind {
    /// The tag did not verify: wrong key, nonce, associated data, tag or a
    /// modified ciphertext. The segment's buffer has been zeroed.
    #[error("authentication failed (wrong key, nonce, associated data or tag, or corrupt ciphertext); output wiped")]
    AuthenticationFailed,
    #[error("counter block is {got} bytes, this cipher needs {expected}")]
    IvLength { expected: usize, got: usize },
    #[error("segment is {len} bytes, the limit is {max}")]
    TooLarge { len: u64, max: u64 },
    #[error("input is {got} bytes, this operation needs exactly {expected}")]
    InputLength { expected: usize, got: usize },
    #[error("input is not smaller than the RSA modulus")]
    InputOutOfRange,
    #[error("this backend cannot read device-resident input")]
    DeviceResident,
    #[error("internal error: {0}")]
    Internal(String),
}

impl SegmentErrorKind {
    pub fn at(self, index: usize) -> SegmentError {
        SegmentError { index, kind: self }
    }
}

/// A job that could not run at all.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BackendError {
    #[error("backend {backend} is not available: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },
    #[error("backend {backend} does not implement {op}")]
    Unsupported { backend: &'static str, op: OpKind },
    #[error("invalid job: {0}")]
    InvalidJob(String),
    #[error("device error: {0}")]
    Device(String),
}

/// Why a one-block seal or open ([`crate::Backend::seal_block`],
/// [`crate::Backend::open_block`]) failed: the backend refused the work, or
/// the block itself failed (a bad tag, a block too large).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum BlockError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Block(#[from] SegmentErrorKind),
}

impl BlockError {
    /// Whether the block did not authenticate (the buffer has been zeroed).
    pub fn is_authentication_failure(&self) -> bool {
        matches!(
            self,
            BlockError::Block(SegmentErrorKind::AuthenticationFailed)
        )
    }
}
