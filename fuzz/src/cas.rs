//! Targets for gvault-cas's objects (docs/repository.md), through the
//! repository's `fuzzing` entry points: each object is given in the clear,
//! sealed under a fixed data key, and read by the code the repository
//! reads it with, over an in-memory backend.

use gvault_cas::fuzzing;

use crate::capped;

pub fn cas_pack(data: &[u8]) {
    let _ = fuzzing::pack(capped(data));
}

pub fn cas_index(data: &[u8]) {
    let _ = fuzzing::index_file(capped(data));
}

pub fn cas_snapshot(data: &[u8]) {
    let _ = fuzzing::snapshot(capped(data));
}

pub fn cas_config(data: &[u8]) {
    let _ = fuzzing::config(capped(data));
}

pub fn cas_lock(data: &[u8]) {
    let _ = fuzzing::lock(capped(data));
}
