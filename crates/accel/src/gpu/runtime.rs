//! The GPU runtime (seed 001's CrystalGPU, modernised): per device, kernels
//! loaded once, three streams, and three pinned staging slots allocated once and
//! reused, so that packing slot k+1 on the CPU overlaps copy-in, kernel and
//! copy-out of slot k on the GPU.
//!
//! Raw CUDA driver calls live here, kernel launches in `launch.rs`; each
//! unsafe block states the invariant it relies on.

use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::result as cu;
use cudarc::driver::sys::{self, CUdeviceptr, CUfunction, CUmodule, CUstream};
use cudarc::driver::{CudaContext, CudaStream};

use super::{kernels, launch};

/// Bytes of payload per staging slot. 64 MiB: large enough that the link
/// runs at its plateau (>= 16 MiB per copy, DESIGN.md), small enough that
/// the slots in flight cost little memory.
pub const SLOT_BYTES: usize = 64 << 20;
/// Staging slots (and streams) per device. Three, so that while one slot's
/// copy-in and another's copy-out keep both copy engines busy, the third
/// absorbs the kernel and the host's turnaround: with two, each cycle left
/// a kernel-long bubble on both engines (84% of the link; see RESULTS.md).
pub const SLOT_COUNT: usize = 3;

/// `SLOT_COUNT`, or `GVAULT_GPU_SLOTS` (2..=8) for measurements.
fn slot_count() -> usize {
    crate::tuning::tuning().gpu_slots.unwrap_or(SLOT_COUNT)
}
/// Descriptor area per slot (bytes): up to this many segments per batch.
pub const DESC_BYTES: usize = 4 << 20;
/// Smallest transfer that `upload_pinned`/`download_pinned` stage through
/// the device's page-locked buffer; below it the plain pageable copy costs
/// less than the extra host copy and stream synchronisation.
pub(crate) const PINNED_MIN_BYTES: usize = 64 << 10;
/// First size of the transfer buffer; it doubles from here as needed.
const TRANSFER_FIRST_BYTES: usize = 1 << 20;
/// Largest size of the transfer buffer (a power-of-two multiple of the
/// first); larger transfers go through it in pieces, so one large job does
/// not hold hundreds of MB of page-locked memory for the process's life.
const TRANSFER_MAX_BYTES: usize = 64 << 20;

pub(crate) type DevError = String;

pub(crate) fn err(what: &str, e: cu::DriverError) -> DevError {
    format!("{what}: {e:?}")
}

/// One staging slot: pinned host memory and its device twin, used by one
/// stream at a time.
pub(crate) struct Slot {
    pub host: *mut u8,
    pub host_desc: *mut u8,
    pub dev: CUdeviceptr,
    pub dev_desc: CUdeviceptr,
    pub stream: CUstream,
}

// SAFETY: a Slot's pointers are owned by its Device and only used while the
// device's slot mutex is held, by one thread at a time.
unsafe impl Send for Slot {}

/// The device's page-locked buffer for bulk host<->device copies that are
/// not slot staging (descriptor uploads, digest and list downloads): DMA
/// reads and writes it at the link's rate (~50 GB/s on an H100 host, against
/// ~10 GB/s for pageable memory). Null and 0 until first needed.
pub(crate) struct TransferBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is host memory owned by its Device, touched only while
// the device's transfer mutex is held (see `Device::transfer_buffer`).
unsafe impl Send for TransferBuffer {}

/// The transfer buffer's size for a copy of `need` bytes when it holds
/// `current`: unchanged if large enough, else doubled (from
/// TRANSFER_FIRST_BYTES) until it fits, never beyond TRANSFER_MAX_BYTES
/// (larger copies go in pieces of that size).
fn grown_len(current: usize, need: usize) -> usize {
    let need = need.min(TRANSFER_MAX_BYTES);
    if need <= current {
        return current;
    }
    let mut len = current.max(TRANSFER_FIRST_BYTES);
    while len < need {
        len = len.saturating_mul(2);
    }
    len.min(TRANSFER_MAX_BYTES)
}

