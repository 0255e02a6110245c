//! The GPU backend: the same batch API as the CPU backend, run on every
//! visible NVIDIA GPU through cudarc (driver API + NVRTC, loaded at run
//! time). No driver, no device or no NVRTC means `probe` returns one clear
//! reason and callers use the CPU backend; nothing here panics for that.
//!
//! - `kernels`: embedded .cu sources, NVRTC compilation, on-disk cache.
//! - `abi`: the descriptor structs and constants shared with the kernels.
//! - `launch`: typed kernel launches, every kernel's parameters declared once.
//! - `runtime`: devices, streams, pinned staging slots.
//! - `ctr`: CTR-mode jobs (AES-256, TEA, Blowfish) for host and device-resident data.
//! - `gcm`: AES-256-GCM seal/open: the CTR pipeline plus a parallel GHASH pass.
//! - `digest`, `blake3`, `serial`, `cdc`, `chunk_digest`: hashing and chunking;
//!   `crc_cut` cuts the CRCs' long segments into pieces and combines them.
//! - `seed001`: seed 001's parallel Merkle-Damgård and sliding-window hashing.
//! - `rsa`: RSA private-key batches (CRT), host side in `crate::rsa_batch`;
//!   large batches run as GPU-filling pieces, two at a time a GPU.

mod abi;
mod blake3;
mod blowfish_schedule;
mod cdc;
mod chunk_digest;
mod crc_cut;
mod ctr;
mod digest;
mod gcm;
mod host_copy;
pub mod kernels;
pub mod key_schedule;
mod launch;
pub mod link;
mod rsa;
mod runtime;
mod seed001;
mod serial;
mod serial_pinned;
mod stage;

use std::sync::atomic::Ordering;

use crate::backend::{precheck, Backend};
use crate::error::{BackendError, SegmentErrorKind};
use crate::job::{CtrCipher, Data, DataMut, Job, Output, SegmentResult};
use crate::types::{Aes256Key, CtrIv};
use abi::{
    AES_CTR_K, AES_CTR_V2_K, AES_TAB_X32X4_BYTES, BF_CTR_K, BF_CTR_V2_K, BF_X32_BYTES, TEA_CTR_K,
};
use launch::{
    AesCtrArgs, BlowfishCtrArgs, GcmCtrArgs, Kernel, AES256_CTR, AES256_CTR_V2, AES256_GCM_CTR,
    AES256_GCM_CTR_V2, BLOWFISH_CTR, BLOWFISH_CTR_V2, TEA_CTR,
};

pub use runtime::{arch_name, Device, HostRegistration, PinnedBuffer};

/// One copy of [`Backend::copy_device`]: `len` bytes from `src` to `dst`,
/// each an address in CUDA's unified address space (a device pointer, or
/// a host pointer, fastest when page-locked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCopy {
    pub dst: u64,
    pub src: u64,
    pub len: usize,
}

pub struct GpuBackend {
    devices: Vec<Device>,
    /// Makes choosing a device and booking the job's bytes on it one step,
    /// so concurrent jobs spread over the GPUs instead of racing to one.
    placing: std::sync::Mutex<()>,
}

/// Why the GPU backend is not available, in one line.
pub fn probe_libraries() -> Result<(), String> {
    // SAFETY: these only try to dlopen the libraries; they never panic.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver (libcuda.so) found".into());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("no NVRTC (libnvrtc.so.13) found".into());
    }
    Ok(())
}

