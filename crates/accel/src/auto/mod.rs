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
//! - `calibrate`: timing this machine and fitting its model.
//! - `replay`: a recorded sweep's decisions under a model, offline.
//! - `forced_split`: the auto backend with its split forced, for sweeps.

mod backend;
pub mod calibrate;
mod decide;
mod defaults;
mod file;
pub mod forced_split;
#[cfg(test)]
mod golden;
#[cfg(test)]
mod h100;
mod inspect;
mod model;
#[cfg(test)]
mod overhead;
pub mod replay;
mod split;

pub use backend::{machine_identity, AutoBackend, CpuThreads, GpuStarter};
pub use decide::{
    crossover, cuttable, decide, Crossover, Decision, JobShape, JobStats, Plan, Sides, SplitPoint,
    CALIBRATED_JOB_BYTES, CUT_ALIGN, MIN_SPLIT_BYTES,
};
pub use defaults::shipped;
pub use file::{
    default_path, load, load_before_gpu, read, warn_once, write, ModelSource, UNOPENED_GPU,
};
pub use model::{
    fit_linear, fit_ramp, fit_stages, gpu_line_kind, gpu_line_ns, gpu_serial, gpu_stage_ns,
    CostModel, CpuCost, GpuCost, GpuLine, HostMemory, Identity, LinearCost, LinkCost, OpModel,
    StageSample, DIRECT_MIN, FORMAT_VERSION, SMALL_SPEEDUP_UNITS_PER_THREAD,
    SPEEDUP_UNITS_PER_THREAD,
};
