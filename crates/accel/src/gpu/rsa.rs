//! RSA private-key batches on the GPU (kernels/rsa.cu): the host side of
//! `rsa_batch` (checks, blinding, ordering, verification) with the GPU as
//! its executor. One launch per key size; every buffer of a launch is
//! job-scoped device memory.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::launch::{Kernel, RsaCrtArgs, Shape, RSA_CRT_T1024, RSA_CRT_T2048, RSA_CRT_T4096};
use super::runtime::{download, upload, DevError, Device};
use super::GpuBackend;
use crate::error::BackendError;
use crate::job::SegmentResult;
use crate::rsa_batch::{self, window_for, Launch, RsaItem, RsaOptions};
use crate::rsa_key::key_record_words;

/// Threads per block of the thread variant (two per message).
const THREAD_BLOCK: u32 = 128;

pub(crate) const HEADER_NAME: &str = "rsa_abi.cuh";

/// The text of `rsa_abi.cuh`: the key record size and the window of each
/// key size, from the Rust side that writes the records.
pub(crate) fn header() -> String {
    let mut h = String::from(
        "// rsa_abi.cuh -- generated from crates/accel/src/gpu/rsa.rs; do not edit.\n\
         #ifndef GV_RSA_ABI_CUH\n#define GV_RSA_ABI_CUH\n",
    );
    let _ = writeln!(
        h,
        "#define RSA_KEY_WORDS(N) ({} * (N))",
        key_record_words(1)
    );
    for bits in crate::rsa_key::BATCH_KEY_BITS {
        let _ = writeln!(h, "#define RSA_WIN_{bits} {}", window_for(bits / 64));
    }
    h.push_str("#endif  // GV_RSA_ABI_CUH\n");
    h
}

fn kernel_for(limbs: usize) -> Result<Kernel<RsaCrtArgs>, DevError> {
    match limbs {
        16 => Ok(RSA_CRT_T1024),
        32 => Ok(RSA_CRT_T2048),
        64 => Ok(RSA_CRT_T4096),
        other => Err(format!("no RSA kernel for {other}-limb primes")),
    }
}

/// A launch's buffers on the device.
struct DeviceLaunch {
    keys: super::runtime::DeviceBuffer,
    msg_key: super::runtime::DeviceBuffer,
    input: super::runtime::DeviceBuffer,
    output: super::runtime::DeviceBuffer,
    kernel: Kernel<RsaCrtArgs>,
    messages: usize,
    limbs: usize,
}

fn words_as_bytes(w: &[u32]) -> &[u8] {
    // SAFETY: u32 has no padding and u8 has alignment 1; the length is the
    // same memory.
    unsafe { std::slice::from_raw_parts(w.as_ptr() as *const u8, std::mem::size_of_val(w)) }
}

impl DeviceLaunch {
    fn upload(dev: &Device, l: &Launch) -> Result<DeviceLaunch, DevError> {
        let kernel = kernel_for(l.limbs)?;
        if !dev.loaded(kernel) {
            return Err(format!("kernel {} is not loaded", kernel.name));
        }
        let keys = dev.alloc(l.keys.len() * 4)?;
        upload(keys.ptr, words_as_bytes(&l.keys))?;
        let msg_key = dev.alloc(l.msg_key.len() * 4)?;
        upload(msg_key.ptr, words_as_bytes(&l.msg_key))?;
        let input = dev.alloc(l.input.len() * 4)?;
        dev.upload_pinned(input.ptr, words_as_bytes(&l.input))?;
        let output = dev.alloc(l.input.len() * 4)?;
        Ok(DeviceLaunch {
            keys,
            msg_key,
            input,
            output,
            kernel,
            messages: l.messages(),
            limbs: l.limbs,
        })
    }

    /// Queues the kernel on `stream`.
    fn launch(&self, dev: &Device, stream: cudarc::driver::sys::CUstream) -> Result<(), DevError> {
        let threads = 2 * self.messages as u64;
        let shape = Shape {
            grid: threads.div_ceil(THREAD_BLOCK as u64).max(1) as u32,
            block: THREAD_BLOCK,
            shared: 0,
        };
        let nmsgs = u32::try_from(self.messages)
            .map_err(|_| format!("{} RSA messages in one launch", self.messages))?;
        // SAFETY: every buffer is a live allocation of this device sized
        // for `messages` messages of `limbs` limbs (keys: every record
        // msg_key names; the host built both); the stream is the device's
        // and is synchronised before the buffers drop.
        unsafe {
            dev.launch(
                self.kernel,
                shape,
                stream,
                RsaCrtArgs {
                    keys: self.keys.ptr.into(),
                    msg_key: self.msg_key.ptr.into(),
                    input: self.input.ptr.into(),
                    output: self.output.ptr.into(),
                    nmsgs,
                },
            )
        }
    }