pub struct Device {
    pub ordinal: usize,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: u32,
    ctx: Arc<CudaContext>,
    _streams: Vec<Arc<CudaStream>>,
    /// A stream beside the slots' for work that overlaps the pipeline (GCM's
    /// GHASH of one round while later rounds stream through the slots).
    /// Used only by the holder of the slot lock.
    pub(crate) aux_stream: CUstream,
    modules: Vec<CUmodule>,
    /// Loaded kernels by `launch::Kernel::id` (None: not in any module).
    functions: Vec<Option<CUfunction>>,
    pub(crate) slots: Mutex<Vec<Slot>>,
    /// Device memory kept between jobs (GCM's ciphertext buffer): grows to
    /// the largest need, so jobs do not pay allocation and free (which
    /// synchronises the device) each time.
    pub(crate) scratch: Mutex<Option<DeviceBuffer>>,
    /// Page-locked host buffer for `upload_pinned`/`download_pinned`.
    transfer: Mutex<TransferBuffer>,
    /// Stream of those copies; used only by the holder of `transfer`.
    transfer_stream: CUstream,
    /// Stream on which job-scoped buffers are taken from and returned to the
    /// device's memory pool (null: the pool is unavailable, plain
    /// cuMemAlloc/cuMemFree). Nothing else runs on it, so waiting for it is
    /// cheap. See `alloc`.
    pool_stream: CUstream,
    /// Bytes of queued work, for balancing jobs across devices.
    pub(crate) outstanding: AtomicU64,
    /// Jobs placed on this device since it was opened.
    pub(crate) jobs: AtomicU64,
    /// Idle streams for callers' copies (`copy`): one a concurrent caller.
    copy_streams: Mutex<Vec<Arc<CudaStream>>>,
}

// SAFETY: CUfunction/CUmodule handles are immutable after load and valid in
// every thread once the context is bound; mutable state is behind Mutex.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

/// "sm_90" for a (9, 0) device. NVRTC wants a 'static str.
pub fn arch_name(cc: (i32, i32)) -> &'static str {
    match cc {
        (9, 0) => "sm_90",
        (8, 0) => "sm_80",
        (8, 6) => "sm_86",
        (8, 9) => "sm_89",
        (10, 0) => "sm_100",
        (12, 0) => "sm_120",
        (7, 5) => "sm_75",
        (7, 0) => "sm_70",
        _ => "compute_75",
    }
}

