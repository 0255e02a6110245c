//! Exploring near ties. Learning from completed jobs corrects only the
//! side that runs: a model that prices the faster side a little slower
//! than the other never runs it, and never learns. So where the two sides'
//! corrected predictions are within [`TIE_BAND`] of each other and the
//! side not chosen has fewer than [`MIN_OBSERVATIONS`] observations in the
//! job's key, every [`EXPLORE_EVERY`]th such job runs on that side.
//!
//! Worst-case cost: an explored job runs on a side predicted (corrected)
//! at most 20% slower than the model's choice, on at most 1 in 16 near-tie
//! jobs: 1.25% of their time where the predictions hold. Where they do not
//! and the explored side is really k times slower than the chosen one,
//! each explored job costs k - 1 of its time, 1 in 16 near-tie jobs, until
//! the key has 4 runs of that side that ran alone (a warm-up and
//! `MIN_OBSERVATIONS`); usually sooner, as the first counted run moves the
//! side's factor out of the band. No job whose predicted gap exceeds the
//! band, no device-resident job, no split job and no job while the GPU is
//! absent or has refused the op is ever explored.

use super::super::decide::{Decision, Plan, Sides};
use super::super::model::HostMemory;
use super::{Observed, MIN_OBSERVED_NS};

/// Corrected predictions of the two sides within this fraction of each
/// other are a near tie: the calibrated model has been seen off by this
/// much around its cross-overs (H100 host: misses at 0.62-0.67 of the
/// better backend moved between two calibrations).
pub(crate) const TIE_BAND: f64 = 0.2;

/// Observations of a side, in a key, below which it is worth exploring.
pub(crate) const MIN_OBSERVATIONS: u32 = 3;

/// At most one near-tie job in this many is explored.
pub(crate) const EXPLORE_EVERY: u64 = 16;

/// Whether the `n`th near-tie job (from 0) is explored: the last of every
/// `EXPLORE_EVERY`, so a process of a few such jobs never pays (nor opens
/// a GPU the model did not send work to).
pub(crate) fn is_turn(n: u64) -> bool {
    n % EXPLORE_EVERY == EXPLORE_EVERY - 1
}

/// Whether the two single backends' predicted finishes in `d` are within
/// [`TIE_BAND`] of each other.
pub(crate) fn near_tie(d: &Decision) -> bool {
    let Some(gpu) = d.gpu_finish_ns else {
        return false;
    };
    let (lo, hi) = (gpu.min(d.cpu_finish_ns), gpu.max(d.cpu_finish_ns));
    lo > 0.0 && hi <= lo * (1.0 + TIE_BAND)
}

/// The side that a job decided `d` may be explored on, where it is a
/// near tie and that side has too few observations (`observed`, in the
/// job's key). The side must be idle and the job long enough there for
/// its run to be observed. Whether this job takes its turn is
/// [`Learner::explore`](super::Learner::explore)'s to say.
pub(crate) fn explore_target(
    d: &Decision,
    sides: &Sides,
    mem: HostMemory,
    observed: Observed,
) -> Option<Plan> {
    if !sides.gpu || mem == HostMemory::Device || !near_tie(d) {
        return None;
    }
    let (target, observations, queued_ns, finish_ns) = match d.plan {
        Plan::Cpu => (
            Plan::Gpu,
            observed.gpu,
            sides.gpu_queued_ns,
            d.gpu_finish_ns?,
        ),
        Plan::Gpu => (
            Plan::Cpu,
            observed.cpu,
            sides.cpu_queued_ns,
            d.cpu_finish_ns,
        ),
        Plan::Split(_) => return None,
    };
    (observations < MIN_OBSERVATIONS && queued_ns == 0.0 && finish_ns >= MIN_OBSERVED_NS)
        .then_some(target)
}
