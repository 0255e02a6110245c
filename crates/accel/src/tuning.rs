//! Every `GVAULT_*` environment setting, in one table ([`SETTINGS`]), and
//! the tuning knobs among them read once per process ([`tuning`]).
//!
//! Two kinds: *user* settings are what a person types instead of a flag
//! (the store directory, key sources); the CLI reads them through its
//! argument parser. *Tuning* settings change how the accelerators and the
//! store run, for measuring one variant against another; nothing needs
//! them in normal use. `docs/tuning.md` and `gvault doctor --settings`
//! show this table; a test keeps the three and the code in step.

use std::path::PathBuf;
use std::sync::OnceLock;

/// Who reads a setting, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SettingKind {
    /// A command-line input given through the environment.
    User,
    /// A knob for measurements and diagnosis, read once into [`Tuning`].
    Tuning,
    /// Read by the test suites or the GPU script only.
    Test,
}

/// One row of the settings table.
#[derive(Debug)]
pub struct Setting {
    pub name: &'static str,
    pub kind: SettingKind,
    /// What it takes, and what applies when it is unset.
    pub values: &'static str,
    pub what: &'static str,
}

macro_rules! settings {
    ($(($name:literal, $kind:ident, $values:literal, $what:literal)),* $(,)?) => {
        /// Every `GVAULT_*` setting gvault reads.
        pub const SETTINGS: &[Setting] = &[
            $(Setting { name: $name, kind: SettingKind::$kind, values: $values, what: $what }),*
        ];
    };
}