impl Device {
    pub fn open(ordinal: usize) -> Result<Device, DevError> {
        let ctx = CudaContext::new(ordinal).map_err(|e| err("creating context", e))?;
        // We order work with our own streams and syncs.
        // SAFETY: no cudarc-managed allocations are shared across streams.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(|e| err("device name", e))?;
        let cc = ctx
            .compute_capability()
            .map_err(|e| err("compute capability", e))?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| err("SM count", e))? as u32;
        let smem_optin = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .map_err(|e| err("shared memory opt-in limit", e))?;
        let arch = arch_name(cc);
        let mut modules = Vec::new();
        let mut functions = vec![None; launch::NAMES.len()];
        for src in kernels::SOURCES {
            let ptx = kernels::compile(src, arch)?;
            let image = CString::new(ptx).map_err(|_| "PTX contains NUL".to_string())?;
            // SAFETY: the context is bound to this thread by CudaContext::new;
            // the image is a NUL-terminated PTX string.
            let module = unsafe { cu::module::load_data(image.as_ptr() as *const c_void) }
                .map_err(|e| err(&format!("loading {}.cu", src.name), e))?;
            modules.push(module);
            for &f in src.functions {
                let id = launch::index_of(f).ok_or_else(|| {
                    format!("kernel {f} has no declared signature (gpu/launch.rs)")
                })?;
                let name =
                    CString::new(f).map_err(|_| format!("kernel name {f:?} contains NUL"))?;
                // SAFETY: module is loaded in the bound context.
                let func = unsafe { cu::module::get_function(module, name) }
                    .map_err(|e| err(&format!("kernel {f}"), e))?;
                allow_dynamic_shared(func, smem_optin)
                    .map_err(|e| err(&format!("kernel {f}"), e))?;
                functions[id] = Some(func);
            }
        }
        let streams: Vec<Arc<CudaStream>> = (0..slot_count())
            .map(|_| ctx.new_stream().map_err(|e| err("creating stream", e)))
            .collect::<Result<_, _>>()?;
        let aux = ctx.new_stream().map_err(|e| err("creating stream", e))?;
        let aux_stream = aux.cu_stream();
        let pool = ctx.new_stream().map_err(|e| err("creating stream", e))?;
        let transfer = ctx.new_stream().map_err(|e| err("creating stream", e))?;
        let transfer_stream = transfer.cu_stream();
        let pool_stream = if use_memory_pool(ctx.cu_device()) {
            pool.cu_stream()
        } else {
            std::ptr::null_mut()
        };
        let mut slots = Vec::new();
        for s in &streams {
            // SAFETY: sizes are non-zero; the pointers are freed in Drop.
            unsafe {
                let host = cu::malloc_host(SLOT_BYTES + DESC_BYTES, sys::CU_MEMHOSTALLOC_PORTABLE)
                    .map_err(|e| err("pinned allocation", e))?
                    as *mut u8;
                let dev = cu::malloc_sync(SLOT_BYTES + DESC_BYTES)
                    .map_err(|e| err("device allocation", e))?;
                slots.push(Slot {
                    host,
                    host_desc: host.add(SLOT_BYTES),
                    dev,
                    dev_desc: dev + SLOT_BYTES as u64,
                    stream: s.cu_stream(),
                });
            }
        }
        Ok(Device {
            ordinal,
            name,
            compute_capability: cc,
            multiprocessors,
            ctx,
            _streams: streams.into_iter().chain([aux, pool, transfer]).collect(),
            aux_stream,
            modules,
            functions,
            slots: Mutex::new(slots),
            scratch: Mutex::new(None),
            transfer: Mutex::new(TransferBuffer {
                ptr: std::ptr::null_mut(),
                len: 0,
            }),
            transfer_stream,
            pool_stream,
            outstanding: AtomicU64::new(0),
            jobs: AtomicU64::new(0),
            copy_streams: Mutex::new(Vec::new()),
        })
    }

    /// Runs `copies` in order on a stream of their own and waits for them.
    ///
    /// # Safety
    /// Every range is valid for its length (device memory of this device's
    /// context, or host memory), and nothing else writes a destination or
    /// frees a range until this returns.
    pub(crate) unsafe fn copy(&self, copies: &[crate::gpu::DeviceCopy]) -> Result<(), DevError> {
        self.bind()?;
        let idle = self.copy_streams.lock().ok().and_then(|mut v| v.pop());
        let stream = match idle {
            Some(s) => s,
            None => self
                .ctx
                .new_stream()
                .map_err(|e| err("creating stream", e))?,
        };
        let done = (|| {
            for c in copies.iter().filter(|c| c.len > 0) {
                // SAFETY: the caller's contract; unified addressing lets the
                // driver tell host from device addresses.
                unsafe { sys::cuMemcpyAsync(c.dst, c.src, c.len, stream.cu_stream()) }
                    .result()
                    .map_err(|e| err("copy", e))?;
            }
            // SAFETY: the stream is live (held here).
            unsafe { cu::stream::synchronize(stream.cu_stream()) }
                .map_err(|e| err("stream synchronize", e))
        })();
        // A stream whose copy failed may hold a sticky error: not reused.
        if done.is_ok() {
            if let Ok(mut v) = self.copy_streams.lock() {
                v.push(stream);
            }
        }
        done
    }

    pub(crate) fn bind(&self) -> Result<(), DevError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| err("binding context", e))
    }

    /// The loaded function of kernel `id` (`launch::Kernel::id`).
    pub(crate) fn function(&self, id: usize, name: &str) -> Result<CUfunction, DevError> {
        self.functions
            .get(id)
            .copied()
            .flatten()
            .ok_or_else(|| format!("kernel {name} is not loaded"))
    }

    /// Jobs placed on this device so far (how work spreads over GPUs).
    pub fn jobs_run(&self) -> u64 {
        self.jobs.load(Ordering::Relaxed)
    }

    /// Whether a kernel of this name was compiled and loaded.
    pub fn has_kernel(&self, name: &str) -> bool {
        launch::index_of(name).is_some_and(|id| self.functions[id].is_some())
    }

    /// Whether `kernel` was compiled and loaded.
    pub(crate) fn loaded<A>(&self, kernel: launch::Kernel<A>) -> bool {
        self.function(kernel.id, kernel.name).is_ok()
    }

    /// Device memory for job-scoped data (keys, tables, descriptors, state).
    ///
    /// Taken from the device's stream-ordered memory pool where there is one:
    /// cuMemAlloc/cuMemFree cost tens of microseconds each and cuMemFree
    /// synchronises the whole device (stalling other jobs' pipelines), which
    /// for a GCM job of four passes added up to several percent of a 1 GiB
    /// job. The pool keeps freed memory for reuse.
    pub(crate) fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DevError> {
        let len = bytes.max(16);
        if self.pool_stream.is_null() {
            // SAFETY: context bound by the caller (every entry point binds first).
            let ptr = unsafe { cu::malloc_sync(len) }.map_err(|e| err("device allocation", e))?;
            return Ok(DeviceBuffer {
                ptr,
                len,
                pool_stream: 0,
            });
        }
        // SAFETY: context bound by the caller; the pool stream is live for
        // the device's lifetime. Synchronising it makes the allocation
        // usable from every other stream (nothing else is queued there).
        let ptr = unsafe {
            let ptr =
                cu::malloc_async(self.pool_stream, len).map_err(|e| err("device allocation", e))?;
            cu::stream::synchronize(self.pool_stream).map_err(|e| err("device allocation", e))?;
            ptr
        };
        Ok(DeviceBuffer {
            ptr,
            len,
            pool_stream: self.pool_stream as usize,
        })
    }

    /// The device's scratch buffer, at least `bytes` long (grown if needed).
    pub(crate) fn scratch(
        &self,
        bytes: usize,
    ) -> Result<std::sync::MutexGuard<'_, Option<DeviceBuffer>>, DevError> {
        let mut guard = self
            .scratch
            .lock()
            .map_err(|_| "scratch lock poisoned".to_string())?;
        if guard.as_ref().is_none_or(|b| b.len < bytes) {
            guard.take();
            *guard = Some(self.alloc(bytes)?);
        }
        Ok(guard)
    }

    /// The transfer buffer, locked, at least `min(need, TRANSFER_MAX_BYTES)`
    /// long; None when page-locked memory cannot be had (the caller then
    /// copies through pageable memory, slower but the same bytes).
    fn transfer_buffer(
        &self,
        need: usize,
    ) -> Result<Option<std::sync::MutexGuard<'_, TransferBuffer>>, DevError> {
        let mut buf = self
            .transfer
            .lock()
            .map_err(|_| "transfer buffer lock poisoned".to_string())?;
        let len = grown_len(buf.len, need);
        if len > buf.len {
            // SAFETY: no copy is pending on the old buffer (every holder of
            // the lock synchronises the transfer stream before releasing
            // it, or abandons the buffer on error); the context is bound by
            // the caller; the new pointer is freed on growth or in Drop.
            unsafe {
                if !buf.ptr.is_null() {
                    let _ = cu::free_host(buf.ptr as *mut c_void);
                }
                buf.ptr = std::ptr::null_mut();
                buf.len = 0;
                match cu::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE) {
                    Ok(p) => {
                        buf.ptr = p as *mut u8;
                        buf.len = len;
                    }
                    Err(_) => return Ok(None),
                }
            }
        }
        Ok(Some(buf))
    }

    /// Copies `src` to device memory at `dst` through the page-locked
    /// transfer buffer (async copy on the transfer stream, then a sync of
    /// it); the bytes have landed when it returns, as with `upload`.
    /// Transfers under PINNED_MIN_BYTES take the plain `upload`.
    pub(crate) fn upload_pinned(&self, dst: CUdeviceptr, src: &[u8]) -> Result<(), DevError> {
        if src.len() < PINNED_MIN_BYTES {
            return upload(dst, src);
        }
        let Some(mut buf) = self.transfer_buffer(src.len())? else {
            return upload(dst, src);
        };
        let piece_len = buf.len;
        for (k, piece) in src.chunks(piece_len).enumerate() {
            let at = dst + (k * piece_len) as u64;
            // SAFETY: the buffer holds piece_len >= piece.len() bytes and no
            // pending copy reads it (the lock is held and the last copy was
            // synchronised); dst holds src.len() bytes (the caller's
            // allocation); the stream is the Device's and used only here.
            let done = unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), buf.ptr, piece.len());
                sys::cuMemcpyHtoDAsync_v2(
                    at,
                    buf.ptr as *const c_void,
                    piece.len(),
                    self.transfer_stream,
                )
                .result()
                .and_then(|()| cu::stream::synchronize(self.transfer_stream))
            };
            if let Err(e) = done {
                buf.abandon();
                return Err(err("pinned upload", e));
            }
        }
        Ok(())
    }

    /// Copies `dst.len()` bytes from device memory at `src` into `dst`
    /// through the page-locked transfer buffer. As with `download`, the
    /// work that wrote `src` must have completed (the caller synchronised
    /// its stream). Transfers under PINNED_MIN_BYTES take the plain path.
    pub(crate) fn download_pinned(&self, dst: &mut [u8], src: CUdeviceptr) -> Result<(), DevError> {
        if dst.len() < PINNED_MIN_BYTES {
            return download(dst, src);
        }
        let Some(mut buf) = self.transfer_buffer(dst.len())? else {
            return download(dst, src);
        };
        let piece_len = buf.len;
        for (k, piece) in dst.chunks_mut(piece_len).enumerate() {
            let at = src + (k * piece_len) as u64;
            // SAFETY: the buffer holds piece_len >= piece.len() bytes and
            // only this copy writes it (lock held, earlier copies
            // synchronised); src holds dst.len() bytes written by completed
            // work; the host reads the buffer only after the stream sync.
            let done = unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    buf.ptr as *mut c_void,
                    at,
                    piece.len(),
                    self.transfer_stream,
                )
                .result()
                .and_then(|()| cu::stream::synchronize(self.transfer_stream))
                .map(|()| std::ptr::copy_nonoverlapping(buf.ptr, piece.as_mut_ptr(), piece.len()))
            };
            if let Err(e) = done {
                buf.abandon();
                return Err(err("pinned download", e));
            }
        }
        Ok(())
    }

    /// Grid size for grid-stride kernels: one block per `block` threads
    /// needed, at most 32 blocks an SM.
    pub(crate) fn grid_for(&self, threads_needed: u64, block: u32) -> u32 {
        let blocks = threads_needed.div_ceil(block as u64);
        blocks.clamp(1, self.multiprocessors as u64 * 32) as u32
    }
}

