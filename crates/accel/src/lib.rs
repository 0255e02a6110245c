//! gvault-accel: the per-byte primitives of gvault (AES-256-GCM and -CTR,
//! BLAKE3, SHA-256, MD5, CRC32/CRC32C, FastCDC chunking, TEA, Blowfish, RSA)
//! behind one batch API.
//!
//! - [`job`]: a [`Job`] is one operation over many segments; results come back
//!   per segment ([`Output`] or a typed [`SegmentError`]).
//! - [`types`]: keys, nonces, IVs and tags as distinct types.
//! - [`Backend`]: what every executor implements. [`cpu::CpuBackend`] runs
//!   jobs on all cores with well-kept crates; [`gpu::GpuBackend`] on NVIDIA
//!   GPUs; [`AutoBackend`] chooses between them (or splits) per job by a
//!   calibrated cost model. Callers never change.

pub mod auto;
pub mod backend;
pub mod cdc_resolve;
pub mod chunking;
pub mod cpu;
pub mod error;
pub mod gpu;
pub mod job;
pub mod rsa_key;
pub mod seed001;
pub mod sysinfo;
pub mod tuning;
pub mod types;

pub use auto::{AutoBackend, CpuThreads};
pub use backend::Backend;
pub use chunking::{ChunkParams, ChunkParamsError};
pub use error::{BackendError, KeyError, SegmentError, SegmentErrorKind};
pub use job::{
    ChunkSpan, CtrCipher, CtrSegment, Data, DataMut, DeviceSlice, Digest, DigestAlgo,
    DigestedChunk, Job, OpKind, OpenSegment, Output, SealSegment, SegmentResult, MAX_SEGMENT_LEN,
};
pub use rsa_key::RsaPrivateKey;
pub use types::{Aes256Key, Blake3Key, BlowfishKey, CtrIv, Iv128, Iv64, Nonce96, Tag, TeaKey};