settings![
    (
        "GVAULT_STORE",
        User,
        "a directory",
        "the store of the store commands (instead of --store)"
    ),
    (
        "GVAULT_REPO",
        User,
        "a directory",
        "the repository of the repo commands (instead of --repo)"
    ),
    (
        "GVAULT_KEY",
        User,
        "64 hex digits",
        "the master key of an encrypted store or repository"
    ),
    (
        "GVAULT_KEY_FILE",
        User,
        "a path",
        "a file holding the master key (instead of --key-file)"
    ),
    (
        "GVAULT_ACCEL",
        User,
        "cpu, gpu, auto, service or service:SOCKET (auto)",
        "the accelerator of the store and repo commands (instead of --accel); service runs jobs in `gvault serve`"
    ),
    (
        "GVAULT_SERVICE_REQUIRE",
        User,
        "0 or 1 (0)",
        "with --accel service: fail when no daemon answers, instead of running in process"
    ),
    (
        "GVAULT_PASSPHRASE",
        User,
        "text",
        "a passphrase the master key is derived from (Argon2id)"
    ),
    (
        "GVAULT_WAIT",
        User,
        "seconds, 0 or more; unset: 30",
        "how long a command waits for a store another process holds (instead of --wait)"
    ),
    (
        "GVAULT_CPU_THREADS",
        Tuning,
        "a thread count; unset: all cores",
        "threads of the CPU backend (and auto's CPU side)"
    ),
    (
        "GVAULT_COST_MODEL",
        Tuning,
        "a path; unset: the config directory's cost-model.json",
        "the auto backend's cost model file (read, and written by bench calibrate)"
    ),
    (
        "GVAULT_SPLIT_MARGIN",
        Tuning,
        "0 to 0.9; unset: the model's",
        "how much faster a split must be predicted than one side before auto splits a job"
    ),
    (
        "GVAULT_AUTO_LEARN",
        Tuning,
        "0 or 1; unset: 1",
        "0: the auto backend decides from the cost model alone (no correction from completed jobs, no exploring near ties)"
    ),
    (
        "GVAULT_AUTO_POOL_CALLERS",
        Tuning,
        "queue or alone; unset: queue",
        "alone: a job started from a thread of a rayon pool (a parallel loop's body) is priced as if the CPU side had nothing queued, since what is queued there are its siblings, run beside it (an A/B setting)"
    ),
    (
        "GVAULT_KERNEL_CACHE",
        Tuning,
        "a directory; unset: $XDG_CACHE_HOME/gvault/kernels",
        "where compiled kernels are cached"
    ),
    (
        "GVAULT_GPU_SLOTS",
        Tuning,
        "2 to 8; unset: 3",
        "staging buffers per GPU stream (copy in, kernel, copy out overlap)"
    ),
    (
        "GVAULT_GPU_TRACE",
        Tuning,
        "1: device phases, 2: host phases; unset: off",
        "prints where each GPU job's time goes, to stderr"
    ),
    (
        "GVAULT_GPU_TABLES",
        Tuning,
        "wide | narrow; unset: per kernel, the faster measured",
        "the AES and Blowfish kernels' shared-memory table layout"
    ),
    (
        "GVAULT_GCM_GHASH",
        Tuning,
        "wide | narrow; unset: by job shape",
        "forces one GHASH kernel"
    ),
    (
        "GVAULT_GCM_PIECE_MAX",
        Tuning,
        "a power of two, 16 to 4096; unset: 256",
        "the largest GHASH piece, in 16-byte blocks"
    ),
    (
        "GVAULT_B3_CRC",
        Tuning,
        "slice8 | rep2 | rep4; unset: by GPU generation",
        "the CRC-32C table scheme of the fused BLAKE3 + CRC kernel"
    ),
    (
        "GVAULT_GEAR_VARIANT",
        Tuning,
        "staged | direct; unset: by GPU generation",
        "how the FastCDC kernel loads the gear table"
    ),
    (
        "GVAULT_FUSED_DESC",
        Tuning,
        "device | host; unset: device",
        "where the fused chunking job builds its chunk list"
    ),
    (
        "GVAULT_FUSED_GROUP_BYTES",
        Tuning,
        "64 MiB to 16 GiB in bytes; unset: the built-in group size",
        "bytes of input a fused chunking launch group takes"
    ),
    (
        "GVAULT_SERIAL_WIDE_MIB",
        Tuning,
        "0 to 4096; unset: 256",
        "segments from this size (MiB) run the serial hashes' wide page-locked path"
    ),
    (
        "GVAULT_STRIDED_SHARE",
        Tuning,
        "0 to 100; unset: the built-in share",
        "percent of a many-segment page-locked job copied with strided 2D DMA"
    ),
    (
        "GVAULT_SURVEY_PARALLEL_MIN",
        Tuning,
        "a segment count; unset: 32768",
        "from how many segments the CPU surveys a job's memory in parallel"
    ),
    (
        "GVAULT_CAS_WINDOW_MIB",
        Tuning,
        "MiB, 8-1024; unset: 64",
        "how much of a large file a backup reads, chunks and packs at a time (three windows in memory)"
    ),
    (
        "GVAULT_CAS_TRACE",
        Tuning,
        "any value; unset: off",
        "a backup prints the busy seconds of its stages (read, chunk, pack, seal, write) at its end"
    ),
    (
        "GVAULT_READ_AHEAD_STATS",
        Tuning,
        "any value; unset: off",
        "a store's read-ahead workers print their per-value costs at close"
    ),
    (
        "GVAULT_BENCH_SHAPE",
        Tuning,
        "any value; unset: off",
        "bench lsm prints each store's level shape"
    ),
    (
        "GVAULT_REQUIRE_GPU",
        Test,
        "1",
        "GPU tests fail, instead of skipping, when no GPU can be used"
    ),
    (
        "GVAULT_REQUIRE_NVRTC",
        Test,
        "1",
        "the kernel-cache test fails, instead of skipping, without NVRTC"
    ),
    (
        "GVAULT_S3_REQUIRE",
        Test,
        "1",
        "the S3 tests fail, instead of skipping, when scripts/s3-server.sh cannot start a server"
    ),
];