/// Lets `func` use all the shared memory the device offers per block beyond
/// its static arrays (the 1024-thread table kernels need 128 KiB; the
/// default cap for dynamic shared memory is 48 KiB).
fn allow_dynamic_shared(func: CUfunction, optin_limit: i32) -> Result<(), cu::DriverError> {
    use sys::CUfunction_attribute::{
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES as MAX_DYNAMIC,
        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES as STATIC,
    };
    // SAFETY: func was just returned by get_function on a loaded module.
    unsafe {
        let static_bytes = cu::function::get_function_attribute(func, STATIC)?;
        let dynamic = (optin_limit - static_bytes).max(0);
        cu::function::set_function_attribute(func, MAX_DYNAMIC, dynamic)
    }
}

impl TransferBuffer {
    /// Forgets the buffer after a failed copy, which may still be in flight:
    /// leaking it is safer than freeing memory a DMA engine could touch.
    /// The next transfer allocates a fresh one.
    fn abandon(&mut self) {
        self.ptr = std::ptr::null_mut();
        self.len = 0;
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.bind();
        if let Ok(t) = self.transfer.get_mut() {
            if !t.ptr.is_null() {
                // SAFETY: allocated by transfer_buffer, freed once here after
                // its stream is idle.
                unsafe {
                    let _ = cu::stream::synchronize(self.transfer_stream);
                    let _ = cu::free_host(t.ptr as *mut c_void);
                }
                t.abandon();
            }
        }
        if let Ok(s) = self.scratch.get_mut() {
            s.take();
        }
        if let Ok(slots) = self.slots.get_mut() {
            for s in slots.iter() {
                // SAFETY: allocated in open(), freed exactly once here.
                unsafe {
                    let _ = cu::stream::synchronize(s.stream);
                    let _ = cu::free_host(s.host as *mut c_void);
                    let _ = cu::free_sync(s.dev);
                }
            }
        }
        for m in &self.modules {
            // SAFETY: modules loaded in open(), unloaded once.
            unsafe {
                let _ = cu::module::unload(*m);
            }
        }
    }
}

