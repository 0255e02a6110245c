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

/// Runs `items` on `dev`, one launch per key size.
fn rsa_batch_on(
    dev: &Device,
    items: &[RsaItem<'_>],
    options: RsaOptions,
) -> Result<Vec<SegmentResult>, BackendError> {
    let device_err = |e: String| format!("GPU {} ({}): {e}", dev.ordinal, dev.name);
    rsa_batch::run_with(items, options, &mut |l: &Launch| {
        execute(dev, l).map_err(device_err)
    })
}

/// Runs one launch on `dev`: upload, kernel, download.
fn execute(dev: &Device, l: &Launch) -> Result<Vec<u32>, DevError> {
    dev.bind()?;
    let d = DeviceLaunch::upload(dev, l)?;
    with_stream(dev, |stream| d.launch(dev, stream))?;
    d.download(dev)
}

/// Messages at which one launch fills the GPU (RSA-2048 on an H200: the
/// kernel runs 1024 messages in 20 ms and 16384 in 28 ms). A batch of at
/// least two pieces of this size is cut into pieces that run two at a time
/// a GPU, so that one piece's host work (blinding, checks) overlaps the
/// other's kernel: one batch then runs as two batches in flight do (RSA-2048
/// 32768 messages: 405 K/s against 331 K for one launch on an H200 host).
/// Smaller pieces would lose more kernel throughput than the overlap gains.
const PIECE_MESSAGES: usize = 16384;

/// Pieces in flight on one GPU: one in its kernel, one in host work.
const PIECES_PER_GPU: usize = 2;

/// The item ranges of a batch's pieces: one range below two pieces' worth,
/// else near-equal ranges of at least [`PIECE_MESSAGES`].
fn pieces(n: usize) -> Vec<std::ops::Range<usize>> {
    let count = (n / PIECE_MESSAGES).max(1);
    let (base, extra) = (n / count, n % count);
    let mut out = Vec::with_capacity(count);
    let mut start = 0;
    for i in 0..count {
        let len = base + usize::from(i < extra);
        out.push(start..start + len);
        start += len;
    }
    out
}

impl GpuBackend {
    /// RSA private-key operations, many keys in one batch (`rsa_batch`):
    /// one result per item, in order; each result verified with the public
    /// exponent before it is returned. A large batch runs as pieces (see
    /// [`PIECE_MESSAGES`]) spread over every GPU.
    pub fn rsa_private_batch(
        &self,
        items: &[RsaItem<'_>],
        options: RsaOptions,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let dev = self.rsa_device();
        let bytes = items.iter().map(|it| it.input.len() as u64).sum();
        let _booked = super::runtime::record_outstanding(dev, bytes);
        self.rsa_batch_from(dev, items, options)
    }

    /// [`Self::rsa_private_batch`] on `first` (where the caller booked the
    /// batch), a batch of several pieces also on the other GPUs.
    pub(crate) fn rsa_batch_from(
        &self,
        first: &Device,
        items: &[RsaItem<'_>],
        options: RsaOptions,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let ranges = pieces(items.len());
        if ranges.len() == 1 {
            return rsa_batch_on(first, items, options);
        }
        // Worker w on the w-th GPU after `first`, round and round.
        let devices = self.devices();
        let at = devices
            .iter()
            .position(|d| std::ptr::eq(d, first))
            .unwrap_or(0);
        let workers = ranges.len().min(PIECES_PER_GPU * devices.len());
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicBool::new(false);
        type Piece = Option<Result<Vec<SegmentResult>, BackendError>>;
        let done: Vec<std::sync::Mutex<Piece>> =
            ranges.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let work = |dev: &Device| loop {
            use std::sync::atomic::Ordering::Relaxed;
            let i = next.fetch_add(1, Relaxed);
            if i >= ranges.len() || failed.load(Relaxed) {
                return;
            }
            let r = rsa_batch_on(dev, &items[ranges[i].clone()], options);
            failed.fetch_or(r.is_err(), Relaxed);
            *done[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        };
        std::thread::scope(|s| {
            for w in 1..workers {
                let dev = &devices[(at + w) % devices.len()];
                let work = &work;
                s.spawn(move || work(dev));
            }
            work(first);
        });
        let mut out = Vec::with_capacity(items.len());
        for (range, piece) in ranges.iter().zip(done) {
            let piece = piece.into_inner().unwrap_or_else(|p| p.into_inner());
            // A piece left untaken: an earlier one failed, and its error
            // is returned (pieces are taken in order).
            let Some(piece) = piece else { continue };
            for (j, r) in piece?.into_iter().enumerate() {
                out.push(r.map_err(|e| e.kind.at(range.start + j)));
            }
        }
        if out.len() != items.len() {
            return Err(BackendError::Device(format!(
                "RSA batch: {} results for {} items",
                out.len(),
                items.len()
            )));
        }
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::{pieces, PIECE_MESSAGES};

    #[test]
    fn pieces_cover_a_batch_in_order_and_fill_the_gpu() {
        for n in [
            0,
            1,
            PIECE_MESSAGES,
            2 * PIECE_MESSAGES - 1,
            2 * PIECE_MESSAGES,
            2 * PIECE_MESSAGES + 1,
            65536,
            100_003,
        ] {
            let p = pieces(n);
            assert_eq!(p.first().map(|r| r.start), Some(0), "{n}");
            assert_eq!(p.last().map(|r| r.end), Some(n), "{n}");
            assert!(p.windows(2).all(|w| w[0].end == w[1].start), "{n}");
            if n < 2 * PIECE_MESSAGES {
                assert_eq!(p.len(), 1, "{n}");
            } else {
                assert!(p.len() >= 2, "{n}");
                assert!(p.iter().all(|r| r.len() >= PIECE_MESSAGES), "{n}");
                let (lo, hi) = (
                    p.iter().map(|r| r.len()).min().unwrap(),
                    p.iter().map(|r| r.len()).max().unwrap(),
                );
                assert!(hi - lo <= 1, "{n}: {p:?}");
            }
        }
        assert_eq!(pieces(65536).len(), 4);
    }
}
