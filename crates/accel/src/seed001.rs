//! Seed 001 (HashGPU, Al-Kiswany et al.) on the CPU: its two hashing
//! primitives, for reproduction and comparison with the GPU versions
//! (`gpu::GpuBackend::pmd_digest`, `gpu::GpuBackend::window_matches`).
//!
//! - Direct hashing with the *parallel* Merkle-Damgård construction: the
//!   buffer is cut into fixed-size blocks, each block is hashed on its own,
//!   and the concatenation of the block digests is hashed again. This is a
//!   different function from plain MD5 / SHA-256 of the buffer, so its
//!   result is a [`PmdDigest`] named "pmd-md5" / "pmd-sha256".
//! - Sliding-window hashing: the MD5 of every window of `window` bytes at
//!   offsets 0, step, 2 step, ... (the seed's Fig. 14 uses 20 and 4),
//!   reporting the offsets whose digest is in a set of patterns.
//!
//! Both run on the current rayon pool (all cores by default; install into a
//! one-thread pool for a single-core baseline).

use std::collections::HashSet;
use std::fmt;

use aws_lc_rs::digest as lc;
use md5::{Digest as _, Md5};
use rayon::prelude::*;

use crate::error::BackendError;

/// The per-block hash of a parallel Merkle-Damgård digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PmdHash {
    /// The seed's choice.
    Md5,
    Sha256,
}

impl PmdHash {
    pub fn name(&self) -> &'static str {
        match self {
            PmdHash::Md5 => "pmd-md5",
            PmdHash::Sha256 => "pmd-sha256",
        }
    }

    /// Digest bytes of the underlying hash.
    pub fn len(&self) -> usize {
        match self {
            PmdHash::Md5 => 16,
            PmdHash::Sha256 => 32,
        }
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// The plain hash of `data` (a block, or the digest list).
    pub fn hash(&self, data: &[u8]) -> Vec<u8> {
        match self {
            PmdHash::Md5 => Md5::digest(data).to_vec(),
            PmdHash::Sha256 => lc::digest(&lc::SHA256, data).as_ref().to_vec(),
        }
    }
}

/// A parallel Merkle-Damgård digest: `hash(hash(block 0) ‖ hash(block 1)
/// ‖ ...)` over blocks of `block` bytes (the last may be shorter; an empty
/// buffer is one empty block). Never equal in kind to a plain digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PmdDigest {
    pub hash: PmdHash,
    pub block: u32,
    pub value: Vec<u8>,
}

impl fmt::Display for PmdDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:", self.hash.name(), self.block)?;
        for b in &self.value {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The seed's sliding-window parameters and their bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowParams {
    window: u32,
    step: u32,
}

impl WindowParams {
    /// Fig. 14: "hash every 20 bytes with offset of 4 bytes".
    pub const SEED: WindowParams = WindowParams {
        window: 20,
        step: 4,
    };

    /// `window` and `step` in bytes, both at least 1.
    pub fn new(window: u32, step: u32) -> Result<Self, BackendError> {
        if window == 0 || step == 0 {
            return Err(BackendError::InvalidJob(format!(
                "sliding window {window} bytes, step {step}: both must be at least 1"
            )));
        }
        Ok(Self { window, step })
    }

    pub fn window(&self) -> u32 {
        self.window
    }

    pub fn step(&self) -> u32 {
        self.step
    }

    /// Number of windows in `len` bytes (whole windows only).
    pub fn windows_in(&self, len: u64) -> u64 {
        if len < self.window as u64 {
            0
        } else {
            (len - self.window as u64) / self.step as u64 + 1
        }
    }
}

/// Checks a block size; shared with the GPU version.
pub(crate) fn check_block(block: u32) -> Result<(), BackendError> {
    if block == 0 {
        return Err(BackendError::InvalidJob(
            "parallel Merkle-Damgård block size must be at least 1 byte".into(),
        ));
    }
    Ok(())
}

/// The blocks of `len` bytes: an empty buffer is one empty block.
pub(crate) fn blocks_in(len: u64, block: u32) -> u64 {
    len.div_ceil(block as u64).max(1)
}

/// The parallel Merkle-Damgård digest of `data`, blocks hashed in parallel.
pub fn pmd_digest(hash: PmdHash, block: u32, data: &[u8]) -> Result<PmdDigest, BackendError> {
    check_block(block)?;
    let digests: Vec<Vec<u8>> = if data.is_empty() {
        vec![hash.hash(&[])]
    } else {
        data.par_chunks(block as usize)
            .map(|b| hash.hash(b))
            .collect()
    };
    Ok(finish(hash, block, &digests.concat()))
}

/// The final hash over the concatenated block digests.
pub(crate) fn finish(hash: PmdHash, block: u32, list: &[u8]) -> PmdDigest {
    PmdDigest {
        hash,
        block,
        value: hash.hash(list),
    }
}

/// The MD5 of the window at `offset` (a pattern to look for).
pub fn window_md5(params: &WindowParams, data: &[u8], offset: usize) -> Option<[u8; 16]> {
    let w = data.get(offset..offset.checked_add(params.window as usize)?)?;
    Some(Md5::digest(w).into())
}

/// Offsets, ascending, of the windows whose MD5 is one of `patterns`.
pub fn window_matches(params: &WindowParams, data: &[u8], patterns: &[[u8; 16]]) -> Vec<u64> {
    let set: HashSet<[u8; 16]> = patterns.iter().copied().collect();
    let n = params.windows_in(data.len() as u64) as usize;
    let (w, s) = (params.window as usize, params.step as usize);
    (0..n)
        .into_par_iter()
        .with_min_len(4096)
        .map(|k| k * s)
        .filter(|&o| {
            let d: [u8; 16] = Md5::digest(&data[o..o + w]).into();
            set.contains(&d)
        })
        .map(|o| o as u64)
        .collect()
}
