//! `gvault.Repository`, and the checkpoint primitives behind
//! `gvault.checkpoint` (`Saver`, `Reader`, `SealedGroup`).
//!
//! The checkpoint primitives take raw buffer addresses from
//! `gvault/checkpoint.py`, which keeps every buffer alive and unchanged
//! until the call that uses it returns (the limited C API of abi3 wheels
//! has no buffer protocol before Python 3.11). They are private to the
//! package.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use gvault_accel::DeviceSlice;
use gvault_cas::accel_jobs::{self, AccelBackend};
use gvault_cas::{Chunker, InitOptions};
use gvault_store::Encryption;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rayon::prelude::*;

use crate::errors::{invalid, raise, StoreResult};
use crate::store::encryption;
use gvault_cas::accel_jobs::IdChunk;
use gvault_cas::checkpoint::{self as ckpt, Plan, Source};

fn accel_of(name: &str) -> PyResult<AccelBackend> {
    match name {
        "cpu" => Ok(accel_jobs::cpu_backend()),
        "auto" => Ok(accel_jobs::auto_backend()),
        other => Err(invalid(format!(
            "accel must be \"cpu\" or \"auto\", not {other:?}"
        ))),
    }
}

/// The backend for device-resident jobs: the process's auto backend,
/// which sends jobs on device memory to the GPU that holds it.
fn device_backend() -> AccelBackend {
    accel_jobs::auto_backend()
}

/// A gvault-cas repository: deduplicating, encrypted backups of files and
/// checkpoints. `Repository(path, key_file=None)` opens one (the key file
/// defaults to `<path>.key`, as the CLI's); `Repository.init(path, ...)`
/// creates one.
#[pyclass(module = "gvault")]
pub struct Repository {
    inner: RwLock<Arc<gvault_cas::Repository>>,
    path: PathBuf,
    enc: Option<Encryption>,
    accel: String,
}

impl Repository {
    pub fn repo(&self) -> PyResult<Arc<gvault_cas::Repository>> {
        self.inner
            .read()
            .map(|r| r.clone())
            .map_err(|_| raise("Closed", "repository handle poisoned".into()))
    }
}

fn summary_dict<'py>(py: Python<'py>, pairs: &[(&str, u64)]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in pairs {
        d.set_item(*k, *v)?;
    }
    Ok(d)
}