impl GpuBackend {
    /// The CUDA driver's version (e.g. 13000), for matching a calibration
    /// to the machine.
    pub(crate) fn driver_version(&self) -> Option<i32> {
        let mut v: std::ffi::c_int = 0;
        // SAFETY: a GpuBackend exists only once libcuda is loaded and
        // initialised; the call writes one int through a valid pointer.
        let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
        (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some(v)
    }
}

/// Whether `data` lies in page-locked host memory (the auto backend's
/// pinned-or-pageable cost choice). False where the CUDA driver is absent
/// or not initialised: memory can only be page-locked through it.
pub(crate) fn host_page_locked(data: &[u8]) -> bool {
    static DRIVER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    // SAFETY: only tries to dlopen the driver; never panics.
    *DRIVER.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
        && runtime::is_page_locked(data.as_ptr(), data.len())
}

impl GpuBackend {
    /// Opens every visible GPU and compiles the kernels, or says why not.
    pub fn probe() -> Result<GpuBackend, String> {
        probe_libraries()?;
        cudarc::driver::result::init().map_err(|e| format!("CUDA driver init failed: {e:?}"))?;
        let count = cudarc::driver::result::device::get_count()
            .map_err(|e| format!("counting devices: {e:?}"))?;
        if count <= 0 {
            return Err("the CUDA driver sees no device".into());
        }
        let devices = (0..count as usize)
            .map(Device::open)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GpuBackend {
            devices,
            placing: std::sync::Mutex::new(()),
        })
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device holding the job's device-resident data, else the one
    /// with the least queued work (ties: the lowest ordinal); the job's
    /// bytes are booked on it until the guard drops.
    fn place(&self, job: &Job<'_>) -> (&Device, runtime::OutstandingGuard<'_>) {
        let _one_at_a_time = self.placing.lock().unwrap_or_else(|p| p.into_inner());
        let dev = device_of(job)
            .and_then(|ord| self.devices.iter().find(|d| d.ordinal == ord as usize))
            .unwrap_or_else(|| {
                self.devices
                    .iter()
                    .min_by_key(|d| d.outstanding.load(Ordering::Relaxed))
                    .expect("probe guarantees at least one device")
            });
        dev.jobs.fetch_add(1, Ordering::Relaxed);
        (dev, runtime::record_outstanding(dev, job.bytes()))
    }
}

/// One RSA input on the CPU (a key the batch kernels do not take), or its
/// precheck error.
fn rsa_on_cpu(
    i: usize,
    key: &crate::RsaPrivateKey,
    input: &[u8],
    pre: &[Option<SegmentErrorKind>],
) -> SegmentResult {
    match &pre[i] {
        Some(kind) => Err(kind.clone().at(i)),
        None => crate::cpu::rsa_private_op(key, input)
            .map(Output::Bytes)
            .map_err(|k| k.at(i)),
    }
}

/// The device named by the first device-resident segment, if any.
fn device_of(job: &Job<'_>) -> Option<u32> {
    match job {
        Job::Ctr { segments, .. } => segments.iter().find_map(|s| match &s.data {
            DataMut::Device(d) => Some(d.device()),
            _ => None,
        }),
        Job::Seal { segments, .. } => segments.iter().find_map(|s| match &s.data {
            DataMut::Device(d) => Some(d.device()),
            _ => None,
        }),
        Job::Open { segments, .. } => segments.iter().find_map(|s| match &s.data {
            DataMut::Device(d) => Some(d.device()),
            _ => None,
        }),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => segments.iter().find_map(|s| match s {
            Data::Device(d) => Some(d.device()),
            _ => None,
        }),
        Job::RsaPrivate { .. } | Job::RsaPrivateKeys { .. } => None,
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Option<Result<HostRegistration, BackendError>> {
        // SAFETY: the trait's contract is GpuBackend::register_host's.
        Some(unsafe { GpuBackend::register_host(self, ptr, len) })
    }

    fn alloc_host(&self, len: usize) -> Option<PinnedBuffer> {
        self.alloc_pinned(len).ok()
    }

    fn alloc_on_device(
        &self,
        device: u32,
        len: usize,
    ) -> Option<Result<DeviceAllocation, BackendError>> {
        Some(self.alloc_device(device as usize, len, &[]))
    }

    unsafe fn copy_device(
        &self,
        device: u32,
        copies: &[DeviceCopy],
    ) -> Option<Result<(), BackendError>> {
        let Some(dev) = self.devices.iter().find(|d| d.ordinal == device as usize) else {
            return Some(Err(BackendError::InvalidJob(format!("no GPU {device}"))));
        };
        // SAFETY: the trait's contract is Device::copy's.
        Some(
            unsafe { dev.copy(copies) }.map_err(|e| {
                BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name))
            }),
        )
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        let pre = precheck(job);
        let (dev, _queued) = self.place(job);
        match job {
            Job::Ctr { cipher, segments } => {
                let device_err = |e: String| {
                    BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name))
                };
                let (shape, key_parts) = ctr_shape(cipher);
                if !shape.loaded(dev) {
                    return Err(BackendError::Unsupported {
                        backend: "gpu",
                        op: cipher.op(),
                    });
                }
                dev.bind().map_err(device_err)?;
                let key_bufs = key_parts
                    .iter()
                    .map(|part| {
                        let b = dev.alloc(part.len())?;
                        runtime::upload(b.ptr, part)?;
                        Ok(b)
                    })
                    .collect::<Result<Vec<_>, String>>()
                    .map_err(device_err)?;
                let key_ptrs: Vec<u64> = key_bufs.iter().map(|b| b.ptr).collect();
                let kernel = shape.with_keys(&key_ptrs).map_err(device_err)?;
                let unit = cipher.iv_len();
                let mut host = Vec::new();
                let mut resident = Vec::new();
                let mut results: Vec<SegmentResult> = Vec::with_capacity(segments.len());
                for (i, (seg, pre)) in segments.iter_mut().zip(pre).enumerate() {
                    if let Some(kind) = pre {
                        results.push(Err(kind.at(i)));
                        continue;
                    }
                    let iv = match seg.iv {
                        CtrIv::B128(iv) => *iv.as_bytes(),
                        CtrIv::B64(iv) => {
                            let mut b = [0u8; 16];
                            b[..8].copy_from_slice(iv.as_bytes());
                            b
                        }
                    };
                    match &mut seg.data {
                        DataMut::Host(buf) => {
                            if !buf.is_empty() {
                                host.push(ctr::Piece {
                                    ptr: buf.as_mut_ptr(),
                                    len: buf.len(),
                                    iv,
                                });
                            }
                            results.push(Ok(Output::Done));
                        }
                        DataMut::Device(d) => {
                            if d.device() as usize != dev.ordinal || d.ptr() % 16 != 0 {
                                results.push(Err(SegmentErrorKind::Internal(
                                    "device segment must be 16-byte aligned and on the job's device".into(),
                                )
                                .at(i)));
                            } else {
                                if !d.is_empty() {
                                    resident.push((d.ptr(), d.len(), iv));
                                }
                                results.push(Ok(Output::Done));
                            }
                        }
                    }
                }
                if !resident.is_empty() {
                    ctr::run_device(dev, &kernel, unit, &resident).map_err(device_err)?;
                }
                if !host.is_empty() {
                    ctr::run_host(dev, &kernel, unit, &host).map_err(device_err)?;
                }
                Ok(results)
            }
            Job::Seal { key, segments } => {
                let (items, misplaced) = gcm_items(
                    segments
                        .iter_mut()
                        .map(|s| (*s.nonce.as_bytes(), s.aad, None, &mut s.data)),
                    dev.ordinal,
                );
                run_gcm(dev, key, true, items, misplaced, pre)
            }
            Job::Open { key, segments } => {
                let (items, misplaced) = gcm_items(
                    segments.iter_mut().map(|s| {
                        (
                            *s.nonce.as_bytes(),
                            s.aad,
                            Some(*s.tag.as_bytes()),
                            &mut s.data,
                        )
                    }),
                    dev.ordinal,
                );
                run_gcm(dev, key, false, items, misplaced, pre)
            }
            Job::Digest { algo, segments } => digest::run(dev, algo, segments, pre),
            Job::Chunk { params, segments } => digest::run_chunk(dev, params, segments, pre),
            Job::ChunkDigest {
                params,
                key,
                crc32c,
                segments,
            } => digest::run_chunk_digest(dev, params, key, *crc32c, segments, pre),
            Job::RsaPrivate { key, segments } if key.batch_kernels_take() => {
                let items: Vec<crate::rsa_batch::RsaItem<'_>> = segments
                    .iter()
                    .map(|input| crate::rsa_batch::RsaItem { key, input })
                    .collect();
                self.rsa_batch_from(dev, &items, crate::rsa_batch::RsaOptions::default())
            }
            // A key size the kernels do not take (e.g. 3072 bits): the CPU
            // path, so that a job never fails for its key size.
            Job::RsaPrivate { key, segments } => Ok(segments
                .iter()
                .enumerate()
                .map(|(i, input)| rsa_on_cpu(i, key, input, &pre))
                .collect()),
            // Many keys: the items whose keys the kernels take in one batch,
            // the rest on the CPU; results in item order.
            Job::RsaPrivateKeys { items } => {
                let (gpu, cpu): (Vec<usize>, Vec<usize>) = (0..items.len())
                    .partition(|&i| pre[i].is_none() && items[i].key.batch_kernels_take());
                let mut results: Vec<Option<SegmentResult>> = vec![None; items.len()];
                if !gpu.is_empty() {
                    let batch: Vec<_> = gpu.iter().map(|&i| items[i]).collect();
                    let done =
                        self.rsa_batch_from(dev, &batch, crate::rsa_batch::RsaOptions::default())?;
                    for (&i, r) in gpu.iter().zip(done) {
                        results[i] = Some(r.map_err(|e| e.kind.at(i)));
                    }
                }
                for i in cpu {
                    results[i] = Some(rsa_on_cpu(i, items[i].key, items[i].input, &pre));
                }
                results
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| {
                        r.ok_or_else(|| {
                            BackendError::Device(format!("RSA job: no result for item {i}"))
                        })
                    })
                    .collect()
            }
        }
    }
}

