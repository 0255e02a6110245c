//! Targets for gvault-accel's files, through accel's `fuzzing` entry
//! points: the kernel-cache entry and the cost-model file, each read by
//! the code the GPU backend and the auto backend read them with.

use gvault_accel::fuzzing;

use crate::capped;

pub fn kernel_cache(data: &[u8]) {
    let _ = fuzzing::kernel_cache_entry(capped(data));
}

pub fn cost_model(data: &[u8]) {
    let _ = fuzzing::cost_model(capped(data));
}
