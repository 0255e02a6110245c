//! The GPU backend: the same batch API as the CPU backend, run on every
//! visible NVIDIA GPU through cudarc (driver API + NVRTC, loaded at run
//! time). No driver, no device or no NVRTC means `probe` returns one clear
//! reason and callers use the CPU backend; nothing here panics for that.
//!
//! - `kernels`: embedded .cu sources, NVRTC compilation, on-disk cache.
//! - `runtime`: devices, streams, pinned staging slots, launches.
//! - `ctr`: CTR-mode jobs (AES-256, TEA) for host and device-resident data.

mod blake3;
mod cdc;
mod ctr;
mod digest;
pub mod kernels;
pub mod key_schedule;
pub mod link;
mod runtime;
mod serial;
mod stage;

use std::sync::atomic::Ordering;

use crate::backend::{precheck, Backend};
use crate::error::{BackendError, SegmentErrorKind};
use crate::job::{CtrCipher, DataMut, Job, Output, SegmentResult};
use crate::types::CtrIv;

pub use runtime::{arch_name, Device};

pub struct GpuBackend {
    devices: Vec<Device>,
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
        Ok(GpuBackend { devices })
    }

    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The device with the least queued work (ties: the lowest ordinal).
    fn pick(&self, job: &Job<'_>) -> &Device {
        if let Some(ord) = device_of(job) {
            if let Some(d) = self.devices.iter().find(|d| d.ordinal == ord as usize) {
                return d;
            }
        }
        self.devices
            .iter()
            .min_by_key(|d| d.outstanding.load(Ordering::Relaxed))
            .expect("probe guarantees at least one device")
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
        _ => None,
    }
}

impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        let pre = precheck(job);
        let dev = self.pick(job);
        let _queued = runtime::record_outstanding(dev, job.bytes());
        match job {
            Job::Ctr { cipher, segments } => {
                let (kernel, key_bytes): (&str, Vec<u8>) = match cipher {
                    // The 256-thread, static-shared-memory variant (kernels/README.md);
                    // the 1024-thread variant needs a raised dynamic shared-memory limit.
                    CtrCipher::Aes256(k) => (
                        "aes256_ctr_v2",
                        key_schedule::aes256_expand(k.expose())
                            .iter()
                            .flat_map(|w| w.to_ne_bytes())
                            .collect(),
                    ),
                    CtrCipher::Tea(k) => (
                        "tea_ctr",
                        k.words().iter().flat_map(|w| w.to_ne_bytes()).collect(),
                    ),
                    CtrCipher::Blowfish(_) => {
                        return Err(BackendError::Unsupported {
                            backend: "gpu",
                            op: cipher.op(),
                        })
                    }
                };
                if !dev.has_kernel(kernel) {
                    return Err(BackendError::Unsupported {
                        backend: "gpu",
                        op: cipher.op(),
                    });
                }
                let unit = cipher.iv_len();
                let device_err = |e: String| {
                    BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name))
                };
                dev.bind().map_err(device_err)?;
                let key = dev.alloc(key_bytes.len()).map_err(device_err)?;
                runtime::upload(key.ptr, &key_bytes).map_err(device_err)?;
                let mut host = Vec::new();
                let mut resident = Vec::new();
                let mut results: Vec<SegmentResult> = Vec::with_capacity(segments.len());
                for (i, (seg, pre)) in segments.iter_mut().zip(pre).enumerate() {
                    if let Some(kind) = pre {
                        results.push(Err(kind.at(i)));
                        continue;
                    }
                    let iv = match seg.iv {
                        CtrIv::B128(iv) => iv.0,
                        CtrIv::B64(iv) => {
                            let mut b = [0u8; 16];
                            b[..8].copy_from_slice(&iv.0);
                            b
                        }
                    };
                    match &mut seg.data {
                        DataMut::Host(buf) => {
                            if !buf.is_empty() {
                                ctr::pieces_of(buf, iv, unit, &mut host);
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
                    ctr::run_device(dev, kernel, key.ptr, unit, &resident).map_err(device_err)?;
                }
                if !host.is_empty() {
                    ctr::run_host(dev, kernel, key.ptr, unit, host).map_err(device_err)?;
                }
                Ok(results)
            }
            Job::Digest { algo, segments } => digest::run(dev, algo, segments, pre),
            Job::Chunk { params, segments } => digest::run_chunk(dev, params, segments, pre),
            other => Err(BackendError::Unsupported {
                backend: "gpu",
                op: other.op(),
            }),
        }
    }
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
