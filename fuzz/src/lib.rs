//! gvault-fuzz: one coverage-guided fuzz target per decoder of gvault's
//! on-disk and wire formats.
//!
//! - [`TARGETS`]: every target by name; each takes arbitrary bytes, runs
//!   the real decoding entry point (plain mode: checksums are made valid
//!   first, so the fuzzer reaches the decoder behind them) and panics only
//!   on a bug: a panic in the decoder, or a round trip that changes a value.
//! - `src/bin/gvault-fuzz.rs`: the libFuzzer driver (feature `libfuzzer`);
//!   `GVAULT_FUZZ_TARGET` picks the target. `scripts/fuzz.sh` builds it with
//!   coverage instrumentation and runs it over `fuzz/corpus/<target>/`.
//! - `src/bin/gvault-fuzz-seeds.rs`: writes the seed corpora from real
//!   files: what a store, a backup repository, the cost-model writer, the
//!   kernel cache and `gvault export` write, and what a client and the
//!   daemon of `gvault serve` send each other.
//! - `tests/replay.rs`: every corpus and regression input through every
//!   target, on the ordinary test run (no instrumentation needed).
//! - [`alloc_cap`]: the global allocator of all of them, which aborts on a
//!   single allocation too large for any input to justify.

pub mod accel;
pub mod alloc_cap;
pub mod cas;
pub mod cli;
pub mod seeds;
pub mod seeds_accel;
pub mod seeds_cas;
pub mod seeds_cli;
pub mod seeds_service;
pub mod service;
pub mod store;

/// A fuzz target: its name (the corpus directory's name) and its body.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, in the order `scripts/fuzz.sh all` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "block",
        run: store::block,
    },
    Target {
        name: "table",
        run: store::table,
    },
    Target {
        name: "value_log",
        run: store::value_log,
    },
    Target {
        name: "commit_payload",
        run: store::commit_payload,
    },
    Target {
        name: "manifest",
        run: store::manifest,
    },
    Target {
        name: "version_edit",
        run: store::version_edit,
    },
    Target {
        name: "pointer",
        run: store::pointer,
    },
    Target {
        name: "key_registry",
        run: store::key_registry,
    },
    Target {
        name: "kernel_cache",
        run: accel::kernel_cache,
    },
    Target {
        name: "cost_model",
        run: accel::cost_model,
    },
    Target {
        name: "cli_import",
        run: cli::cli_import,
    },
    Target {
        name: "cli_value",
        run: cli::cli_value,
    },
    Target {
        name: "cas_pack",
        run: cas::cas_pack,
    },
    Target {
        name: "cas_index",
        run: cas::cas_index,
    },
    Target {
        name: "cas_snapshot",
        run: cas::cas_snapshot,
    },
    Target {
        name: "cas_config",
        run: cas::cas_config,
    },
    Target {
        name: "cas_lock",
        run: cas::cas_lock,
    },
    Target {
        name: "service_request",
        run: service::service_request,
    },
    Target {
        name: "service_reply",
        run: service::service_reply,
    },
    Target {
        name: "service_frames",
        run: service::service_frames,
    },
];

pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Inputs longer than this are cut: every real small file fits, and a
/// fuzzer spends its time in decoders rather than in copies.
pub const MAX_INPUT: usize = 1 << 20;

pub(crate) fn capped(data: &[u8]) -> &[u8] {
    &data[..data.len().min(MAX_INPUT)]
}
