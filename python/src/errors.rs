//! The store's and the repository's errors as the Python exceptions of
//! `gvault/_errors.py` (each a subclass of `gvault.GvaultError`, and of the
//! builtin it resembles: `InvalidArgument` is a `ValueError`, `IoError` an
//! `OSError`, `NotFound` a `LookupError`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// A Python exception of class `gvault._errors.<class>` with `msg`.
pub fn raise(class: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("gvault._errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| c.call1((msg.clone(),)));
        match made {
            Ok(e) => PyErr::from_value(e),
            Err(_) => PyRuntimeError::new_err(msg),
        }
    })
}

pub fn store_class(e: &gvault_store::Error) -> &'static str {
    use gvault_store::Error as E;
    match e {
        E::Io { .. } => "IoError",
        E::Corruption { .. } => "Corruption",
        E::Locked { .. } => "Locked",
        E::ReadOnly { .. } => "ReadOnly",
        E::NotAStore { .. } => "NotAStore",
        E::NotFound { .. } => "NotFound",
        E::InvalidArgument(_) => "InvalidArgument",
        E::Unsupported { .. } => "Unsupported",
        E::KeyRequired { .. } | E::WrongKey { .. } => "KeyError",
        E::Seal(_) => "AccelError",
        E::Closed(_) => "Closed",
    }
}

pub fn from_store(e: gvault_store::Error) -> PyErr {
    raise(store_class(&e), e.to_string())
}

pub fn from_cas(e: gvault_cas::Error) -> PyErr {
    use gvault_cas::Error as E;
    let class = match &e {
        E::Io { .. } => "IoError",
        E::Corrupt { .. } => "Corruption",
        E::NotARepository { .. } => "NotARepository",
        E::NewerFormat { .. } => "Unsupported",
        E::KeyRequired { .. } => "KeyError",
        E::Keys(k) => store_class(k),
        E::Locked(_) => "Locked",
        E::InvalidArgument(_) => "InvalidArgument",
        E::NotFound(_) => "NotFound",
        E::Accel(_) => "AccelError",
    };
    raise(class, e.to_string())
}

pub fn invalid(msg: impl Into<String>) -> PyErr {
    raise("InvalidArgument", msg.into())
}

pub trait StoreResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> StoreResult<T> for gvault_store::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(from_store)
    }
}

impl<T> StoreResult<T> for gvault_cas::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(from_cas)
    }
}