/// A job-scoped device allocation, freed on drop.
pub(crate) struct DeviceBuffer {
    pub ptr: CUdeviceptr,
    pub len: usize,
    /// The pool stream it came from (as an integer, so the buffer stays
    /// Send), or 0 for a plain allocation.
    pool_stream: usize,
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `Device::alloc`, freed once; callers
        // synchronise the streams that used it before dropping, so a free
        // ordered on the (idle) pool stream cannot overtake a user.
        unsafe {
            if self.pool_stream == 0 {
                let _ = cu::free_sync(self.ptr);
            } else {
                let _ = cu::free_async(self.ptr, self.pool_stream as CUstream);
            }
        }
    }
}

/// Whether the device's default memory pool can serve `Device::alloc`; if
/// so, sets how much freed memory the pool keeps (beyond that it returns
/// memory to the driver at synchronisation points, so a 1 GiB job buffer is
/// not held for ever by a shared daemon).
fn use_memory_pool(dev: sys::CUdevice) -> bool {
    const KEEP_BYTES: u64 = 512 << 20;
    // SAFETY: plain attribute queries and settings on a valid device handle.
    unsafe {
        let mut supported = 0i32;
        let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED;
        if sys::cuDeviceGetAttribute(&mut supported, attr, dev)
            .result()
            .is_err()
            || supported == 0
        {
            return false;
        }
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        if sys::cuDeviceGetDefaultMemPool(&mut pool, dev)
            .result()
            .is_err()
        {
            return false;
        }
        let mut keep = KEEP_BYTES;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut keep as *mut u64 as *mut c_void,
        )
        .result()
        .is_ok()
    }
}

