//! Targets for gvault-store's formats (docs/format.md), through the
//! store's `fuzzing` entry points: each file is read by the same code an
//! open or a read runs, over an in-memory file system.

use gvault_store::fuzzing;

use crate::capped;

pub fn block(data: &[u8]) {
    let _ = fuzzing::block(capped(data));
}

pub fn table(data: &[u8]) {
    let _ = fuzzing::table(capped(data).to_vec());
}

pub fn value_log(data: &[u8]) {
    let _ = fuzzing::value_log(capped(data).to_vec());
}

pub fn commit_payload(data: &[u8]) {
    let _ = fuzzing::commit_payload(capped(data));
}

pub fn manifest(data: &[u8]) {
    let _ = fuzzing::manifest(capped(data).to_vec());
}

pub fn version_edit(data: &[u8]) {
    let _ = fuzzing::version_edit(capped(data));
}

pub fn pointer(data: &[u8]) {
    let _ = fuzzing::pointer(capped(data).to_vec());
}

pub fn key_registry(data: &[u8]) {
    let _ = fuzzing::key_registry(capped(data));
}
