//! The calibrated model on disk: `$XDG_CONFIG_HOME/gvault/cost-model.json`
//! (or `~/.config/...`; `GVAULT_COST_MODEL` names another file). A missing,
//! stale or corrupt file means shipped defaults and one warning per process.

use std::path::{Path, PathBuf};
use std::sync::Once;

use super::defaults::shipped;
use super::model::{CostModel, Identity, FORMAT_VERSION};

/// Where the model in use came from, for `gvault doctor`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelSource {
    File(PathBuf),
    /// Shipped defaults, and why the file was not used.
    Defaults {
        reason: String,
    },
}

impl std::fmt::Display for ModelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelSource::File(p) => write!(f, "calibrated, {}", p.display()),
            ModelSource::Defaults { reason } => write!(f, "shipped defaults ({reason})"),
        }
    }
}

/// The default model file, or `None` when neither the environment nor a
/// home directory names one.
pub fn default_path() -> Option<PathBuf> {
    if let Some(p) = &crate::tuning::tuning().cost_model {
        return Some(p.clone());
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let base = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("gvault").join("cost-model.json"))
}

/// Reads and checks a model file against the machine it will run on.
pub(crate) fn read(path: &Path, current: &Identity) -> Result<CostModel, String> {
    read_checking(path, current, true)
}

/// As [`read`]; the GPU and driver are checked only when `check_gpu`.
fn read_checking(path: &Path, current: &Identity, check_gpu: bool) -> Result<CostModel, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    decode(&text, current, check_gpu)
}

/// A model file's text, decoded and checked as [`read_checking`] checks it
/// (also the `fuzzing` entry point's decoder).
pub(crate) fn decode(text: &str, current: &Identity, check_gpu: bool) -> Result<CostModel, String> {
    /// The one field every format version has.
    #[derive(serde::Deserialize)]
    struct Version {
        format_version: u32,
    }
    // The version first: a file of another version is not corrupt, only
    // not ours to read (its fields may differ).
    let v: Version = serde_json::from_str(text).map_err(|e| format!("corrupt: {e}"))?;
    if v.format_version != FORMAT_VERSION {
        return Err(format!(
            "of format version {} (this gvault reads {FORMAT_VERSION})",
            v.format_version
        ));
    }
    let model: CostModel = serde_json::from_str(text).map_err(|e| format!("corrupt: {e}"))?;
    model.validate().map_err(|e| format!("corrupt: {e}"))?;
    let stale = if check_gpu {
        model.identity.mismatch(current)
    } else {
        model.identity.host_mismatch(current)
    };
    if let Some(why) = stale {
        return Err(format!("stale: {why}"));
    }
    Ok(model)
}

/// Writes `model` to `path` (creating its directory) through a temporary
/// file and a rename, so a crash never leaves half a model behind.
pub fn write(path: &Path, model: &CostModel) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let text = encode(model)?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("renaming to {}: {e}", path.display()))
}

/// A model file's text, as [`write`] writes it.
pub(crate) fn encode(model: &CostModel) -> Result<String, String> {
    serde_json::to_string_pretty(model).map_err(|e| e.to_string())
}

/// The model for `current`: the file at `path` if it is usable, else the
/// shipped defaults and the reason. Ops the file lacks come from defaults.
pub fn load(path: Option<&Path>, current: &Identity) -> (CostModel, ModelSource) {
    load_checking(path, current, true)
}

/// The model to decide with before the GPU is opened, on a machine whose
/// CUDA libraries are present: `host` names no GPU yet, so the file's GPU
/// is taken on trust (checked by [`load`] once the GPU is open), and the
/// shipped defaults include their GPU figures.
pub(crate) fn load_before_gpu(path: Option<&Path>, host: &Identity) -> (CostModel, ModelSource) {
    let provisional = Identity {
        gpu_name: Some(UNOPENED_GPU.into()),
        ..host.clone()
    };
    load_checking(path, &provisional, false)
}

/// The GPU name of a model chosen before the GPU was opened.
pub(crate) const UNOPENED_GPU: &str = "(not opened yet)";

fn load_checking(
    path: Option<&Path>,
    current: &Identity,
    check_gpu: bool,
) -> (CostModel, ModelSource) {
    let defaults = shipped(current.clone());
    let Some(path) = path else {
        return (
            defaults,
            ModelSource::Defaults {
                reason: "no config directory (set HOME or XDG_CONFIG_HOME)".into(),
            },
        );
    };
    if !path.exists() {
        let reason = format!(
            "no calibration at {}; run `gvault bench calibrate`",
            path.display()
        );
        return (defaults, ModelSource::Defaults { reason });
    }
    match read_checking(path, current, check_gpu) {
        Ok(mut m) => {
            m.fill_from(&defaults);
            (m, ModelSource::File(path.to_path_buf()))
        }
        Err(why) => {
            let reason = format!("{} {why}; run `gvault bench calibrate`", path.display());
            (defaults, ModelSource::Defaults { reason })
        }
    }
}

