//! Encryption modes of `gvault bench lsm`: which accelerator seals the
//! store's blocks (or none), and the encrypted-over-plain ratio per row.

use std::collections::HashMap;
use std::sync::Arc;

use gvault_accel::Backend;
use gvault_store::{Encryption, Options};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Encrypt {
    /// CRC32C only.
    None,
    /// AES-256-GCM on the CPU backend.
    Cpu,
    /// AES-256-GCM on the GPU backend (fails without a GPU).
    Gpu,
    /// AES-256-GCM through the auto backend's per-job choice.
    Auto,
}

impl Encrypt {
    pub fn name(self) -> &'static str {
        match self {
            Encrypt::None => "none",
            Encrypt::Cpu => "cpu",
            Encrypt::Gpu => "gpu",
            Encrypt::Auto => "auto",
        }
    }
}

/// The accelerators of the requested modes, built once for the whole run
/// (a GPU backend compiles its kernels; auto loads its cost model).
pub struct Backends {
    by_mode: HashMap<Encrypt, Arc<dyn Backend>>,
    /// The stores' `read_ahead` option (None: the store's default).
    pub read_ahead: Option<bool>,
}

impl Backends {
    pub fn new(modes: &[Encrypt]) -> Result<Backends, String> {
        let mut m: HashMap<Encrypt, Arc<dyn Backend>> = HashMap::new();
        for &mode in modes {
            let b: Arc<dyn Backend> = match mode {
                Encrypt::None => continue,
                Encrypt::Cpu => Arc::new(gvault_accel::cpu::CpuBackend::new()),
                Encrypt::Gpu => Arc::new(
                    gvault_accel::gpu::GpuBackend::probe()
                        .map_err(|why| format!("--encrypt gpu: no usable GPU: {why}"))?,
                ),
                Encrypt::Auto => Arc::new(gvault_accel::AutoBackend::new()),
            };
            m.insert(mode, b);
        }
        Ok(Backends {
            by_mode: m,
            read_ahead: None,
        })
    }

    /// Store options for `mode`: a fresh random master key (the benchmark
    /// stores are thrown away) and the mode's accelerator.
    pub fn options(&self, mode: Encrypt) -> Options {
        let base = Options {
            read_ahead: self.read_ahead,
            ..Options::default()
        };
        match self.by_mode.get(&mode) {
            None => base,
            Some(b) => Options {
                encryption: Some(Encryption::with_key(gvault_store::keys::generate_key())),
                crypto_backend: Some(b.clone()),
                ..base
            },
        }
    }
}

/// Throughput of the unencrypted run of each (workload, value size, sync),
/// for the "enc/plain" column of the encrypted runs after it.
#[derive(Default)]
pub struct PlainRates(HashMap<(&'static str, usize, Option<bool>), f64>);

impl PlainRates {
    /// Records a plain row, or returns an encrypted row's ratio to it.
    pub fn ratio(
        &mut self,
        mode: Encrypt,
        key: (&'static str, usize, Option<bool>),
        ops_per_sec: f64,
    ) -> Option<f64> {
        if mode == Encrypt::None {
            self.0.insert(key, ops_per_sec);
            return None;
        }
        self.0
            .get(&key)
            .filter(|p| **p > 0.0)
            .map(|p| ops_per_sec / p)
    }
}
