//! `gvault.Repository`, and the checkpoint calls behind
//! `gvault.checkpoint` (`Repository._save_checkpoint`, `Reader`).
//!
//! The checkpoint primitives take raw buffer addresses from
//! `gvault/checkpoint.py`, which keeps every buffer alive and unchanged
//! until the call that uses it returns (the limited C API of abi3 wheels
//! has no buffer protocol before Python 3.11). They are private to the
//! package.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use gvault_accel::DeviceSlice;
use gvault_cas::accel_jobs::{self, AccelBackend};
use gvault_cas::{Chunker, InitOptions};
use gvault_store::Encryption;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::{invalid, raise, StoreResult};
use crate::store::encryption;
use gvault_cas::checkpoint::{self as ckpt, run, Source};

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

    /// Saves checkpoint `name` from segments `(kind, device, address,
    /// length)` (segment 0 the manifest; kind "host" or "cuda"), every GPU
    /// at once, with the GIL released (`checkpoint::run::save`). Returns
    /// (snapshot, stats, seconds per step, bytes moved over the link).
    #[pyo3(signature = (name, sources, workers_per_gpu=None))]
    fn _save_checkpoint<'py>(
        &self,
        py: Python<'py>,
        name: &str,
        sources: Vec<(String, u32, u64, u64)>,
        workers_per_gpu: Option<usize>,
    ) -> PyResult<(String, Dicts<'py>)> {
        let srcs = sources
            .into_iter()
            .map(source)
            .collect::<PyResult<Vec<_>>>()?;
        let repo = self.repo()?;
        let opts = run::Options { workers_per_gpu };
        let saved = py
            .detach(|| {
                // SAFETY: the package keeps every source's buffer alive and
                // unchanged until this returns.
                unsafe { run::save(&repo, &*device_backend(), name, &srcs, &opts) }
            })
            .py()?;
        let st = &saved.stats;
        let stats = summary_dict(
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
        let dicts = (
            stats,
            trace_dict(py, &saved.trace)?,
            moved_dict(py, &saved.moved)?,
        );
        Ok((saved.snapshot, dicts))
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

/// A save's stats, seconds per step, and bytes moved over the link.
type Dicts<'py> = (Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyDict>);

fn trace_dict<'py>(py: Python<'py>, trace: &run::Trace) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (k, v) in trace {
        d.set_item(*k, *v)?;
    }
    Ok(d)
}

fn moved_dict<'py>(py: Python<'py>, m: &run::Moved) -> PyResult<Bound<'py, PyDict>> {
    summary_dict(
        py,
        &[
            ("d2h_bytes", m.d2h_bytes),
            ("d2h_copies", m.d2h_copies),
            ("h2d_bytes", m.h2d_bytes),
            ("h2d_copies", m.h2d_copies),
        ],
    )
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

    /// Loads every segment into `targets` `(kind, device, address,
    /// length)`, one a segment in order (kind "host" or "cuda"), every GPU
    /// at once, with the GIL released (`checkpoint::run::load`); every
    /// chunk is checked against its id. Returns (seconds per step, bytes
    /// moved over the link).
    #[pyo3(signature = (targets, workers_per_gpu=None))]
    fn load<'py>(
        &self,
        py: Python<'py>,
        targets: Vec<(String, u32, u64, u64)>,
        workers_per_gpu: Option<usize>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let targets = targets
            .into_iter()
            .map(source)
            .collect::<PyResult<Vec<run::Target>>>()?;
        let (repo, opened) = (&self.repo, &self.opened);
        let opts = run::Options { workers_per_gpu };
        let (trace, moved) = py
            .detach(|| {
                // SAFETY: the package passes live, distinct buffers of each
                // segment's length, untouched until this returns.
                unsafe { run::load(repo, &*device_backend(), opened, &targets, &opts) }
            })
            .py()?;
        Ok((trace_dict(py, &trace)?, moved_dict(py, &moved)?))
    }
}