/// The tuning settings, as this process read them at first use.
#[derive(Debug, Default, Clone)]
pub struct Tuning {
    pub cpu_threads: Option<String>,
    pub cost_model: Option<PathBuf>,
    pub split_margin: Option<f64>,
    /// `Some(false)`: the auto backend does not learn from completed jobs.
    pub auto_learn: Option<bool>,
    /// `Some(true)`: jobs from rayon pool threads ignore the CPU queue.
    pub auto_pool_callers_alone: Option<bool>,
    pub kernel_cache: Option<PathBuf>,
    pub gpu_slots: Option<usize>,
    /// 0 off, 1 device phases, 2 host phases.
    pub gpu_trace: u8,
    /// `Some(true)` wide, `Some(false)` narrow.
    pub gpu_tables: Option<bool>,
    pub gcm_ghash_wide: Option<bool>,
    pub gcm_piece_max: Option<u64>,
    /// Raw: the kernel's choice reports an unknown name as a job error.
    pub b3_crc: Option<String>,
    pub gear_variant: Option<String>,
    pub fused_desc: Option<String>,
    pub fused_group_bytes: Option<usize>,
    pub serial_wide_mib: Option<usize>,
    pub strided_share: Option<usize>,
    pub survey_parallel_min: Option<usize>,
    pub cas_window_mib: Option<usize>,
    pub cas_trace: bool,
    pub read_ahead_stats: bool,
    pub bench_shape: bool,
}

/// The process's tuning, read from the environment once.
pub fn tuning() -> &'static Tuning {
    static TUNING: OnceLock<Tuning> = OnceLock::new();
    TUNING.get_or_init(|| Tuning::from_lookup(|name| std::env::var(name).ok()))
}

impl Tuning {
    /// Reads every tuning setting through `get` (the environment, or a
    /// table in tests). A value out of its range is ignored, with one
    /// warning naming it, and the default applies.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Tuning {
        let text = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let number = |name: &str, ok: &dyn Fn(f64) -> bool| -> Option<f64> {
            let raw = text(name)?;
            match raw.trim().parse::<f64>() {
                Ok(v) if ok(v) => Some(v),
                _ => {
                    warn_ignored(name, &raw);
                    None
                }
            }
        };
        let int = |name: &str, lo: u64, hi: u64| {
            number(name, &|v| {
                v.fract() == 0.0 && v >= lo as f64 && v <= hi as f64
            })
            .map(|v| v as u64)
        };
        let either = |name: &str, yes: &str, no: &str| {
            let raw = text(name)?;
            match raw.trim() {
                v if v == yes => Some(true),
                v if v == no => Some(false),
                _ => {
                    warn_ignored(name, &raw);
                    None
                }
            }
        };
        Tuning {
            cpu_threads: text("GVAULT_CPU_THREADS"),
            cost_model: get("GVAULT_COST_MODEL")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            split_margin: number("GVAULT_SPLIT_MARGIN", &|m| (0.0..=0.9).contains(&m)),
            auto_learn: either("GVAULT_AUTO_LEARN", "1", "0"),
            auto_pool_callers_alone: either("GVAULT_AUTO_POOL_CALLERS", "alone", "queue"),
            kernel_cache: get("GVAULT_KERNEL_CACHE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            gpu_slots: int("GVAULT_GPU_SLOTS", 2, 8).map(|v| v as usize),
            gpu_trace: int("GVAULT_GPU_TRACE", 0, 2).unwrap_or(0) as u8,
            gpu_tables: either("GVAULT_GPU_TABLES", "wide", "narrow"),
            gcm_ghash_wide: either("GVAULT_GCM_GHASH", "wide", "narrow"),
            gcm_piece_max: int("GVAULT_GCM_PIECE_MAX", 16, 4096).filter(|v| {
                let ok = v.is_power_of_two();
                if !ok {
                    warn_ignored("GVAULT_GCM_PIECE_MAX", &v.to_string());
                }
                ok
            }),
            b3_crc: text("GVAULT_B3_CRC"),
            gear_variant: text("GVAULT_GEAR_VARIANT"),
            fused_desc: text("GVAULT_FUSED_DESC"),
            fused_group_bytes: int("GVAULT_FUSED_GROUP_BYTES", 64 << 20, 16 << 30)
                .map(|v| v as usize),
            serial_wide_mib: int("GVAULT_SERIAL_WIDE_MIB", 0, 4096).map(|v| v as usize),
            strided_share: int("GVAULT_STRIDED_SHARE", 0, 100).map(|v| v as usize),
            survey_parallel_min: int("GVAULT_SURVEY_PARALLEL_MIN", 0, u32::MAX as u64)
                .map(|v| v as usize),
            cas_window_mib: int("GVAULT_CAS_WINDOW_MIB", 8, 1024).map(|v| v as usize),
            cas_trace: get("GVAULT_CAS_TRACE").is_some(),
            read_ahead_stats: get("GVAULT_READ_AHEAD_STATS").is_some(),
            bench_shape: get("GVAULT_BENCH_SHAPE").is_some(),
        }
    }
}

