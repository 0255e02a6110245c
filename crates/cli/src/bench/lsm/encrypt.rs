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
    /// AES-256-GCM in a running `gvault serve` (the socket of
    /// GVAULT_ACCEL=service:SOCKET, else the default one).
    Service,
    /// CRC32C only, a second time: an A/A check (its ratio to none is the
    /// host's own spread between two runs of the same code).
    NoneAgain,
    /// Index-only (seed 000's "index encryption", Table 4.10): tables and
    /// manifest sealed on the CPU backend, the value log under CRC32C.
    CpuIndex,
    /// Index-only, sealed on the GPU backend.
    GpuIndex,
    /// Index-only, sealed through the auto backend.
    AutoIndex,
}

impl Encrypt {
    pub fn name(self) -> &'static str {
        match self {
            Encrypt::None => "none",
            Encrypt::Cpu => "cpu",
            Encrypt::Gpu => "gpu",
            Encrypt::Auto => "auto",
            Encrypt::Service => "service",
            Encrypt::NoneAgain => "none-again",
            Encrypt::CpuIndex => "cpu-index",
            Encrypt::GpuIndex => "gpu-index",
            Encrypt::AutoIndex => "auto-index",
        }
    }

    /// Whether the mode's stores are encrypted (index-only ones too).
    pub fn encrypts(self) -> bool {
        !matches!(self, Encrypt::None | Encrypt::NoneAgain)
    }

    /// Whether the mode seals the value log too.
    pub fn seals_value_log(self) -> bool {
        matches!(
            self,
            Encrypt::Cpu | Encrypt::Gpu | Encrypt::Auto | Encrypt::Service
        )
    }
}

/// The accelerators of the requested modes, built once for the whole run
/// (a GPU backend compiles its kernels; auto loads its cost model).
pub struct Backends {
    by_mode: HashMap<Encrypt, Arc<dyn Backend>>,
    /// The stores' `read_ahead` option (None: the store's default).
    pub read_ahead: Option<bool>,
    /// The stores' memtable size in bytes (None: the store's default).
    pub memtable_bytes: Option<usize>,
}

impl Backends {
    pub fn new(modes: &[Encrypt]) -> Result<Backends, String> {
        let mut m: HashMap<Encrypt, Arc<dyn Backend>> = HashMap::new();
        for &mode in modes {
            let b: Arc<dyn Backend> = match mode {
                Encrypt::None | Encrypt::NoneAgain => continue,
                Encrypt::Cpu | Encrypt::CpuIndex => Arc::new(gvault_accel::CpuBackend::new()),
                Encrypt::Gpu | Encrypt::GpuIndex => Arc::new(
                    gvault_accel::GpuBackend::probe()
                        .map_err(|why| format!("--encrypt gpu: no usable GPU: {why}"))?,
                ),
                Encrypt::Auto | Encrypt::AutoIndex => Arc::new(gvault_accel::AutoBackend::new()),
                Encrypt::Service => crate::serve_cmd::running_service("--encrypt service")?,
            };
            m.insert(mode, b);
        }
        Ok(Backends {
            by_mode: m,
            read_ahead: None,
            memtable_bytes: None,
        })
    }

    /// Store options for `mode`: a fresh random master key (the benchmark
    /// stores are thrown away) and the mode's accelerator.
    pub fn options(&self, mode: Encrypt) -> Options {
        let defaults = Options::default();
        let base = Options {
            read_ahead: self.read_ahead,
            write_buffer_size: self.memtable_bytes.unwrap_or(defaults.write_buffer_size),
            ..defaults
        };
        match self.by_mode.get(&mode) {
            None => base,
            Some(b) => Options {
                encryption: Some(Encryption {
                    seal_value_log: Some(mode.seals_value_log()),
                    ..Encryption::with_key(gvault_store::keys::generate_key())
                }),
                crypto_backend: Some(b.clone()),
                ..base
            },
        }
    }
}

