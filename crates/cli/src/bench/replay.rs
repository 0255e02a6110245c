//! `gvault bench replay`: the auto backend's decisions for every cell of a
//! recorded `bench primitive --json` sweep, under a recorded cost model,
//! set against what each backend measured there
//! (`gvault_accel::auto::replay`). Device time is scarce: this shows what a
//! model change does to the choices before a GPU run.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The cost model the sweep ran with (`cost-model.json`).
    #[arg(long, value_name = "FILE")]
    model: PathBuf,
    /// The sweep: `gvault bench primitive --json` (or `--save`) output.
    #[arg(long, value_name = "FILE")]
    sweep: PathBuf,
    /// The calibration log of the run that wrote the model: replay also
    /// with each op's CPU speed-up taken over the one-thread line, as
    /// `bench calibrate` now computes it.
    #[arg(long, value_name = "CALIBRATE_TXT")]
    speedup_from_line: Option<PathBuf>,
}

pub fn run(args: ReplayArgs) -> Result<(), String> {
    let report = gvault_accel::auto::replay::report(
        &args.model,
        &args.sweep,
        args.speedup_from_line.as_deref(),
    )?;
    print!("{report}");
    Ok(())
}