    fn download(&self, dev: &Device) -> Result<Vec<u32>, DevError> {
        let mut bytes = vec![0u8; self.messages * 2 * self.limbs * 4];
        if bytes.len() >= 64 << 10 {
            dev.download_pinned(&mut bytes, self.output.ptr)?;
        } else {
            download(&mut bytes, self.output.ptr)?;
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// The stream RSA launches use: the first slot's (the RSA job holds the
/// slot lock for its launch, so it does not interleave with a staging job
/// on that stream).
fn with_stream<R>(
    dev: &Device,
    f: impl FnOnce(cudarc::driver::sys::CUstream) -> Result<R, DevError>,
) -> Result<R, DevError> {
    let slots = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?;
    let stream = slots[0].stream;
    let r = f(stream);
    let synced = super::runtime::sync(stream);
    drop(slots);
    let r = r?;
    synced?;
    Ok(r)
}

/// Runs one launch on `dev`: upload, kernel, download.
fn execute(dev: &Device, l: &Launch) -> Result<Vec<u32>, DevError> {
    dev.bind()?;
    let d = DeviceLaunch::upload(dev, l)?;
    with_stream(dev, |stream| d.launch(dev, stream))?;
    d.download(dev)
}

impl GpuBackend {
    /// RSA private-key operations, many keys in one batch (`rsa_batch`):
    /// one result per item, in order; each result verified with the public
    /// exponent before it is returned.
    pub fn rsa_private_batch(
        &self,
        items: &[RsaItem<'_>],
        options: RsaOptions,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let dev = self.rsa_device();
        let device_err = |e: String| format!("GPU {} ({}): {e}", dev.ordinal, dev.name);
        rsa_batch::run_with(items, options, &mut |l: &Launch| {
            execute(dev, l).map_err(device_err)
        })
    }

    /// One launch's raw output words (no blinding, no checks): for the GPU
    /// test that compares the kernel with its CPU emulation word for word.
    #[doc(hidden)]
    pub fn rsa_execute(&self, launch: &Launch) -> Result<Vec<u32>, BackendError> {
        let dev = self.rsa_device();
        execute(dev, launch)
            .map_err(|e| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name)))
    }

    /// The device for an RSA batch: the one with the least queued work.
    fn rsa_device(&self) -> &Device {
        self.devices()
            .iter()
            .min_by_key(|d| d.outstanding.load(std::sync::atomic::Ordering::Relaxed))
            .expect("probe guarantees at least one device")
    }

    /// Kernel time alone of a batch (no blinding, no copies, no checks):
    /// the inputs uploaded once, the kernel launched `reps` times; the mean
    /// time of one launch. For `gvault bench rsa`'s kernel column.
    pub fn rsa_kernel_time(
        &self,
        items: &[RsaItem<'_>],
        options: RsaOptions,
        reps: u32,
    ) -> Result<Duration, BackendError> {
        let dev = self.rsa_device();
        let err =
            |e: String| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name));
        let mut launches = Vec::new();
        rsa_batch::run_with(items, options, &mut |l: &Launch| {
            launches.push(Launch {
                limbs: l.limbs,
                window: l.window,
                keys: l.keys.clone(),
                msg_key: l.msg_key.clone(),
                input: l.input.clone(),
            });
            // The batch's own checks would fail on these zeros; only the
            // launch layouts are wanted here.
            Ok(vec![0u32; l.messages() * 2 * l.limbs])
        })?;
        dev.bind().map_err(err)?;
        let uploaded = launches
            .iter()
            .map(|l| DeviceLaunch::upload(dev, l))
            .collect::<Result<Vec<_>, _>>()
            .map_err(err)?;
        // One warm-up round, then the timed ones.
        with_stream(dev, |stream| {
            for d in &uploaded {
                d.launch(dev, stream)?;
            }
            Ok(())
        })
        .map_err(err)?;
        let reps = reps.max(1);
        let start = Instant::now();
        with_stream(dev, |stream| {
            for _ in 0..reps {
                for d in &uploaded {
                    d.launch(dev, stream)?;
                }
            }
            Ok(())
        })
        .map_err(err)?;
        Ok(start.elapsed() / reps)
    }
}