/// A row's cell: workload, value size, sync, threads.
pub type Cell = (&'static str, usize, Option<bool>, Option<usize>);

/// Throughput of the unencrypted run of each cell, for the "enc/plain"
/// column of the encrypted runs after it.
#[derive(Default)]
pub struct PlainRates(HashMap<Cell, f64>);

impl PlainRates {
    /// Records a plain row, or returns an encrypted row's ratio to it.
    pub fn ratio(&mut self, mode: Encrypt, key: Cell, ops_per_sec: f64) -> Option<f64> {
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

/// An encrypted mode's throughput over plain, repeat by repeat: each
/// repeat runs the modes back to back, so a pair shares the host's state
/// of the moment (another tenant, the clock, the page cache), which the
/// ratio of two medians taken over the whole run does not.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Paired {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Paired ratios of `enc` over `plain` (ops/s per repeat, in run order);
/// None unless both have the same, nonzero number of runs, all positive.
pub fn paired(plain: &[f64], enc: &[f64]) -> Option<Paired> {
    if plain.is_empty() || plain.len() != enc.len() || plain.iter().any(|p| *p <= 0.0) {
        return None;
    }
    let mut r: Vec<f64> = enc.iter().zip(plain).map(|(e, p)| e / p).collect();
    r.sort_by(f64::total_cmp);
    let n = r.len();
    // The middle value, or the mean of the two middle ones.
    let median = if n % 2 == 1 {
        r[n / 2]
    } else {
        (r[n / 2 - 1] + r[n / 2]) / 2.0
    };
    Some(Paired {
        median,
        min: r[0],
        max: r[n - 1],
    })
}

/// Issue 7's target for an `auto` row: encrypted throughput at least this
/// share of plain, 0.90 for values of 4 KiB and up, 0.80 below.
pub fn target_for(value_bytes: usize) -> f64 {
    if value_bytes >= 4096 {
        0.90
    } else {
        0.80
    }
}

/// One auto cell for the closing target check: its ratio to plain (of the
/// medians), and the same cell's none-again ratio (the host's A/A spread)
/// when that mode ran.
pub struct TargetCell {
    pub label: String,
    pub value_bytes: usize,
    pub ratio: f64,
    pub control: Option<f64>,
}

/// "auto >= target in N of M cells" and the cells that missed, each with
/// its A/A ratio beside it so a reader can tell a miss from the host's
/// spread; `None` when no auto cell has a ratio.
pub fn target_summary(cells: &[TargetCell]) -> Option<String> {
    if cells.is_empty() {
        return None;
    }
    let misses: Vec<String> = cells
        .iter()
        .filter(|c| c.ratio < target_for(c.value_bytes))
        .map(|c| match c.control {
            Some(a) => format!("{} {:.2} (none-again {a:.2})", c.label, c.ratio),
            None => format!("{} {:.2}", c.label, c.ratio),
        })
        .collect();
    let met = cells.len() - misses.len();
    let mut line = format!(
        "target (auto/plain >= 0.90 from 4 KiB values, >= 0.80 below): {met} of {} cells",
        cells.len()
    );
    if !misses.is_empty() {
        line.push_str(&format!("; below: {}", misses.join(", ")));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_mode_is_a_plain_store() {
        let modes = [
            Encrypt::None,
            Encrypt::NoneAgain,
            Encrypt::Cpu,
            Encrypt::CpuIndex,
        ];
        let b = Backends::new(&modes).unwrap();
        assert!(b.options(Encrypt::NoneAgain).encryption.is_none());
        assert!(b.options(Encrypt::Cpu).encryption.is_some());
        assert!(!Encrypt::NoneAgain.encrypts() && !Encrypt::None.encrypts());
        assert!(Encrypt::Auto.encrypts());
        let index = b.options(Encrypt::CpuIndex).encryption.unwrap();
        assert_eq!(index.seal_value_log, Some(false));
        let full = b.options(Encrypt::Cpu).encryption.unwrap();
        assert_eq!(full.seal_value_log, Some(true));
        // Its rows get a ratio to none, like an encrypted mode's.
        let mut rates = PlainRates::default();
        let key = ("fillseq", 4096, Some(false), None);
        assert_eq!(rates.ratio(Encrypt::None, key, 100.0), None);
        assert_eq!(rates.ratio(Encrypt::NoneAgain, key, 95.0), Some(0.95));
        // Each thread count against its own plain run.
        let one = ("readrandom", 100, None, Some(1));
        let four = ("readrandom", 100, None, Some(4));
        assert_eq!(rates.ratio(Encrypt::None, one, 100.0), None);
        assert_eq!(rates.ratio(Encrypt::None, four, 300.0), None);
        assert_eq!(rates.ratio(Encrypt::Cpu, four, 150.0), Some(0.5));
        assert_eq!(rates.ratio(Encrypt::Cpu, one, 90.0), Some(0.9));
    }

    #[test]
    fn the_target_check_names_each_miss_with_its_spread() {
        let cell = |label: &str, value_bytes, ratio, control| TargetCell {
            label: label.into(),
            value_bytes,
            ratio,
            control,
        };
        assert_eq!(target_summary(&[]), None);
        let line = target_summary(&[
            cell("fillseq 4KiB", 4096, 0.91, Some(1.02)),
            cell("readrandom 64KiB", 65536, 0.86, Some(0.97)),
            cell("fillseq 100B", 100, 0.85, None),
            cell("overwrite 100B", 100, 0.79, None),
        ])
        .unwrap();
        assert!(line.contains("2 of 4 cells"), "{line}");
        assert!(
            line.contains("readrandom 64KiB 0.86 (none-again 0.97)"),
            "{line}"
        );
        assert!(line.contains("overwrite 100B 0.79"), "{line}");
        assert!(!line.contains("fillseq"), "{line}");
        let all = target_summary(&[cell("readseq 4KiB", 4096, 0.90, None)]).unwrap();
        assert!(all.ends_with("1 of 1 cells"), "{all}");
    }

    #[test]
    fn paired_ratios_follow_the_repeats() {
        // The host slows down over the run: plain and enc alike, so each
        // pair says 0.9 while the medians' ratio says otherwise.
        let plain = [100.0, 80.0, 60.0, 40.0];
        let enc = [90.0, 72.0, 54.0, 36.0];
        let p = paired(&plain, &enc).unwrap();
        assert!((p.median - 0.9).abs() < 1e-12 && (p.min - 0.9).abs() < 1e-12);
        let odd = paired(&[10.0, 10.0, 10.0], &[5.0, 12.0, 9.0]).unwrap();
        assert_eq!((odd.min, odd.median, odd.max), (0.5, 0.9, 1.2));
        assert_eq!(paired(&[], &[]), None);
        assert_eq!(paired(&[1.0, 2.0], &[1.0]), None);
        assert_eq!(paired(&[0.0], &[1.0]), None);
    }
}
