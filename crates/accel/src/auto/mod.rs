//! The `auto` backend: a calibrated choice between CPU and GPU per job, and
//! splitting of large jobs so both finish together (seed 000's hybrid).
//!
//! - `model`: the cost model (fixed + per byte + per segment, CPU per
//!   thread, GPU kernel and host link apart) and its least-squares fit.
//! - `defaults`: shipped figures, used until `gvault bench calibrate` runs.
//! - `file`: the versioned model file in the user's config directory.
//! - `decide`: the choice itself, pure functions of model, job and queues.
//! - `inspect`: a job's totals, lengths and host-memory kind.
//! - `split`: cutting a job in two and merging the results.
//! - `backend`: [`AutoBackend`], with queue accounting.
//! - `learn`: corrections of the model from completed jobs, and exploring
//!   near ties (`GVAULT_AUTO_LEARN`).
//! - `calibrate`: timing this machine and fitting its model.
//! - `replay`: a recorded sweep's decisions under a model, offline.
//! - `forced_split`: the auto backend with its split forced, for sweeps.
//!
//! The public API. [`AutoBackend`] is what callers use; the rest is what
//! building, inspecting and calibrating one needs:
//! - `CpuThreads`: how many cores its CPU side may use (`GVAULT_CPU_THREADS`,
//!   `bench primitive --auto-threads`).
//! - `GpuStarter`: the argument of `AutoBackend::from_starter` (a stand-in
//!   GPU for tests and benchmarks).
//! - `LearnedFactor`: what `AutoBackend::learned` reports.
//! - `Decision`, `Plan`, `SplitPoint`: what `AutoBackend::decide` returns and
//!   `run_plan` takes (the forced-split sweep, tests).
//! - `CostModel` and its parts (`OpModel`, `CpuCost`, `GpuCost`,
//!   `LinearCost`, `LinkCost`, `Identity`, `FORMAT_VERSION`): the model's
//!   fields are the model file's, and tests build synthetic models from them.
//! - `shipped`: the model used until calibration, a base for such models.
//! - `ModelSource`, `load`, `default_path`, `write`, `machine_identity`: the
//!   model file, as `gvault doctor` reports it and `bench calibrate` writes it.
//! - modules `calibrate`, `replay`, `forced_split`: `gvault bench calibrate`,
//!   `bench replay` and `bench primitive --split-sweep`.

mod backend;
pub mod calibrate;
pub(crate) mod decide;
mod defaults;
pub(crate) mod file;
pub mod forced_split;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod h100;
mod inspect;
mod learn;
pub(crate) mod model;
#[cfg(test)]
mod overhead;
pub mod replay;
mod split;
#[cfg(test)]
mod test_models;

pub use backend::{machine_identity, AutoBackend, CpuThreads, GpuStarter, Placements};
pub use decide::{Decision, Plan, SplitPoint};
pub use defaults::shipped;
pub use file::{default_path, load, write, ModelSource};
pub use learn::LearnedFactor;
pub use model::{
    CostModel, CpuCost, GpuCost, Identity, LinearCost, LinkCost, OpModel, FORMAT_VERSION,
};