#[pymethods]
impl Repository {
    #[new]
    #[pyo3(signature = (path, key_file=None, passphrase=None, accel="cpu"))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        key_file: Option<PathBuf>,
        passphrase: Option<String>,
        accel: &str,
    ) -> PyResult<Repository> {
        let enc = encryption(&path, false, key_file, passphrase)?;
        let backend = accel_of(accel)?;
        let (p, e) = (path.clone(), enc.clone());
        let repo = py
            .detach(move || gvault_cas::Repository::open(&p, e.as_ref(), backend))
            .py()?;
        Ok(Repository {
            inner: RwLock::new(Arc::new(repo)),
            path,
            enc,
            accel: accel.to_string(),
        })
    }

    /// Creates a repository in `path` (absent or empty). Its master key is
    /// `key_file` (created if absent), a passphrase, or by default a new
    /// key file `<path>.key`. `chunker` is "cdc" (min/avg/max sizes) or
    /// "fixed" (block_size).
    #[staticmethod]
    #[pyo3(signature = (path, key_file=None, passphrase=None, chunker="cdc", min_size=512*1024, avg_size=1024*1024, max_size=8*1024*1024, block_size=1024*1024, compression=true, accel="cpu"))]
    #[allow(clippy::too_many_arguments)]
    fn init(
        py: Python<'_>,
        path: PathBuf,
        key_file: Option<PathBuf>,
        passphrase: Option<String>,
        chunker: &str,
        min_size: u32,
        avg_size: u32,
        max_size: u32,
        block_size: u32,
        compression: bool,
        accel: &str,
    ) -> PyResult<Repository> {
        let chunker = match chunker {
            "cdc" => Chunker::Cdc {
                min: min_size,
                avg: avg_size,
                max: max_size,
            },
            "fixed" => Chunker::Fixed { size: block_size },
            other => {
                return Err(invalid(format!(
                    "chunker must be \"cdc\" or \"fixed\", not {other:?}"
                )))
            }
        };
        chunker.validate().py()?;
        let enc = encryption(&path, true, key_file, passphrase)?
            .ok_or_else(|| invalid("a repository needs a master key"))?;
        let backend = accel_of(accel)?;
        let (p, e) = (path.clone(), enc.clone());
        let repo = py
            .detach(move || {
                gvault_cas::Repository::init(
                    &p,
                    &e,
                    InitOptions {
                        chunker,
                        compression,
                    },
                    backend,
                )
            })
            .py()?;
        Ok(Repository {
            inner: RwLock::new(Arc::new(repo)),
            path,
            enc: Some(enc),
            accel: accel.to_string(),
        })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Re-reads the index files (to see what other processes wrote since
    /// this handle was opened).
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        let backend = accel_of(&self.accel)?;
        let (p, e) = (self.path.clone(), self.enc.clone());
        let repo = py
            .detach(move || gvault_cas::Repository::open(&p, e.as_ref(), backend))
            .py()?;
        let mut g = self
            .inner
            .write()
            .map_err(|_| raise("Closed", "repository handle poisoned".into()))?;
        *g = Arc::new(repo);
        Ok(())
    }

    /// Backs up files and directories into a new snapshot; returns a
    /// summary dict (snapshot id, counts, bytes, warnings).
    fn backup<'py>(&self, py: Python<'py>, paths: Vec<PathBuf>) -> PyResult<Bound<'py, PyDict>> {
        let repo = self.repo()?;
        let s = py
            .detach(|| gvault_cas::backup(&repo, &paths, &mut |_| {}))
            .py()?;
        let d = summary_dict(
            py,
            &[
                ("files_new", s.files_new),
                ("files_changed", s.files_changed),
                ("files_unchanged", s.files_unchanged),
                ("dirs", s.dirs),
                ("bytes_read", s.bytes_read),
                ("bytes_total", s.bytes_total),
                ("chunks_new", s.chunks_new),
                ("chunks_known", s.chunks_known),
                ("bytes_new_raw", s.bytes_new_raw),
                ("bytes_added", s.bytes_added),
                ("packs_written", s.packs_written),
            ],
        )?;
        d.set_item("snapshot", s.snapshot)?;
        d.set_item("parent", s.parent)?;
        d.set_item("warnings", s.warnings)?;
        Ok(d)
    }

    /// Snapshots, oldest first: dicts of id, time (seconds since the
    /// epoch), hostname and paths.
    fn snapshots<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let repo = self.repo()?;
        let all = py.detach(|| gvault_cas::snapshot::headers(&repo)).py()?;
        let out = PyList::empty(py);
        for (name, s) in all {
            let d = PyDict::new(py);
            d.set_item("id", name)?;
            d.set_item("time", s.time_ns as f64 / 1e9)?;
            d.set_item(
                "hostname",
                String::from_utf8_lossy(&s.hostname).into_owned(),
            )?;
            let paths: Vec<String> = s
                .paths
                .iter()
                .map(|p| format!("/{}", String::from_utf8_lossy(p)))
                .collect();
            d.set_item("paths", paths)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// Restores snapshot `snapshot` (an id, a unique prefix, or "latest")
    /// under `target`; `include` restricts it to matching paths.
    #[pyo3(signature = (snapshot, target, include=None))]
    fn restore<'py>(
        &self,
        py: Python<'py>,
        snapshot: &str,
        target: PathBuf,
        include: Option<&str>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let repo = self.repo()?;
        let pat = include.map(gvault_cas::Pattern::new);
        let s = py
            .detach(|| {
                let name = gvault_cas::snapshot::resolve(&repo, snapshot)?;
                let snap = gvault_cas::Snapshot::read(&repo, &name)?;
                gvault_cas::restore(&repo, &snap, &target, pat.as_ref(), &|_, _| {})
            })
            .py()?;
        let d = summary_dict(
            py,
            &[
                ("files", s.files),
                ("dirs", s.dirs),
                ("links", s.links),
                ("bytes", s.bytes),
            ],
        )?;
        d.set_item("failed", s.failed)?;
        Ok(d)
    }

    /// Checks the repository (with `read_data`, every chunk is read,
    /// opened and re-hashed); returns a report dict whose `errors` list is
    /// empty when all is well.
    #[pyo3(signature = (read_data=false))]
    fn check<'py>(&self, py: Python<'py>, read_data: bool) -> PyResult<Bound<'py, PyDict>> {
        let repo = self.repo()?;
        let r = py
            .detach(|| gvault_cas::check(&repo, read_data, &mut |_, _| {}))
            .py()?;
        let d = summary_dict(
            py,
            &[
                ("snapshots", r.snapshots),
                ("index_files", r.index_files),
                ("packs", r.packs),
                ("chunks_read", r.chunks_read),
            ],
        )?;
        d.set_item("errors", r.errors)?;
        d.set_item("affected", r.affected)?;
        d.set_item("unindexed_packs", r.unindexed_packs)?;
        Ok(d)
    }

    /// Checkpoints: dicts of name, snapshot id and time, oldest first.
    fn checkpoints<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let repo = self.repo()?;
        let all = py.detach(|| ckpt::list(&repo)).py()?;
        let out = PyList::empty(py);
        for (name, snap, t) in all {
            let d = PyDict::new(py);
            d.set_item("name", name)?;
            d.set_item("snapshot", snap)?;
            d.set_item("time", t as f64 / 1e9)?;
            out.append(d)?;
        }
        Ok(out)
    }

    fn _saver(&self, py: Python<'_>) -> PyResult<Saver> {
        let repo = self.repo()?;
        let s = py.detach(|| ckpt::Saver::new(repo)).py()?;
        Ok(Saver {
            inner: Mutex::new(Some(s)),
            plans: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// A reader of checkpoint `name` (its newest snapshot), or of the
    /// snapshot `snapshot` when given.
    #[pyo3(signature = (name, snapshot=None))]
    fn _reader(&self, py: Python<'_>, name: &str, snapshot: Option<&str>) -> PyResult<Reader> {
        let repo = self.repo()?;
        let opened = py
            .detach(|| {
                let snap = match snapshot {
                    Some(s) => gvault_cas::snapshot::resolve(&repo, s)?,
                    None => ckpt::find(&repo, name)?,
                };
                ckpt::open(&repo, &snap).map(|o| (snap, o))
            })
            .py()?;
        Ok(Reader {
            repo,
            snapshot: opened.0,
            opened: opened.1,
        })
    }

    /// Names of the pack objects.
    fn _packs(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let repo = self.repo()?;
        py.detach(|| repo.backend.list(gvault_cas::Kind::Pack)).py()
    }

    /// (stored bytes, the same pack sealed again on the host under its id).
    fn _reseal_pack<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        let repo = self.repo()?;
        let (a, b) = py.detach(|| ckpt::reseal_on_host(&repo, name)).py()?;
        Ok((PyBytes::new(py, &a), PyBytes::new(py, &b)))
    }

    /// The header of pack `name`: (chunk id hex, raw length, flags) per blob.
    fn _pack_entries(&self, py: Python<'_>, name: &str) -> PyResult<Vec<(String, u32, u8)>> {
        let repo = self.repo()?;
        let e = py
            .detach(|| gvault_cas::pack::read_header(&repo, name, None))
            .py()?;
        Ok(e.iter()
            .map(|b| (hex::encode(b.id), b.raw_len, b.flags))
            .collect())
    }

    fn __repr__(&self) -> String {
        format!("gvault.Repository({:?})", self.path.display().to_string())
    }
}

/// A source from `(kind, device, address, length)`; kind "host" or "cuda".
fn source(t: (String, u32, u64, u64)) -> PyResult<Source> {
    let (kind, device, ptr, len) = t;
    match kind.as_str() {
        "host" => Ok(Source::Host {
            ptr: ptr as usize,
            len: len as usize,
        }),
        // SAFETY: the package passes a live CUDA allocation of `len` bytes
        // (a torch tensor's storage) that it keeps alive.
        "cuda" => Ok(Source::Device(unsafe {
            DeviceSlice::new(device, ptr, len as usize)
        })),
        other => Err(invalid(format!("unknown source kind {other:?}"))),
    }
}

/// A plan the caller must seal on a device: (id, device, scratch bytes).
type DevicePlan = (u64, u32, u64);

/// One checkpoint being saved (private to gvault.checkpoint). Its methods
/// may be called from several threads: chunking, device sealing and pack
/// assembly run without the saver's lock, so each GPU works at once;
/// `add_chunked` calls must come in segment order.
#[pyclass(module = "gvault")]
pub struct Saver {
    inner: Mutex<Option<ckpt::Saver>>,
    plans: Mutex<HashMap<u64, Plan>>,
    next: AtomicU64,
}

/// Segments and, per segment, its chunks.
type SegmentChunks = (Vec<Source>, Vec<Vec<IdChunk>>);

/// Segments chunked and ided, not yet added to their saver.
#[pyclass(module = "gvault")]
pub struct Chunked {
    inner: Mutex<Option<SegmentChunks>>,
}

fn poisoned() -> PyErr {
    raise("Closed", "saver poisoned".into())
}

impl Saver {
    /// Runs `f` on the saver under its lock, taken with the GIL released:
    /// a thread that held the lock while waiting for the GIL, and one
    /// holding the GIL while waiting for the lock, would wait forever.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ckpt::Saver) -> gvault_cas::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| {
            let mut g = self
                .inner
                .lock()
                .map_err(|_| gvault_cas::Error::Accel("checkpoint saver poisoned".into()))?;
            let s = g.as_mut().ok_or_else(|| {
                gvault_cas::Error::InvalidArgument("this checkpoint save has ended".into())
            })?;
            f(s)
        })
        .py()
    }

    fn repo(&self, py: Python<'_>) -> PyResult<Arc<gvault_cas::Repository>> {
        self.with(py, |s| Ok(s.repo.clone()))
    }

    /// Seals host plans here; returns the ones that need a device.
    fn route(&self, py: Python<'_>, plans: Vec<Plan>) -> PyResult<Vec<DevicePlan>> {
        let mut out = Vec::new();
        for plan in plans {
            let Some(device) = plan.device else {
                self.with(py, |s| {
                    let p = s.seal_host(&plan)?;
                    s.put(p)
                })?;
                continue;
            };
            let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
            let len = plan.scratch_len;
            self.plans.lock().map_err(|_| poisoned())?.insert(id, plan);
            out.push((id, device, len));
        }
        Ok(out)
    }

    /// Drops the saver (its repository lock with it); the save has ended.
    fn end(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.inner.lock().map(|mut g| *g = None).map_err(|_| ()))
            .map_err(|()| poisoned())
    }

    fn plan(&self, id: u64) -> PyResult<Plan> {
        self.plans
            .lock()
            .map_err(|_| poisoned())?
            .get(&id)
            .cloned()
            .ok_or_else(|| invalid(format!("no pack plan {id}")))
    }
}