/// Copies `src` to device memory synchronously (small, job-scoped data);
/// the bytes are there when it returns.
///
/// A synchronous copy from pageable memory returns once the source is
/// staged, not once the DMA has landed (CUDA driver API, "API
/// synchronization behavior"); it is ordered before later work on the
/// legacy stream only, and our streams are non-blocking. A kernel queued
/// right after could read stale bytes (a GPU test of 17 921 device-resident
/// MD5 segments failed that way). Waiting for the legacy stream closes that
/// window.
pub(crate) fn upload(dst: CUdeviceptr, src: &[u8]) -> Result<(), DevError> {
    // SAFETY: dst was allocated with at least src.len() bytes by the caller;
    // the null stream is the context's legacy stream, always valid.
    unsafe {
        sys::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len())
            .result()
            .map_err(|e| err("upload", e))?;
        cu::stream::synchronize(std::ptr::null_mut()).map_err(|e| err("upload", e))
    }
}

pub(crate) fn download(dst: &mut [u8], src: CUdeviceptr) -> Result<(), DevError> {
    // SAFETY: src holds at least dst.len() bytes written by earlier work.
    unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len()).result() }
        .map_err(|e| err("download", e))
}

pub(crate) fn sync(stream: CUstream) -> Result<(), DevError> {
    // SAFETY: stream handle owned by a live Device.
    unsafe { cu::stream::synchronize(stream) }.map_err(|e| err("stream synchronize", e))
}