fn warn_ignored(name: &str, raw: &str) {
    let values = SETTINGS
        .iter()
        .find(|s| s.name == name)
        .map_or("", |s| s.values);
    eprintln!("gvault: warning: {name}={raw:?} ignored (expected {values})");
}

/// The current value of a setting, as the environment has it (for
/// `gvault doctor --settings`).
pub fn current_value(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Tuning {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tuning::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn unset_is_default() {
        let t = with(&[]);
        assert_eq!(t.gpu_slots, None);
        assert_eq!(t.gpu_trace, 0);
        assert_eq!(t.gpu_tables, None);
        assert_eq!(t.auto_learn, None);
        assert!(!t.read_ahead_stats);
    }

    #[test]
    fn values_in_range_are_taken_and_others_ignored() {
        let t = with(&[
            ("GVAULT_GPU_SLOTS", "4"),
            ("GVAULT_GPU_TRACE", "2"),
            ("GVAULT_GPU_TABLES", "narrow"),
            ("GVAULT_GCM_PIECE_MAX", "512"),
            ("GVAULT_SPLIT_MARGIN", "0.25"),
            ("GVAULT_STRIDED_SHARE", "60"),
            ("GVAULT_AUTO_LEARN", "0"),
        ]);
        assert_eq!(t.gpu_slots, Some(4));
        assert_eq!(t.gpu_trace, 2);
        assert_eq!(t.gpu_tables, Some(false));
        assert_eq!(t.gcm_piece_max, Some(512));
        assert_eq!(t.split_margin, Some(0.25));
        assert_eq!(t.strided_share, Some(60));
        assert_eq!(t.auto_learn, Some(false));

        let bad = with(&[
            ("GVAULT_GPU_SLOTS", "9"),
            ("GVAULT_GPU_TABLES", "medium"),
            ("GVAULT_GCM_PIECE_MAX", "300"),
            ("GVAULT_SPLIT_MARGIN", "1.5"),
            ("GVAULT_STRIDED_SHARE", "x"),
            ("GVAULT_AUTO_LEARN", "yes"),
        ]);
        assert_eq!(bad.gpu_slots, None);
        assert_eq!(bad.gpu_tables, None);
        assert_eq!(bad.gcm_piece_max, None);
        assert_eq!(bad.split_margin, None);
        assert_eq!(bad.strided_share, None);
        assert_eq!(bad.auto_learn, None);
    }

    #[test]
    fn names_are_unique() {
        for (i, s) in SETTINGS.iter().enumerate() {
            assert!(s.name.starts_with("GVAULT_"), "{}", s.name);
            assert!(
                SETTINGS[i + 1..].iter().all(|t| t.name != s.name),
                "{} twice",
                s.name
            );
        }
    }
}
