//! The libFuzzer driver: `GVAULT_FUZZ_TARGET=<name>` picks the target
//! (scripts/fuzz.sh sets it). One binary for every target keeps the
//! instrumented build to one link.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

static TARGET: OnceLock<fn(&[u8])> = OnceLock::new();

fn target() -> fn(&[u8]) {
    *TARGET.get_or_init(|| {
        let name = std::env::var("GVAULT_FUZZ_TARGET").unwrap_or_default();
        match gvault_fuzz::find(&name) {
            Some(t) => t.run,
            None => {
                let names: Vec<&str> = gvault_fuzz::TARGETS.iter().map(|t| t.name).collect();
                eprintln!(
                    "gvault-fuzz: set GVAULT_FUZZ_TARGET to one of: {}",
                    names.join(" ")
                );
                std::process::exit(2);
            }
        }
    })
}

fuzz_target!(|data: &[u8]| target()(data));