pub(crate) fn record_outstanding(dev: &Device, bytes: u64) -> OutstandingGuard<'_> {
    dev.outstanding.fetch_add(bytes, Ordering::Relaxed);
    OutstandingGuard { dev, bytes }
}

pub(crate) struct OutstandingGuard<'a> {
    dev: &'a Device,
    bytes: u64,
}

impl Drop for OutstandingGuard<'_> {
    fn drop(&mut self) {
        self.dev
            .outstanding
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Whether `[ptr, ptr + len)` lies inside one page-locked host allocation
/// (cuMemHostAlloc or cuMemHostRegister) that the DMA engines can read and
/// write directly. Pageable memory answers false.
pub(crate) fn is_page_locked(ptr: *const u8, len: usize) -> bool {
    page_locked_range(ptr).is_some_and(|(start, size)| {
        let addr = ptr as usize;
        addr >= start && addr + len <= start + size
    })
}

/// The page-locked host allocation (start, size) that holds `ptr`, if any.
pub(crate) fn page_locked_range(ptr: *const u8) -> Option<(usize, usize)> {
    use sys::CUpointer_attribute::{
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE as MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE as RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR as RANGE_START,
    };
    let addr = ptr as CUdeviceptr;
    let mut mem_type: u32 = 0;
    let mut start: CUdeviceptr = 0;
    let mut size: usize = 0;
    // SAFETY: each call writes one value of the attribute's documented type
    // (CUmemorytype as u32, CUdeviceptr, size_t) into a local; an unknown
    // (pageable) pointer makes the call fail, which we read as "no".
    unsafe {
        if sys::cuPointerGetAttribute(&mut mem_type as *mut u32 as *mut c_void, MEMORY_TYPE, addr)
            .result()
            .is_err()
            || mem_type != sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
        {
            return None;
        }
        if sys::cuPointerGetAttribute(
            &mut start as *mut CUdeviceptr as *mut c_void,
            RANGE_START,
            addr,
        )
        .result()
        .is_err()
            || sys::cuPointerGetAttribute(&mut size as *mut usize as *mut c_void, RANGE_SIZE, addr)
                .result()
                .is_err()
        {
            return None;
        }
    }
    Some((start as usize, size))
}

/// Page-locked host memory from the driver: segments in it cross the link
/// by DMA with no staging copy (the shared buffers of the service, or any
/// caller that wants the full link rate).
pub struct PinnedBuffer {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned by this value.
unsafe impl Send for PinnedBuffer {}
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// `len` zeroed bytes of portable page-locked memory (usable from every
    /// device's context). The caller must have bound a context.
    pub(crate) fn new(len: usize) -> Result<PinnedBuffer, DevError> {
        // SAFETY: size is non-zero; freed in Drop; zeroed before use.
        unsafe {
            let ptr = cu::malloc_host(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
                .map_err(|e| err("pinned allocation", e))? as *mut u8;
            std::ptr::write_bytes(ptr, 0, len);
            Ok(PinnedBuffer { ptr, len })
        }
    }
}

impl std::ops::Deref for PinnedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes while self lives.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for PinnedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host in new(), freed once.
        unsafe {
            let _ = cu::free_host(self.ptr as *mut c_void);
        }
    }
}

