//! gvault-accel: the per-byte primitives of gvault (AES-256-GCM and -CTR,
//! BLAKE3, SHA-256, MD5, CRC32/CRC32C, FastCDC chunking, TEA, Blowfish, RSA)
//! behind one batch API.
//!
//! # Public API
//!
//! Everything a caller needs is at the crate root:
//!
//! - The batch API: a [`Job`] is one operation over many segments (cipher
//!   segments [`SealSegment`], [`OpenSegment`], [`CtrSegment`] transformed
//!   in place; digest and chunk segments read as [`Data`]); results come
//!   back per segment ([`SegmentResult`]: an [`Output`] or a typed
//!   [`SegmentError`]), and a job that cannot run at all is a
//!   [`BackendError`].
//! - Keys, nonces, IVs and tags as distinct types ([`Aes256Key`],
//!   [`Nonce96`], [`Tag`], [`CtrIv`], ...): secret keys are wiped on drop
//!   and never printed; public values are built through their
//!   constructors and read through `as_bytes`.
//! - [`Backend`]: what every executor implements: [`Backend::run`] for a
//!   job, [`Backend::seal_block`] / [`Backend::open_block`] for one
//!   AES-GCM block. Callers never ask which backend they hold: small work
//!   runs on the calling thread where that is cheapest (CPU, auto), a GPU
//!   backend takes every job.
//! - The backends: [`CpuBackend`] (all cores, well-kept crates),
//!   [`GpuBackend`] (NVIDIA GPUs), and [`AutoBackend`], which chooses
//!   between them (or splits) per job by a calibrated cost model;
//!   [`AutoBackend::shared`] is the process's default backend.
//! - [`PinnedBuffer`]: page-locked host memory from
//!   [`Backend::alloc_host`], for callers that fill what a GPU will read.
//! - [`DeviceCopy`]: copies between host and GPU memory on the GPU's copy
//!   engines ([`Backend::copy_device`]), for callers that keep job data
//!   on a device (the checkpoints).
//! - [`auto`]: the cost model behind [`AutoBackend`] (`auto::CostModel`,
//!   `auto::Decision`) and its calibration.
//! - Diagnostics for `gvault doctor` and `gvault bench link`:
//!   [`cpu_info`], [`nvrtc_version`], [`KERNEL_SOURCES`] /
//!   [`compile_kernel`], [`measure_link`].
//! - [`seed001`]: seed 001's hashes, for reproducing that paper.
//!
//! The `cpu` and `gpu` modules are the backends' internals; they stay
//! reachable (hidden from the docs) only for accel's own tests and the
//! calibration, which check internals against references.

pub mod auto;
mod backend;
// The CPU twin of the GPU's FastCDC boundary resolution. Product code uses
// only its masks (gpu/cdc.rs); the rest is public and hidden so that it
// is not dead code to the compiler: it is what the GPU walk is specified
// against, and moving it under tests is the GPU side's call.
#[doc(hidden)]
pub mod cdc_resolve;
mod chunking;
// The CPU backend's internals (TEA and Blowfish block functions, the GCM
// cut rule): reachable, hidden, for accel's vector tests and the
// calibration. Callers use `CpuBackend` at the root.
#[doc(hidden)]
pub mod cpu;
mod error;
// Entry points for the fuzz targets in fuzz/ (never on in a shipped build).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
// The GPU backend's internals (kernel sources and cache, device memory,
// link measurement): reachable, hidden, for accel's GPU tests and the
// calibration. Callers use `GpuBackend` and the diagnostics at the root.
#[doc(hidden)]
pub mod gpu;
mod job;
// The host side of RSA batches (checks, blinding, ordering, verification)
// for the GPU kernels and their CPU emulation; hidden, public for the
// tests that drive it with a faulty executor.
#[doc(hidden)]
pub mod rsa_batch;
mod rsa_emu;
mod rsa_ifma;
mod rsa_key;
mod rsa_mont;
pub mod seed001;
mod sysinfo;
pub mod tuning;
mod types;

pub use auto::{AutoBackend, CpuThreads};
pub use backend::Backend;
pub use chunking::{ChunkParams, ChunkParamsError};
pub use cpu::CpuBackend;
pub use error::{BackendError, BlockError, KeyError, SegmentError, SegmentErrorKind};
pub use gpu::kernels::{
    compile as compile_kernel, nvrtc_version, KernelSource, SOURCES as KERNEL_SOURCES,
};
pub use gpu::link::{
    measure as measure_link, measure_bidirectional as measure_link_bidirectional, LinkFigure,
};
pub use gpu::{Device, DeviceAllocation, DeviceCopy, GpuBackend, HostRegistration, PinnedBuffer};
pub use job::{
    ChunkSpan, CtrCipher, CtrSegment, Data, DataMut, DeviceSlice, Digest, DigestAlgo,
    DigestedChunk, Job, OpKind, OpenSegment, Output, SealSegment, SegmentResult, MAX_SEGMENT_LEN,
};
pub use rsa_batch::{RsaItem, RsaOptions, RsaSort};
pub use rsa_key::{RsaPrivateKey, BATCH_KEY_BITS as RSA_BATCH_KEY_BITS};
pub use sysinfo::{cpu_info, CpuInfo};
pub use types::{Aes256Key, Blake3Key, BlowfishKey, CtrIv, Iv128, Iv64, Nonce96, Tag, TeaKey};
