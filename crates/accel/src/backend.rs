//! The one trait every backend implements: CPU, GPU, the dispatcher that
//! chooses between them, and (later) the client of the shared service.
//!
//! Callers never ask which backend they hold: each one runs what is cheap
//! to run on the calling thread there (the CPU and auto backends run small
//! AES-GCM jobs and single blocks inline; a GPU backend takes every job).

use std::sync::{Arc, OnceLock};

use crate::auto::AutoBackend;
use crate::cpu::CpuBackend;
use crate::error::{BackendError, BlockError, SegmentErrorKind};
use crate::gpu::{HostRegistration, PinnedBuffer};
use crate::job::{DataMut, Job, OpenSegment, Output, SealSegment, SegmentResult, MAX_SEGMENT_LEN};
use crate::types::{Aes256Key, Nonce96, Tag};

pub trait Backend: Send + Sync {
    /// A short name for logs and benchmark columns ("cpu", "gpu", "auto").
    fn name(&self) -> &'static str;

    /// Runs a job. `Err` means the job could not run at all; otherwise there
    /// is one result per segment, in order.
    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError>;

    /// Whether small AES-GCM work (one block up to 1 MiB, a seal group up
    /// to 256 KiB) runs on the calling thread on the CPU, outside the job
    /// API: true for the CPU and auto backends, where that is what a job
    /// would do anyway; false (every block a job) for the others.
    fn small_gcm_on_caller(&self) -> bool {
        false
    }

    /// `len` bytes of page-locked host memory that this backend's GPU reads
    /// by DMA, for callers that fill buffers the backend will take (a
    /// pageable buffer costs a CPU copy into staging first); `None` where
    /// no GPU is in use, where ordinary memory does as well.
    fn alloc_host(&self, _len: usize) -> Option<PinnedBuffer> {
        None
    }

    /// Page-locks memory the caller mapped (the service's shared buffers)
    /// and registers it with this backend's GPU, so that jobs over it move
    /// by DMA with no staging copy; `None` where no GPU is in use (the
    /// memory then serves as it is).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must stay mapped until the registration drops.
    unsafe fn register_host(
        &self,
        _ptr: *mut u8,
        _len: usize,
    ) -> Option<Result<HostRegistration, BackendError>> {
        None
    }

    /// `len` bytes of memory on GPU `device`, not initialised: scratch and
    /// device-resident data for callers without a framework of their own
    /// (the checkpoint engine's workers, benchmarks). `None` where no GPU
    /// is in use.
    fn alloc_on_device(
        &self,
        _device: u32,
        _len: usize,
    ) -> Option<Result<crate::gpu::DeviceAllocation, BackendError>> {
        None
    }

    /// Copies bytes on GPU `device`'s copy engines (host to device, device
    /// to host, device to device), in order, and waits for them: how callers
    /// move device-resident job data around without a framework of their
    /// own. `None` where no GPU is in use.
    ///
    /// # Safety
    /// Every range is valid for its length (memory of that GPU, or host
    /// memory), and nothing writes a destination or frees a range until
    /// this returns.
    unsafe fn copy_device(
        &self,
        _device: u32,
        _copies: &[crate::gpu::DeviceCopy],
    ) -> Option<Result<(), BackendError>> {
        None
    }

    /// Seals one block in place with AES-256-GCM and returns its tag: a
    /// one-segment seal job, which the CPU and auto backends run on the
    /// calling thread without a job's allocations (a store's block writes
    /// and key registry).
    fn seal_block(
        &self,
        key: &Aes256Key,
        nonce: Nonce96,
        aad: &[u8],
        data: &mut [u8],
    ) -> Result<Tag, BlockError> {
        if self.small_gcm_on_caller() && crate::cpu::block_runs_on_caller(data.len()) {
            return Ok(crate::cpu::seal_on_caller(key, nonce, aad, data));
        }
        seal_block_as_job(self, key, nonce, aad, data)
    }

