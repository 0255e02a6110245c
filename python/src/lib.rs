//! `gvault._native`: the Rust side of the `gvault` Python package.
//!
//! - [`store`]: `gvault.Store`, a gvault-store opened from Python.
//! - [`repo`]: `gvault.Repository`, a gvault-cas repository (init, backup,
//!   restore, snapshots, check), and the checkpoint calls that
//!   `gvault/checkpoint.py` makes (the engine, workers on every GPU
//!   included, is `gvault_cas::checkpoint`; docs/repository.md §11).
//!
//! Every call that touches disk or the accelerator releases the GIL.
//! Errors become the exception classes of `gvault/_errors.py`.

use pyo3::prelude::*;

mod errors;
mod repo;
mod store;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<store::Store>()?;
    m.add_class::<store::StoreSnapshot>()?;
    m.add_class::<store::ScanIter>()?;
    m.add_class::<repo::Repository>()?;
    m.add_class::<repo::Reader>()?;
    Ok(())
}