/// A CTR kernel and its launch shape, before its key pointers exist.
struct CtrShape {
    kernel: CtrFn,
    block: u32,
    shared: u32,
    units_per_thread: u64,
    blocks_per_sm: u32,
}

/// The CTR kernel of a shape (AES: with GCM's twin of the same tables).
#[derive(Clone, Copy)]
enum CtrFn {
    Aes(Kernel<AesCtrArgs>, Kernel<GcmCtrArgs>),
    Tea,
    Blowfish(Kernel<BlowfishCtrArgs>),
}

impl CtrShape {
    fn loaded(&self, dev: &Device) -> bool {
        match self.kernel {
            CtrFn::Aes(k, _) => dev.loaded(k),
            CtrFn::Tea => dev.loaded(TEA_CTR),
            CtrFn::Blowfish(k) => dev.loaded(k),
        }
    }

    /// The kernel with its key buffers (`ctr_shape`'s key parts, in order).
    fn with_keys(&self, keys: &[u64]) -> Result<ctr::CtrKernel, String> {
        let keys = match (self.kernel, keys) {
            (CtrFn::Aes(kernel, gcm), &[rk]) => ctr::CtrKeys::Aes { kernel, gcm, rk },
            (CtrFn::Tea, &[key]) => ctr::CtrKeys::Tea { key },
            (CtrFn::Blowfish(kernel), &[pbox, sbox]) => {
                ctr::CtrKeys::Blowfish { kernel, pbox, sbox }
            }
            _ => return Err("key parts do not match the CTR kernel (internal error)".into()),
        };
        Ok(ctr::CtrKernel {
            keys,
            block: self.block,
            shared: self.shared,
            units_per_thread: self.units_per_thread,
            blocks_per_sm: self.blocks_per_sm,
        })
    }
}