    /// Seals `segments` in place as one seal job and puts each one's tag
    /// in `tags` (as many as segments): a writer's small group of blocks.
    /// The CPU and auto backends seal a small group on the calling thread
    /// without a job's allocations; other backends run one [`Job::Seal`].
    /// The first segment that fails fails the call.
    fn seal_blocks(
        &self,
        key: &Aes256Key,
        segments: &mut [SealSegment<'_>],
        tags: &mut [Tag],
    ) -> Result<(), BlockError> {
        if self.small_gcm_on_caller() {
            if let Some(done) = crate::cpu::seal_blocks_on_caller(key, segments, tags) {
                return done;
            }
        }
        seal_blocks_as_job(self, key, segments, tags)
    }

    /// Opens one block in place (see [`Backend::seal_block`]); on a bad tag
    /// the block is zeroed and the error says so
    /// ([`BlockError::is_authentication_failure`]).
    fn open_block(
        &self,
        key: &Aes256Key,
        nonce: Nonce96,
        aad: &[u8],
        tag: Tag,
        data: &mut [u8],
    ) -> Result<(), BlockError> {
        if self.small_gcm_on_caller() && crate::cpu::block_runs_on_caller(data.len()) {
            return Ok(crate::cpu::open_on_caller(key, nonce, aad, tag, data)?);
        }
        open_block_as_job(self, key, nonce, aad, tag, data)
    }
}

/// The one result of a one-segment job.
fn only_result(results: Vec<SegmentResult>) -> Result<Output, BlockError> {
    let n = results.len();
    let mut it = results.into_iter();
    match (it.next(), n) {
        (Some(r), 1) => r.map_err(|e| BlockError::Block(e.kind)),
        _ => Err(BlockError::Backend(BackendError::Device(format!(
            "a one-segment job returned {n} results"
        )))),
    }
}

/// [`Backend::seal_block`] as a one-segment job of `backend`.
fn seal_block_as_job<B: Backend + ?Sized>(
    backend: &B,
    key: &Aes256Key,
    nonce: Nonce96,
    aad: &[u8],
    data: &mut [u8],
) -> Result<Tag, BlockError> {
    let mut job = Job::Seal {
        key,
        segments: vec![SealSegment {
            nonce,
            aad,
            data: DataMut::Host(data),
        }],
    };
    let out = only_result(backend.run(&mut job)?)?;
    out.tag().ok_or_else(|| {
        BlockError::Backend(BackendError::Device(
            "a seal job returned no tag".to_string(),
        ))
    })
}

/// [`Backend::seal_blocks`] as one seal job of `backend`.
fn seal_blocks_as_job<B: Backend + ?Sized>(
    backend: &B,
    key: &Aes256Key,
    segments: &mut [SealSegment<'_>],
    tags: &mut [Tag],
) -> Result<(), BlockError> {
    if tags.len() != segments.len() {
        return Err(BlockError::Backend(BackendError::InvalidJob(format!(
            "{} tags for {} segments",
            tags.len(),
            segments.len()
        ))));
    }
    let mut job = Job::Seal {
        key,
        segments: segments
            .iter_mut()
            .map(|s| SealSegment {
                nonce: s.nonce,
                aad: s.aad,
                data: match &mut s.data {
                    DataMut::Host(b) => DataMut::Host(b),
                    DataMut::Device(d) => DataMut::Device(*d),
                },
            })
            .collect(),
    };
    let results = backend.run(&mut job)?;
    if results.len() != tags.len() {
        return Err(BlockError::Backend(BackendError::Device(format!(
            "a seal job of {} segments returned {} results",
            tags.len(),
            results.len()
        ))));
    }
    for (tag, r) in tags.iter_mut().zip(results) {
        *tag = r
            .map_err(|e| BlockError::Block(e.kind))?
            .tag()
            .ok_or_else(|| {
                BlockError::Backend(BackendError::Device("a seal job returned no tag".into()))
            })?;
    }
    Ok(())
}

/// [`Backend::open_block`] as a one-segment job of `backend`.
fn open_block_as_job<B: Backend + ?Sized>(
    backend: &B,
    key: &Aes256Key,
    nonce: Nonce96,
    aad: &[u8],
    tag: Tag,
    data: &mut [u8],
) -> Result<(), BlockError> {
    let mut job = Job::Open {
        key,
        segments: vec![OpenSegment {
            nonce,
            aad,
            tag,
            data: DataMut::Host(data),
        }],
    };
    only_result(backend.run(&mut job)?).map(|_| ())
}

impl CpuBackend {
    /// One CPU backend on every core, shared by the process: what callers
    /// that want the CPU alone use (its thread pool is not free to build).
    pub fn shared() -> Arc<CpuBackend> {
        static CPU: OnceLock<Arc<CpuBackend>> = OnceLock::new();
        CPU.get_or_init(|| Arc::new(CpuBackend::new())).clone()
    }
}

impl AutoBackend {
    /// The default backend, one per process ([`AutoBackend::new`]): every
    /// caller shares its CPU pool, its GPU and its queues, so that its
    /// choices see all the work in flight. Building it opens nothing (no
    /// thread pool, no GPU, no model file) until the first job.
    pub fn shared() -> Arc<AutoBackend> {
        static AUTO: OnceLock<Arc<AutoBackend>> = OnceLock::new();
        AUTO.get_or_init(|| Arc::new(AutoBackend::new())).clone()
    }
}

/// Checks that every backend applies before touching data, so that all of
/// them reject the same segments with the same errors. Returns, per segment,
/// `Some(error)` for a segment that must not be processed.
pub fn precheck(job: &Job<'_>) -> Vec<Option<SegmentErrorKind>> {
    let too_large = |len: usize| {
        (len as u64 > MAX_SEGMENT_LEN).then_some(SegmentErrorKind::TooLarge {
            len: len as u64,
            max: MAX_SEGMENT_LEN,
        })
    };
    match job {
        Job::Seal { segments, .. } => segments.iter().map(|s| too_large(s.data.len())).collect(),
        Job::Open { segments, .. } => segments.iter().map(|s| too_large(s.data.len())).collect(),
        Job::Ctr { cipher, segments } => segments
            .iter()
            .map(|s| {
                if s.iv.len() != cipher.iv_len() {
                    Some(SegmentErrorKind::IvLength {
                        expected: cipher.iv_len(),
                        got: s.iv.len(),
                    })
                } else {
                    too_large(s.data.len())
                }
            })
            .collect(),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => {
            segments.iter().map(|s| too_large(s.len())).collect()
        }
        Job::RsaPrivate { key, segments } => {
            segments.iter().map(|s| rsa_input_error(key, s)).collect()
        }
        Job::RsaPrivateKeys { items } => items
            .iter()
            .map(|it| rsa_input_error(it.key, it.input))
            .collect(),
    }
}

/// An RSA input must be exactly the modulus length.
pub(crate) fn rsa_input_error(
    key: &crate::RsaPrivateKey,
    input: &[u8],
) -> Option<SegmentErrorKind> {
    (input.len() != key.size()).then_some(SegmentErrorKind::InputLength {
        expected: key.size(),
        got: input.len(),
    })
}