/// Prints one warning line per process about a model not loaded from file.
/// A missing file on a machine without a GPU is not worth a warning: every
/// job runs on the CPU whatever the model says.
pub(crate) fn warn_once(source: &ModelSource, has_gpu: bool) {
    static WARNED: Once = Once::new();
    if let ModelSource::Defaults { reason } = source {
        let missing = reason.starts_with("no calibration");
        if has_gpu || !missing {
            WARNED.call_once(|| eprintln!("gvault: warning: cost model: using {source}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(gpu: Option<&str>) -> Identity {
        Identity {
            gvault_version: "1.2.3".into(),
            cpu_cores: 8,
            gpu_name: gpu.map(String::from),
            driver_version: gpu.map(|_| 13000),
        }
    }

    #[test]
    fn round_trip_then_stale_then_corrupt() {
        let dir = std::env::temp_dir().join(format!("gvault-auto-file-{}", std::process::id()));
        let path = dir.join("cost-model.json");
        let mut model = shipped(ident(Some("H200")));
        model.ops.get_mut("sha256").expect("op").cpu.speedup = 3.25;
        write(&path, &model).expect("written");

        let (loaded, src) = load(Some(&path), &ident(Some("H200")));
        assert_eq!(src, ModelSource::File(path.clone()));
        assert_eq!(loaded, model);

        let (loaded, src) = load(Some(&path), &ident(Some("H100")));
        assert!(matches!(&src, ModelSource::Defaults { reason } if reason.contains("stale")));
        assert_eq!(loaded, shipped(ident(Some("H100"))));

        std::fs::write(&path, b"{ not json").expect("write");
        let (_, src) = load(Some(&path), &ident(Some("H200")));
        assert!(matches!(&src, ModelSource::Defaults { reason } if reason.contains("corrupt")));

        let mut bad = model.clone();
        bad.format_version += 1;
        write(&path, &bad).expect("written");
        let (_, src) = load(Some(&path), &ident(Some("H200")));
        assert!(matches!(&src, ModelSource::Defaults { reason } if reason.contains("version")));

        let mut negative = model.clone();
        negative
            .ops
            .get_mut("md5")
            .expect("op")
            .cpu
            .one_thread
            .ns_per_byte = -1.0;
        write(&path, &negative).expect("written");
        let (_, src) = load(Some(&path), &ident(Some("H200")));
        assert!(matches!(&src, ModelSource::Defaults { reason } if reason.contains("corrupt")));

        std::fs::remove_dir_all(&dir).expect("cleanup");
        let (_, src) = load(Some(&path), &ident(None));
        assert!(
            matches!(&src, ModelSource::Defaults { reason } if reason.starts_with("no calibration"))
        );
    }

    #[test]
    fn a_format_1_file_falls_back_to_defaults_naming_its_version() {
        let dir = std::env::temp_dir().join(format!("gvault-auto-v1-{}", std::process::id()));
        let path = dir.join("cost-model.json");
        std::fs::create_dir_all(&dir).expect("dir");
        // The shape version 1 wrote: one `host` figure per GPU op.
        let v1 = r#"{"format_version": 1, "identity": {"gvault_version": "1.2.3",
            "cpu_cores": 8, "gpu_name": "H200", "driver_version": 13000}, "link": null,
            "ops": {"sha256": {"cpu": {"one_thread": {"fixed_ns": 1.0, "ns_per_byte": 1.0,
            "ns_per_segment": 1.0}, "threads": 8, "speedup": 7.0}, "gpu": {"kernel":
            {"fixed_ns": 1.0, "ns_per_byte": 0.1, "ns_per_segment": 1.0}, "host": null}}}}"#;
        std::fs::write(&path, v1).expect("write");
        let (model, src) = load(Some(&path), &ident(Some("H200")));
        assert!(
            matches!(&src, ModelSource::Defaults { reason } if reason.contains("format version 1")),
            "{src}"
        );
        assert_eq!(model, shipped(ident(Some("H200"))));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn before_the_gpu_opens_only_the_host_is_checked() {
        let dir = std::env::temp_dir().join(format!("gvault-auto-pre-{}", std::process::id()));
        let path = dir.join("cost-model.json");
        let model = shipped(ident(Some("H200")));
        write(&path, &model).expect("written");
        // The host matches; the GPU is not known yet: the file is used.
        let (loaded, src) = load_before_gpu(Some(&path), &ident(None));
        assert_eq!(src, ModelSource::File(path.clone()));
        assert_eq!(loaded, model);
        // Other core count: stale even before the GPU opens.
        let other = Identity {
            cpu_cores: 16,
            ..ident(None)
        };
        let (_, src) = load_before_gpu(Some(&path), &other);
        assert!(matches!(&src, ModelSource::Defaults { reason } if reason.contains("stale")));
        // No file: defaults that still price a GPU (it may exist).
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let (loaded, _) = load_before_gpu(Some(&path), &ident(None));
        assert!(loaded.ops.values().all(|o| o.gpu.is_some()));
    }
}