/// Which table layout the table ciphers use: "wide" = the 1024-thread
/// kernels with 32 conflict-free table copies in 128 KiB of shared memory,
/// "narrow" = the 256-thread ones (kernels/README.md). Defaults are the
/// faster of each pair as measured on an H200 (bench/JOURNAL.md);
/// `GVAULT_GPU_TABLES=wide|narrow` overrides, for measuring both.
fn wide_tables(default: bool) -> bool {
    crate::tuning::tuning().gpu_tables.unwrap_or(default)
}

fn aes_ctr_shape() -> CtrShape {
    if wide_tables(true) {
        CtrShape {
            kernel: CtrFn::Aes(AES256_CTR, AES256_GCM_CTR),
            block: 1024,
            shared: AES_TAB_X32X4_BYTES,
            units_per_thread: AES_CTR_K as u64,
            blocks_per_sm: 1,
        }
    } else {
        CtrShape {
            kernel: CtrFn::Aes(AES256_CTR_V2, AES256_GCM_CTR_V2),
            block: 256,
            shared: 0,
            units_per_thread: AES_CTR_V2_K as u64,
            blocks_per_sm: 6,
        }
    }
}

/// The kernel for a CTR cipher and its key material as the kernel reads it
/// (one device buffer per key argument, in the kernel's order).
fn ctr_shape(cipher: &CtrCipher<'_>) -> (CtrShape, Vec<Vec<u8>>) {
    match cipher {
        CtrCipher::Aes256(k) => (
            aes_ctr_shape(),
            vec![key_schedule::aes256_expand(k.expose())
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .collect()],
        ),
        CtrCipher::Tea(k) => (
            CtrShape {
                kernel: CtrFn::Tea,
                block: 256,
                shared: 0,
                units_per_thread: TEA_CTR_K as u64,
                blocks_per_sm: 6,
            },
            vec![k.words().iter().flat_map(|w| w.to_ne_bytes()).collect()],
        ),
        CtrCipher::Blowfish(k) => {
            let (p, s) = blowfish_schedule::Schedule::new(k.expose()).device_bytes();
            let shape = if wide_tables(true) {
                CtrShape {
                    kernel: CtrFn::Blowfish(BLOWFISH_CTR),
                    block: 1024,
                    shared: BF_X32_BYTES,
                    units_per_thread: BF_CTR_K as u64,
                    blocks_per_sm: 1,
                }
            } else {
                CtrShape {
                    kernel: CtrFn::Blowfish(BLOWFISH_CTR_V2),
                    block: 256,
                    shared: 0,
                    units_per_thread: BF_CTR_V2_K as u64,
                    blocks_per_sm: 5,
                }
            };
            (shape, vec![p, s])
        }
    }
}

