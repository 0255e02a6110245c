//! `gvault bench calibrate`: fits the auto backend's cost model on this
//! machine (`gvault_accel::auto::calibrate`), timed by the benchmarks'
//! harness, and stores it where `auto` loads it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gvault_accel::auto::{self, calibrate::Bench, CostModel};
use gvault_accel::GpuBackend;
use gvault_accel::{Backend, OpKind};

use super::measure::repeat;
use super::primitive::{measure_device_resident, measure_dyn, Keys};

#[derive(clap::Args, Debug)]
pub struct CalibrateArgs {
    /// Fewer, smaller measurements (seconds; for tests and a first look).
    #[arg(long)]
    quick: bool,
    /// Write the model here instead of the config directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Calibration's timings, by `bench primitive`'s harness; progress on
/// standard output.
struct Harness {
    keys: Keys,
}

impl Bench for Harness {
    fn time(
        &self,
        backend: &dyn Backend,
        op: OpKind,
        segments: &mut [&mut [u8]],
        min_time: Duration,
    ) -> Result<Duration, String> {
        measure_dyn(backend, op, &self.keys, segments, min_time)
    }

    fn time_resident(
        &self,
        gpu: &GpuBackend,
        op: OpKind,
        size: usize,
        n: usize,
        min_time: Duration,
    ) -> Result<Duration, String> {
        measure_device_resident(gpu, 0, op, &self.keys, size, n, min_time, None)
    }

    fn repeat(
        &self,
        min_runs: usize,
        min_time: Duration,
        f: &mut dyn FnMut() -> Duration,
    ) -> Duration {
        repeat(min_runs, min_time, f).median
    }

    fn say(&self, line: &str) {
        println!("{line}");
    }
}

pub fn run(args: CalibrateArgs) -> Result<(), String> {
    let started = Instant::now();
    let path = match args.out.clone() {
        Some(p) => p,
        None => auto::default_path()
            .ok_or("no config directory: set HOME or XDG_CONFIG_HOME, or pass --out")?,
    };
    let gpu = match GpuBackend::probe() {
        Ok(g) => Some(g),
        Err(why) => {
            println!("gpu: unavailable ({why}); calibrating the CPU only");
            None
        }
    };
    let harness = Harness { keys: Keys::new() };
    let model = auto::calibrate::calibrate(gpu.as_ref(), args.quick, &harness)?;
    auto::write(&path, &model)?;
    // Every op's CPU line was measured on all cores.
    let threads = model.op(OpKind::Sha256).map_or(1, |m| m.cpu.threads);
    print_model(&model, threads);
    println!(
        "\nwrote {} in {:.1} s",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The model as a table: CPU and GPU rates and the cross-overs per op, for
/// host data in pinned and in pageable memory.
pub fn print_model(model: &CostModel, cpu_threads: usize) {
    print!("{}", auto::calibrate::model_table(model, cpu_threads));
}

#[cfg(test)]
mod tests {
    use super::*;
    use gvault_accel::auto::machine_identity;

    #[test]
    fn quick_calibration_writes_a_model_that_loads_back() {
        let dir = std::env::temp_dir().join(format!("gvault-calibrate-{}", std::process::id()));
        let path = dir.join("model.json");
        run(CalibrateArgs {
            quick: true,
            out: Some(path.clone()),
        })
        .expect("calibration runs");
        let identity = machine_identity(GpuBackend::probe().ok().as_ref());
        let (model, source) = auto::load(Some(&path), &identity);
        assert_eq!(source, auto::ModelSource::File(path.clone()));
        let written: CostModel =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("the model file reads"))
                .expect("the written model parses");
        for op in OpKind::ALL {
            let m = written.op(op).expect("every op calibrated");
            assert!(m.cpu.one_thread.predict_ns(1 << 20, 1) > 0.0, "{op}");
            assert_eq!(model.op(op), Some(m), "{op}: loaded as written");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