#[pymethods]
impl Saver {
    /// Chunks and ids segments `(kind, device, address, length)` (on the
    /// device for "cuda") without registering them: `add_chunked` does,
    /// in order. Safe to call from several threads at once.
    fn chunk(&self, py: Python<'_>, sources: Vec<(String, u32, u64, u64)>) -> PyResult<Chunked> {
        let srcs = sources
            .into_iter()
            .map(source)
            .collect::<PyResult<Vec<_>>>()?;
        let repo = self.repo(py)?;
        let mut chunks = Vec::with_capacity(srcs.len());
        // Runs of host and device sources, each chunked by its backend.
        let mut start = 0;
        while start < srcs.len() {
            let host = srcs[start].device().is_none();
            let mut end = start + 1;
            while end < srcs.len() && srcs[end].device().is_none() == host {
                end += 1;
            }
            let run = &srcs[start..end];
            let found = py
                .detach(|| {
                    let backend = if host {
                        repo.accel.clone()
                    } else {
                        device_backend()
                    };
                    ckpt::chunk_sources(&repo, &*backend, run)
                })
                .py()?;
            chunks.extend(found);
            start = end;
        }
        Ok(Chunked {
            inner: Mutex::new(Some((srcs, chunks))),
        })
    }

    /// Registers chunked segments after those added before: seals the
    /// host packs that fill up and returns the plans that need a device.
    fn add_chunked(&self, py: Python<'_>, chunked: &Chunked) -> PyResult<Vec<DevicePlan>> {
        let (srcs, chunks) = chunked
            .inner
            .lock()
            .map_err(|_| poisoned())?
            .take()
            .ok_or_else(|| invalid("these segments were added already"))?;
        let ready = self.with(py, |s| s.add(srcs, chunks))?;
        self.route(py, ready)
    }