/// The segment's location, and whether it is device memory this device
/// cannot use as is (another GPU's, or not 16-byte aligned).
fn loc_of(data: &mut DataMut<'_>, ordinal: usize) -> (gcm::Loc, bool) {
    match data {
        DataMut::Host(b) => (gcm::Loc::Host(b.as_mut_ptr(), b.len()), false),
        DataMut::Device(d) => (
            gcm::Loc::Device(d.ptr(), d.len()),
            d.device() as usize != ordinal || d.ptr() % 16 != 0,
        ),
    }
}

/// GCM items from (nonce, aad, expected tag, data) of each segment, and
/// which of them lie in device memory this device cannot use.
#[allow(clippy::type_complexity)]
fn gcm_items<'a, 'b: 'a>(
    segments: impl Iterator<Item = ([u8; 12], &'a [u8], Option<[u8; 16]>, &'a mut DataMut<'b>)>,
    ordinal: usize,
) -> (Vec<gcm::GcmItem<'a>>, Vec<bool>) {
    segments
        .map(|(nonce, aad, expected, data)| {
            let (data, bad) = loc_of(data, ordinal);
            let item = gcm::GcmItem {
                nonce,
                aad,
                expected,
                data,
            };
            (item, bad)
        })
        .unzip()
}

/// Seal or open on `dev`: rejected segments (precheck, misplaced device
/// memory) are reported and left alone; the rest run as one GCM job.
fn run_gcm(
    dev: &Device,
    key: &Aes256Key,
    seal: bool,
    items: Vec<gcm::GcmItem<'_>>,
    misplaced: Vec<bool>,
    pre: Vec<Option<SegmentErrorKind>>,
) -> Result<Vec<SegmentResult>, BackendError> {
    let op = if seal {
        crate::job::OpKind::AesGcmSeal
    } else {
        crate::job::OpKind::AesGcmOpen
    };
    if !dev.loaded(launch::GCM_GHASH) {
        return Err(BackendError::Unsupported { backend: "gpu", op });
    }
    let device_err =
        |e: String| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name));
    let mut results: Vec<Option<SegmentResult>> = Vec::with_capacity(items.len());
    let mut run: Vec<usize> = Vec::new();
    let mut subset: Vec<gcm::GcmItem<'_>> = Vec::new();
    for (i, ((item, misplaced), pre)) in items.into_iter().zip(misplaced).zip(pre).enumerate() {
        if let Some(kind) = pre {
            results.push(Some(Err(kind.at(i))));
        } else if misplaced {
            results.push(Some(Err(SegmentErrorKind::Internal(
                "device segment must be 16-byte aligned and on the job's device".into(),
            )
            .at(i))));
        } else {
            results.push(None);
            run.push(i);
            subset.push(item);
        }
    }
    dev.bind().map_err(device_err)?;
    let rk: Vec<u8> = key_schedule::aes256_expand(key.expose())
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .collect();
    let drk = dev.alloc(rk.len()).map_err(device_err)?;
    runtime::upload(drk.ptr, &rk).map_err(device_err)?;
    let ctr_kernel = aes_ctr_shape().with_keys(&[drk.ptr]).map_err(device_err)?;
    let outcomes = gcm::run(dev, drk.ptr, &ctr_kernel, seal, &subset).map_err(device_err)?;
    for (&i, o) in run.iter().zip(outcomes) {
        results[i] = Some(match o {
            Ok(Some(tag)) => Ok(Output::Tag(crate::types::Tag::from_bytes(tag))),
            Ok(None) => Ok(Output::Done),
            Err(()) => Err(SegmentErrorKind::AuthenticationFailed.at(i)),
        });
    }
    Ok(results
        .into_iter()
        .map(|r| r.expect("every segment has a result"))
        .collect())
}

