//! `gvault.Store`: a gvault-store, bytes in and bytes out.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gvault_store::{Encryption, Options, ReadOptions, WriteBatch, WriteOptions};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{invalid, raise, StoreResult};

/// The key file `gvault init --encrypt` makes beside a store or
/// repository: `<dir>.key`.
pub fn default_key_file(dir: &Path) -> PyResult<PathBuf> {
    let name = dir
        .file_name()
        .ok_or_else(|| invalid(format!("cannot name a key file after {}", dir.display())))?;
    let mut n = name.to_os_string();
    n.push(".key");
    Ok(dir.with_file_name(n))
}

/// The encryption to open or create `dir` with: an explicit key file
/// (created when `create_key` and absent), a passphrase, else the default
/// key file beside `dir` (created when `create_key`), else none.
pub fn encryption(
    dir: &Path,
    create_key: bool,
    key_file: Option<PathBuf>,
    passphrase: Option<String>,
) -> PyResult<Option<Encryption>> {
    if let Some(p) = passphrase {
        if key_file.is_some() {
            return Err(invalid("give key_file or passphrase, not both"));
        }
        return Ok(Some(Encryption::with_passphrase(p)));
    }
    let (file, explicit) = match key_file {
        Some(f) => (f, true),
        None => (default_key_file(dir)?, false),
    };
    if file.exists() {
        let k = gvault_store::keys::read_key_file(&file).py()?;
        return Ok(Some(Encryption::with_key(k)));
    }
    if create_key {
        let k = gvault_store::keys::create_key_file(&file).py()?;
        return Ok(Some(Encryption::with_key(k)));
    }
    if explicit {
        return Err(raise(
            "KeyError",
            format!("key file {} does not exist", file.display()),
        ));
    }
    Ok(None)
}

fn bytes_of(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    obj.extract::<Vec<u8>>()
        .map_err(|_| invalid(format!("{what} must be bytes, bytearray or memoryview")))
        .and_then(|v| {
            if obj.is_instance_of::<pyo3::types::PyString>() {
                Err(invalid(format!("{what} must be bytes, not str")))
            } else {
                Ok(v)
            }
        })
}

/// A gvault-store. `Store(path, encrypt=False, key_file=None)`: opens the
/// store in `path` (created if missing unless `create=False`). With
/// `encrypt=True` a new store is encrypted at rest; its key file is
/// `key_file`, or `<path>.key`, created when absent. An encrypted store
/// opens with its key file (given, or found beside it) or `passphrase`.
#[pyclass(module = "gvault")]
pub struct Store {
    inner: Mutex<Option<Arc<gvault_store::Store>>>,
    path: PathBuf,
}

impl Store {
    fn handle(&self) -> PyResult<Arc<gvault_store::Store>> {
        let g = self
            .inner
            .lock()
            .map_err(|_| raise("Closed", "store handle poisoned".into()))?;
        g.clone()
            .ok_or_else(|| raise("Closed", format!("store {} is closed", self.path.display())))
    }
}

fn write_opts(sync: bool) -> WriteOptions {
    WriteOptions { sync }
}