    /// `chunk` then `add_chunked`.
    fn add(
        &self,
        py: Python<'_>,
        sources: Vec<(String, u32, u64, u64)>,
    ) -> PyResult<Vec<DevicePlan>> {
        let chunked = self.chunk(py, sources)?;
        self.add_chunked(py, &chunked)
    }

    /// Ends the current packs: seals the host one and returns the plans
    /// that need a device.
    fn flush(&self, py: Python<'_>) -> PyResult<Vec<DevicePlan>> {
        let rest = self.with(py, |s| Ok(s.take_rest()))?;
        self.route(py, rest)
    }

    /// Seals plan `id` on its GPU and writes its pack (see
    /// `checkpoint::seal_plan_on_device`), in this thread, with the GIL
    /// released: device scratch at `scratch` and page-locked host memory
    /// at `pinned`, both the caller's. Returns seconds per step.
    fn seal_plan(
        &self,
        py: Python<'_>,
        id: u64,
        scratch: (u32, u64, u64),
        pinned: (u64, u64),
    ) -> PyResult<Vec<(&'static str, f64)>> {
        let plan = self.plan(id)?;
        let (repo, sources) = self.with(py, |s| Ok((s.repo.clone(), s.sources.clone())))?;
        // SAFETY: the package passes its live scratch allocation.
        let dev_scratch = unsafe { DeviceSlice::new(scratch.0, scratch.1, scratch.2 as usize) };
        let (written, steps) = py
            .detach(|| {
                // SAFETY: the package passes a live page-locked buffer of
                // this length, used by this call alone, and keeps the
                // segments' tensors alive for the save.
                let host = unsafe {
                    std::slice::from_raw_parts_mut(pinned.0 as *mut u8, pinned.1 as usize)
                };
                unsafe {
                    ckpt::seal_plan_on_device(
                        &repo,
                        &*device_backend(),
                        &plan,
                        &sources,
                        dev_scratch,
                        host,
                    )
                }
            })
            .py()?;
        self.with(py, |s| s.written_pack(written))?;
        self.plans.lock().map_err(|_| poisoned())?.remove(&id);
        Ok(steps.to_vec())
    }