/// Device memory owned by the caller, for GPU-resident inputs (benchmarks,
/// tests, and callers whose data already lives on the GPU).
pub struct DeviceAllocation {
    device: u32,
    buf: runtime::DeviceBuffer,
    len: usize,
}

impl GpuBackend {
    /// Allocates `len` bytes on device `ordinal` and fills them from `init`
    /// (repeated if shorter).
    pub fn alloc_device(
        &self,
        ordinal: usize,
        len: usize,
        init: &[u8],
    ) -> Result<DeviceAllocation, BackendError> {
        let dev = self
            .devices
            .iter()
            .find(|d| d.ordinal == ordinal)
            .ok_or_else(|| BackendError::InvalidJob(format!("no GPU {ordinal}")))?;
        let e = |e: String| BackendError::Device(e);
        dev.bind().map_err(e)?;
        let buf = dev.alloc(len).map_err(e)?;
        if !init.is_empty() {
            let mut at = 0;
            while at < len {
                let n = init.len().min(len - at);
                runtime::upload(buf.ptr + at as u64, &init[..n]).map_err(e)?;
                at += n;
            }
        }
        Ok(DeviceAllocation {
            device: ordinal as u32,
            buf,
            len,
        })
    }
}

impl GpuBackend {
    /// Page-locked host memory: jobs over segments inside it move by DMA
    /// with no staging copy, at the full link rate.
    pub fn alloc_pinned(&self, len: usize) -> Result<PinnedBuffer, BackendError> {
        let dev = &self.devices[0];
        dev.bind().map_err(BackendError::Device)?;
        PinnedBuffer::new(len).map_err(BackendError::Device)
    }
}

impl GpuBackend {
    /// Page-locks and registers host memory mapped by the caller (see
    /// [`Backend::register_host`]).
    ///
    /// # Safety
    /// `[ptr, ptr + len)` must stay mapped until the registration drops.
    pub unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<HostRegistration, BackendError> {
        let dev = &self.devices[0];
        dev.bind().map_err(BackendError::Device)?;
        // SAFETY: the caller's contract is the registration's.
        unsafe { HostRegistration::new(ptr, len) }.map_err(BackendError::Device)
    }
}

impl DeviceAllocation {
    /// A view of `len` bytes at `offset`.
    pub fn slice(&self, offset: usize, len: usize) -> Option<crate::job::DeviceSlice> {
        (offset.checked_add(len)? <= self.len)
            // SAFETY: within this live allocation, which outlives the job as
            // long as the caller keeps `self` alive (borrow below).
            .then(|| unsafe {
                crate::job::DeviceSlice::new(self.device, self.buf.ptr + offset as u64, len)
            })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}