/// Host memory mapped by someone else (a shared-memory buffer of the
/// service) page-locked and registered with the driver for as long as this
/// value lives, so that jobs over it move by DMA with no staging copy.
pub struct HostRegistration {
    ptr: *mut u8,
}

// SAFETY: the value only remembers an address to unregister; it never
// reads or writes through it.
unsafe impl Send for HostRegistration {}
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Registers `[ptr, ptr + len)` (portable: usable from every device's
    /// context). The caller must have bound a context.
    ///
    /// # Safety
    /// The range must be mapped host memory that stays mapped until the
    /// registration is dropped.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> Result<HostRegistration, DevError> {
        // SAFETY: the caller guarantees the range is mapped; the driver
        // page-locks it and records it until cuMemHostUnregister in Drop.
        unsafe {
            sys::cuMemHostRegister_v2(
                ptr as *mut c_void,
                len.max(1),
                sys::CU_MEMHOSTREGISTER_PORTABLE,
            )
            .result()
            .map_err(|e| err("host memory registration", e))?;
        }
        Ok(HostRegistration { ptr })
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        // SAFETY: registered in new() and still mapped (new's contract);
        // unregistered once.
        unsafe {
            let _ = sys::cuMemHostUnregister(self.ptr as *mut c_void);
        }
    }
}

/// Phase timings of one GPU job, for diagnosis: with `GVAULT_GPU_TRACE=1`,
/// each `mark` synchronises the stream and prints the wall time since the
/// previous mark to stderr. Off (the default), marks cost nothing.
pub(crate) struct Trace {
    on: bool,
    stream: CUstream,
    what: &'static str,
    last: std::time::Instant,
}

impl Trace {
    pub(crate) fn new(what: &'static str, stream: CUstream) -> Trace {
        let on = crate::tuning::tuning().gpu_trace == 1;
        Trace {
            on,
            stream,
            what,
            last: std::time::Instant::now(),
        }
    }

    pub(crate) fn mark(&mut self, phase: &str) {
        if !self.on {
            return;
        }
        let _ = sync(self.stream);
        let now = std::time::Instant::now();
        eprintln!(
            "trace {} {phase}: {:.3} ms",
            self.what,
            (now - self.last).as_secs_f64() * 1e3
        );
        self.last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::{grown_len, TRANSFER_FIRST_BYTES, TRANSFER_MAX_BYTES};

    #[test]
    fn transfer_buffer_doubles_up_to_its_ceiling() {
        let mib = 1usize << 20;
        assert_eq!(TRANSFER_MAX_BYTES % TRANSFER_FIRST_BYTES, 0);
        // first use: at least the first size, doubled until the need fits
        assert_eq!(grown_len(0, 64 << 10), TRANSFER_FIRST_BYTES);
        assert_eq!(grown_len(0, 5 * mib), 8 * mib);
        // large enough: unchanged, even for a smaller need
        assert_eq!(grown_len(8 * mib, 8 * mib), 8 * mib);
        assert_eq!(grown_len(8 * mib, 100), 8 * mib);
        // one byte more than held: doubled
        assert_eq!(grown_len(8 * mib, 8 * mib + 1), 16 * mib);
        // beyond the ceiling: the ceiling (the copy goes in pieces)
        assert_eq!(grown_len(8 * mib, 1 << 30), TRANSFER_MAX_BYTES);
        assert_eq!(
            grown_len(TRANSFER_MAX_BYTES, usize::MAX),
            TRANSFER_MAX_BYTES
        );
    }
}