    /// Writes the index file and the snapshot; returns (snapshot id,
    /// stats). The save ends here.
    fn commit<'py>(&self, py: Python<'py>, name: &str) -> PyResult<(String, Bound<'py, PyDict>)> {
        if !self.plans.lock().map_err(|_| poisoned())?.is_empty() {
            return Err(invalid("commit with device plans not yet written"));
        }
        let (snap, st) = self.with(py, |s| {
            let snap = s.commit(name)?;
            Ok((snap, s.stats.clone()))
        })?;
        self.end(py)?;
        let d = summary_dict(
            py,
            &[
                ("segments", st.segments),
                ("bytes_total", st.bytes_total),
                ("chunks_new", st.chunks_new),
                ("chunks_known", st.chunks_known),
                ("bytes_new", st.bytes_new),
                ("bytes_added", st.bytes_added),
                ("packs", st.packs),
                ("packs_sealed_on_device", st.packs_sealed_on_device),
            ],
        )?;
        Ok((snap, d))
    }

    /// Abandons the save (its lock is released; packs written stay for
    /// the next backup to adopt or prune to remove).
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.end(py)
    }
}

/// An open checkpoint (private to gvault.checkpoint).
#[pyclass(module = "gvault")]
pub struct Reader {
    repo: Arc<gvault_cas::Repository>,
    opened: ckpt::Opened,
    #[pyo3(get)]
    snapshot: String,
}