#[pymethods]
impl Store {
    #[new]
    #[pyo3(signature = (path, encrypt=false, key_file=None, passphrase=None, create=true, read_only=false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        encrypt: bool,
        key_file: Option<PathBuf>,
        passphrase: Option<String>,
        create: bool,
        read_only: bool,
    ) -> PyResult<Store> {
        let new_store = !path.join("CURRENT").exists();
        let enc = encryption(&path, encrypt && new_store && create, key_file, passphrase)?;
        if encrypt && enc.is_none() {
            return Err(raise(
                "KeyError",
                format!(
                    "store {} needs its key file to be opened encrypted",
                    path.display()
                ),
            ));
        }
        let opts = Options {
            create_if_missing: create,
            read_only,
            encryption: enc,
            ..Options::default()
        };
        let p = path.clone();
        let s = py
            .detach(move || gvault_store::Store::open(&p, opts))
            .py()?;
        Ok(Store {
            inner: Mutex::new(Some(Arc::new(s))),
            path,
        })
    }

    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn encrypted(&self) -> PyResult<bool> {
        Ok(self.handle()?.is_encrypted())
    }

    /// The value of `key`, or None.
    #[pyo3(signature = (key, snapshot=None))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        snapshot: Option<PyRef<'py, StoreSnapshot>>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let s = self.handle()?;
        let key = bytes_of(key, "key")?;
        let snap = snapshot.as_ref().map(|s| s.snap.clone());
        let v = py
            .detach(|| {
                let opts = ReadOptions {
                    snapshot: snap.as_deref(),
                };
                s.get_opt(&opts, &key)
            })
            .py()?;
        Ok(v.map(|v| PyBytes::new(py, &v)))
    }

    #[pyo3(signature = (key, value, sync=false))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        sync: bool,
    ) -> PyResult<()> {
        let s = self.handle()?;
        let (k, v) = (bytes_of(key, "key")?, bytes_of(value, "value")?);
        py.detach(|| s.put_opt(&write_opts(sync), k, v)).py()
    }

    #[pyo3(signature = (key, sync=false))]
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let s = self.handle()?;
        let k = bytes_of(key, "key")?;
        py.detach(|| s.delete_opt(&write_opts(sync), k)).py()
    }

    /// Applies `ops`, an iterable of `(key, value)` (value None deletes),
    /// atomically.
    #[pyo3(signature = (ops, sync=false))]
    fn batch(&self, py: Python<'_>, ops: &Bound<'_, PyAny>, sync: bool) -> PyResult<()> {
        let s = self.handle()?;
        let mut b = WriteBatch::new();
        for item in ops.try_iter()? {
            let item = item?;
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item
                .extract()
                .map_err(|_| invalid("batch items are (key, value) pairs; value None deletes"))?;
            let k = bytes_of(&k, "key")?;
            if v.is_none() {
                b.delete(k);
            } else {
                b.put(k, bytes_of(&v, "value")?);
            }
        }
        py.detach(|| s.write(&write_opts(sync), b)).py()
    }

    /// Keys in [start, end) with their values, as an iterator of
    /// `(key, value)`; descending with `reverse`.
    #[pyo3(signature = (start=None, end=None, reverse=false, snapshot=None))]
    fn scan(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        snapshot: Option<PyRef<'_, StoreSnapshot>>,
    ) -> PyResult<ScanIter> {
        let s = self.handle()?;
        let start = start.map(|b| bytes_of(b, "start")).transpose()?;
        let end = end.map(|b| bytes_of(b, "end")).transpose()?;
        let snap = snapshot.as_ref().map(|s| s.snap.clone());
        let scan = py
            .detach(|| {
                let opts = ReadOptions {
                    snapshot: snap.as_deref(),
                };
                s.scan(&opts, start.as_deref(), end.as_deref(), reverse)
            })
            .py()?;
        Ok(ScanIter {
            scan: Mutex::new(Some(scan)),
            _snap: snap,
        })
    }

    /// A consistent read view; pass it as `snapshot=` to get and scan.
    fn snapshot(&self) -> PyResult<StoreSnapshot> {
        let s = self.handle()?;
        Ok(StoreSnapshot {
            snap: Arc::new(s.snapshot()),
        })
    }

    /// Writes the memtable to a table.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.handle()?;
        py.detach(|| s.flush()).py()
    }

    /// Reads and checks every block and value; returns counts.
    fn verify(&self, py: Python<'_>) -> PyResult<String> {
        let s = self.handle()?;
        let r = py.detach(|| s.verify()).py()?;
        Ok(format!("{r:?}"))
    }

    /// Closes the store (idempotent). Fails while another thread is inside
    /// a call on it.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = {
            let mut g = self
                .inner
                .lock()
                .map_err(|_| raise("Closed", "store handle poisoned".into()))?;
            match g.take() {
                None => return Ok(()),
                Some(a) => match Arc::try_unwrap(a) {
                    Ok(s) => s,
                    Err(a) => {
                        *g = Some(a);
                        return Err(raise(
                            "InvalidArgument",
                            "the store is in use (a call, scan or snapshot is still open); close it after them".into(),
                        ));
                    }
                },
            }
        };
        py.detach(|| taken.close()).py()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("gvault.Store({:?})", self.path.display().to_string())
    }
}

/// A consistent read view of a store, released when dropped.
#[pyclass(module = "gvault")]
pub struct StoreSnapshot {
    snap: Arc<gvault_store::Snapshot>,
}

#[pymethods]
impl StoreSnapshot {
    #[getter]
    fn sequence(&self) -> u64 {
        self.snap.sequence()
    }
}

/// The iterator `Store.scan` returns.
#[pyclass(module = "gvault")]
pub struct ScanIter {
    scan: Mutex<Option<gvault_store::Scan>>,
    _snap: Option<Arc<gvault_store::Snapshot>>,
}

#[pymethods]
impl ScanIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let mut g = self
            .scan
            .lock()
            .map_err(|_| raise("Closed", "scan poisoned".into()))?;
        let Some(scan) = g.as_mut() else {
            return Ok(None);
        };
        match py.detach(|| scan.next()) {
            None => {
                *g = None;
                Ok(None)
            }
            Some(r) => {
                let (k, v) = r.py()?;
                Ok(Some((PyBytes::new(py, &k), PyBytes::new(py, &v))))
            }
        }
    }
}