#[pymethods]
impl Reader {
    fn manifest<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.opened.manifest)
    }

    /// Per segment, its chunks as (id hex, length).
    fn chunk_ids(&self) -> Vec<Vec<(String, u32)>> {
        self.opened
            .segments
            .iter()
            .map(|s| s.iter().map(|c| (hex::encode(c.id), c.len)).collect())
            .collect()
    }

    fn segment_lens(&self) -> Vec<u64> {
        self.opened
            .segments
            .iter()
            .map(|c| c.iter().map(|c| c.len as u64).sum())
            .collect()
    }

    /// Reads segments into host buffers `(segment, address, length)`, in
    /// parallel; every chunk is checked against its id.
    fn read_host(&self, py: Python<'_>, targets: Vec<(usize, u64, u64)>) -> PyResult<()> {
        for &(seg, _, _) in &targets {
            if seg >= self.opened.segments.len() {
                return Err(invalid(format!("no segment {seg}")));
            }
        }
        let repo = &self.repo;
        let segs = &self.opened.segments;
        py.detach(|| {
            targets.par_iter().try_for_each(|&(seg, ptr, len)| {
                if len == 0 {
                    return ckpt::read_segment(repo, &segs[seg], &mut []);
                }
                // SAFETY: the package passes live, distinct host buffers.
                let out = unsafe { std::slice::from_raw_parts_mut(ptr as *mut u8, len as usize) };
                ckpt::read_segment(repo, &segs[seg], out)
            })
        })
        .py()
    }

    /// Chunk ranges of segment `seg` whose aligned layout fits `cap` bytes.
    fn groups(&self, seg: usize, cap: u64) -> PyResult<Vec<(usize, usize)>> {
        let chunks = self
            .opened
            .segments
            .get(seg)
            .ok_or_else(|| invalid(format!("no segment {seg}")))?;
        Ok(ckpt::groups(chunks, cap))
    }

    /// Loads chunks [start, end) of segment `seg` into the segment's
    /// device memory `out` (see `checkpoint::load_group_on_device`), in
    /// this thread, with the GIL released; `pinned` (page-locked host
    /// memory) and `scratch` (device memory on `out`'s GPU) are the
    /// caller's. Returns the bytes copied to the device and seconds per
    /// step.
    #[allow(clippy::too_many_arguments)]
    fn load_group(
        &self,
        py: Python<'_>,
        seg: usize,
        start: usize,
        end: usize,
        pinned: (u64, u64),
        scratch: (u32, u64, u64),
        out: (u32, u64, u64),
    ) -> PyResult<(u64, Vec<(&'static str, f64)>)> {
        let chunks = self
            .opened
            .segments
            .get(seg)
            .ok_or_else(|| invalid(format!("no segment {seg}")))?;
        if start > end || end > chunks.len() {
            return Err(invalid("chunk range out of bounds"));
        }
        let first: u64 = chunks[..start].iter().map(|c| c.len as u64).sum();
        let repo = &self.repo;
        // SAFETY: the package passes live device allocations.
        let (dev_scratch, dev_out) = unsafe {
            (
                DeviceSlice::new(scratch.0, scratch.1, scratch.2 as usize),
                DeviceSlice::new(out.0, out.1, out.2 as usize),
            )
        };
        let (moved, steps) = py
            .detach(|| {
                // SAFETY: a live page-locked buffer of this length, used by
                // this call alone; each call writes its own chunks of `out`.
                let host = unsafe {
                    std::slice::from_raw_parts_mut(pinned.0 as *mut u8, pinned.1 as usize)
                };
                unsafe {
                    ckpt::load_group_on_device(
                        repo,
                        &*device_backend(),
                        &chunks[start..end],
                        first,
                        host,
                        dev_scratch,
                        dev_out,
                    )
                }
            })
            .py()?;
        Ok((moved, steps.to_vec()))
    }
}
