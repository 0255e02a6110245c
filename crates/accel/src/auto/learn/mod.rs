//! Correction of the cost model from completed jobs. Near its cross-overs
//! the model sits within a few percent of a tie, and calibrations of one
//! host differ by more than that from run to run, so a fixed model lands on
//! the wrong side of some of them. Each job that ran alone on a side is
//! compared with what the model predicted for that side, and the
//! decisions that follow scale the model's predictions by what was seen
//! ([`Corrections`]). Learning is per [`AutoBackend`](super::AutoBackend)
//! and in memory only; `GVAULT_AUTO_LEARN=0` turns it off.
//!
//! - Keys ([`JobKey`] with a [`Side`] and a [`Run`]): op, side, host memory
//!   (the GPU's only: the CPU's speed does not depend on page-locking), a
//!   shape class (log4 of the average segment size and of the segment
//!   count), and whether the side ran a whole job or a split part.
//! - Estimate ([`Estimate`]): per key, a mean of log(observed / predicted),
//!   each observation clamped, the first one dropped as warm-up.
//! - Exploration ([`explore`]): near ties, the side with too few
//!   observations is tried now and then.

mod explore;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::decide::{Corrections, Decision, JobStats, Plan, Sides};
use super::model::HostMemory;
use crate::job::OpKind;

use explore::explore_target;
pub(crate) use explore::near_tie;

/// Jobs predicted shorter than this on the side they run are not observed:
/// timer and scheduling noise is a large share of their time, and the
/// bookkeeping a noticeable one (as `CPU_QUEUE_MIN_NS`).
pub(crate) const MIN_OBSERVED_NS: f64 = 50_000.0;

/// Largest correction either way: a model off by more than 4x is broken,
/// not near a cross-over, and no run of stalled jobs may push a side
/// further than this from its model.
const MAX_LN_FACTOR: f64 = std::f64::consts::LN_2 * 2.0;

/// Once a key has this many observations, a new one counts as at most 2x
/// off the estimate: a job stalled by page faults, a preempted thread or
/// a neighbour's burst moves it by at most ln 2 / `SPAN`.
const SETTLED: u32 = 3;
const OUTLIER_LN: f64 = std::f64::consts::LN_2;

/// The estimate is the mean of the observations and of one prior
/// observation of the model itself (factor 1: one job is not proof) until
/// this many, then an exponentially weighted mean of that span: it follows
/// a host whose speed changes (clocks, other tenants) within a few dozen
/// jobs, and one settled observation moves it by at most ln 2 / 8 (9%).
const SPAN: u32 = 8;

/// The side a job (or part) ran on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Cpu,
    Gpu,
}

/// Whether a side ran a whole job or one part of a split (apart: the two
/// parts of a split run at once and slow each other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Run {
    Whole,
    Part,
}

/// Classes of the average segment size: 4x apart from 1 KiB (class 0 is
/// under 1 KiB; the last, 64 MiB and up).
const SEGMENT_CLASSES: usize = 10;
const SEGMENT_CLASS_BASE: u64 = 256;
/// Classes of the segment count: 4x apart (1-3, 4-15, ... 16384 and up).
const COUNT_CLASSES: usize = 8;

/// The shape class of a job. The model's error moves with the segment size
/// (per-byte rates, cache and DMA thresholds: 256 KiB, `DIRECT_MIN`, is a
/// class boundary) and with the segment count (threads busy, fixed costs
/// shared, pipelining); two cross-overs missed on the H100 host, 64 KiB x
/// 4096 and 16 MiB x 16 pageable, are one total apart in both. Classes 4x
/// wide put a workload's repeated shapes (a store's chunk and batch sizes)
/// in one or two keys, which learn from few jobs, while the model's error
/// changes little inside one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ShapeClass {
    segment: u8,
    count: u8,
}

/// floor(log4(x)) for x >= 1.
fn log4(x: u64) -> u32 {
    x.max(1).ilog2() / 2
}

/// RSA's segment classes are its key sizes: one message is the modulus
/// long (1024, 2048, 4096 bits: 128, 256, 512 bytes, classes 0, 1, 2), and
/// the model prices each size by its own exponent, so one size's error
/// says nothing of another's. In 4x classes from 1 KiB all three were
/// class 0, and RSA-1024's corrections moved RSA-4096's predictions.
const RSA_CLASS_BASE: u64 = 128;

impl ShapeClass {
    pub(crate) fn of(op: OpKind, stats: &JobStats) -> ShapeClass {
        let segments = stats.segments.max(1) as u64;
        let average = stats.bytes / segments;
        let segment = if op == OpKind::RsaPrivate {
            (average / RSA_CLASS_BASE).max(1).ilog2()
        } else {
            log4(average / SEGMENT_CLASS_BASE)
        };
        ShapeClass {
            segment: (segment as usize).min(SEGMENT_CLASSES - 1) as u8,
            count: (log4(segments) as usize).min(COUNT_CLASSES - 1) as u8,
        }
    }

    /// Smallest average segment size of the class (of `op`'s classes).
    fn segment_bytes_from(self, op: OpKind) -> u64 {
        match (op, self.segment) {
            (OpKind::RsaPrivate, k) => RSA_CLASS_BASE << k,
            (_, 0) => 0,
            (_, k) => SEGMENT_CLASS_BASE << (2 * k),
        }
    }

    /// Smallest segment count of the class.
    fn segments_from(self) -> usize {
        1 << (2 * self.count)
    }
}

/// Where a job's observations go, less the side and the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JobKey {
    op: OpKind,
    mem: HostMemory,
    class: ShapeClass,
}

const MEMORIES: [HostMemory; 2] = [HostMemory::Pinned, HostMemory::Pageable];

impl JobKey {
    /// `None` for device-resident data (only the GPU can read it: there is
    /// no choice to correct) and for empty jobs.
    pub(crate) fn of(op: OpKind, stats: &JobStats) -> Option<JobKey> {
        (stats.mem != HostMemory::Device && stats.segments > 0).then(|| JobKey {
            op,
            mem: stats.mem,
            class: ShapeClass::of(op, stats),
        })
    }

    /// Index of this key's cell for `side` and `run` in the table.
    fn cell(self, side: Side, run: Run) -> usize {
        let op = OpKind::ALL.iter().position(|o| *o == self.op).unwrap_or(0);
        // The CPU's cells are shared by both kinds of host memory.
        let mem = match side {
            Side::Cpu => 0,
            Side::Gpu => MEMORIES.iter().position(|m| *m == self.mem).unwrap_or(0),
        };
        let mut i = op;
        i = i * MEMORIES.len() + mem;
        i = i * 2 + usize::from(side == Side::Gpu);
        i = i * 2 + usize::from(run == Run::Part);
        i = i * SEGMENT_CLASSES + usize::from(self.class.segment);
        i * COUNT_CLASSES + usize::from(self.class.count)
    }
}

const CELLS: usize = OpKind::ALL.len() * MEMORIES.len() * 2 * 2 * SEGMENT_CLASSES * COUNT_CLASSES;

/// One key's estimate: the mean log of observed ÷ predicted time, and how
/// many times the key was seen (the first is warm-up: kernels built,
/// pools and staging buffers allocated, pages first touched). Packed in
/// one word so that a decision reads it with one atomic load.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Estimate {
    ln_factor: f32,
    seen: u32,
}

impl Estimate {
    fn from_bits(bits: u64) -> Estimate {
        Estimate {
            ln_factor: f32::from_bits((bits >> 32) as u32),
            seen: bits as u32,
        }
    }

    fn to_bits(self) -> u64 {
        (u64::from(self.ln_factor.to_bits()) << 32) | u64::from(self.seen)
    }

    /// Observations that count (all but the warm-up).
    pub(crate) fn observations(self) -> u32 {
        self.seen.saturating_sub(1)
    }

    /// What to multiply the model's prediction by: 1 until observed.
    pub(crate) fn factor(self) -> f64 {
        if self.observations() == 0 {
            1.0
        } else {
            f64::from(self.ln_factor).exp()
        }
    }

    /// The estimate after one more job that took `ratio` times its
    /// prediction.
    pub(crate) fn updated(self, ratio: f64) -> Estimate {
        let seen = self.seen.saturating_add(1);
        if self.seen == 0 || !(ratio.is_finite() && ratio > 0.0) {
            return Estimate { seen, ..self };
        }
        let n = seen - 1;
        let now = f64::from(self.ln_factor);
        let mut x = ratio.ln().clamp(-MAX_LN_FACTOR, MAX_LN_FACTOR);
        if n > SETTLED {
            x = x.clamp(now - OUTLIER_LN, now + OUTLIER_LN);
        }
        let weight = 1.0 / f64::from((n + 1).min(SPAN));
        Estimate {
            ln_factor: (now + weight * (x - now)) as f32,
            seen,
        }
    }
}

/// Observations of the two sides' whole jobs in one key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    pub cpu: u32,
    pub gpu: u32,
}

/// A learned factor, as [`AutoBackend::learned`](super::AutoBackend::learned)
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LearnedFactor {
    pub op: OpKind,
    /// "cpu" or "gpu".
    pub side: &'static str,
    /// The GPU's host memory ("pinned", "pageable"); "host" for the CPU.
    pub memory: &'static str,
    /// Whether it is the side's factor for parts of split jobs.
    pub split_part: bool,
    /// The shape class: average segment size and segment count from these
    /// (each class 4x wide).
    pub segment_bytes_from: u64,
    pub segments_from: usize,
    /// Observed ÷ predicted time.
    pub factor: f64,
    pub observations: u32,
}

/// What an auto backend has learned, and its exploration turns.
pub(crate) struct Learner {
    on: bool,
    /// One [`Estimate`] per cell, allocated by the first observation.
    cells: OnceLock<Box<[AtomicU64]>>,
    /// Near-tie jobs that could have been explored (see [`explore`]).
    candidates: AtomicU64,
    explored: AtomicU64,
}

impl Learner {
    pub(crate) fn new(on: bool) -> Learner {
        Learner {
            on,
            cells: OnceLock::new(),
            candidates: AtomicU64::new(0),
            explored: AtomicU64::new(0),
        }
    }

    /// On unless `GVAULT_AUTO_LEARN=0`.
    pub(crate) fn from_env() -> Learner {
        Learner::new(crate::tuning::tuning().auto_learn != Some(false))
    }

    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    pub(crate) fn estimate(&self, key: JobKey, side: Side, run: Run) -> Estimate {
        self.cells.get().map_or(Estimate::default(), |cells| {
            Estimate::from_bits(cells[key.cell(side, run)].load(Ordering::Relaxed))
        })
    }

    /// The factors for a job of `key` (`None`: nothing applies); a split
    /// part not yet observed takes its side's whole-job factor.
    pub(crate) fn corrections(&self, key: Option<JobKey>) -> Corrections {
        let Some(key) = key.filter(|_| self.on && self.cells.get().is_some()) else {
            return Corrections::NONE;
        };
        let factor = |side, run| self.estimate(key, side, run).factor();
        let part = |side| {
            let e = self.estimate(key, side, Run::Part);
            if e.observations() > 0 {
                e.factor()
            } else {
                factor(side, Run::Whole)
            }
        };
        Corrections {
            cpu: factor(Side::Cpu, Run::Whole),
            gpu: factor(Side::Gpu, Run::Whole),
            cpu_part: part(Side::Cpu),
            gpu_part: part(Side::Gpu),
        }
    }

    /// Observations of whole jobs on each side in `key`.
    pub(crate) fn observed(&self, key: JobKey) -> Observed {
        Observed {
            cpu: self.estimate(key, Side::Cpu, Run::Whole).observations(),
            gpu: self.estimate(key, Side::Gpu, Run::Whole).observations(),
        }
    }

    /// Records that a job (or part) of `key` predicted at `predicted_ns`
    /// by the model (uncorrected) ran in `observed_ns` on `side`.
    pub(crate) fn observe(
        &self,
        key: JobKey,
        side: Side,
        run: Run,
        predicted_ns: f64,
        observed_ns: f64,
    ) {
        if !self.on || predicted_ns.is_nan() || predicted_ns <= 0.0 {
            return;
        }
        let cells = self
            .cells
            .get_or_init(|| (0..CELLS).map(|_| AtomicU64::new(0)).collect());
        let ratio = observed_ns / predicted_ns;
        let _ =
            cells[key.cell(side, run)].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some(Estimate::from_bits(b).updated(ratio).to_bits())
            });
    }

    /// The side to run a job of `key` decided `d` on instead, if it is a
    /// near tie worth exploring ([`explore_target`]) and its turn: every
    /// `EXPLORE_EVERY`th such job.
    pub(crate) fn explore(&self, d: &Decision, sides: &Sides, key: JobKey) -> Option<Plan> {
        if !self.on {
            return None;
        }
        let target = explore_target(d, sides, key.mem, self.observed(key))?;
        let n = self.candidates.fetch_add(1, Ordering::Relaxed);
        if !explore::is_turn(n) {
            return None;
        }
        self.explored.fetch_add(1, Ordering::Relaxed);
        Some(target)
    }

    /// Jobs run on the side the model did not choose.
    pub(crate) fn explored(&self) -> u64 {
        self.explored.load(Ordering::Relaxed)
    }

    /// Every key observed at least once beyond its warm-up.
    pub(crate) fn learned(&self) -> Vec<LearnedFactor> {
        let mut out = Vec::new();
        if self.cells.get().is_none() {
            return out;
        }
        for op in OpKind::ALL {
            for mem in MEMORIES {
                for segment in 0..SEGMENT_CLASSES as u8 {
                    for count in 0..COUNT_CLASSES as u8 {
                        let class = ShapeClass { segment, count };
                        let key = JobKey { op, mem, class };
                        for side in [Side::Cpu, Side::Gpu] {
                            // The CPU's cells are the first memory's.
                            if side == Side::Cpu && mem != MEMORIES[0] {
                                continue;
                            }
                            for run in [Run::Whole, Run::Part] {
                                let e = self.estimate(key, side, run);
                                if e.observations() == 0 {
                                    continue;
                                }
                                out.push(LearnedFactor {
                                    op,
                                    side: match side {
                                        Side::Cpu => "cpu",
                                        Side::Gpu => "gpu",
                                    },
                                    memory: match side {
                                        Side::Cpu => "host",
                                        Side::Gpu => mem.name(),
                                    },
                                    split_part: run == Run::Part,
                                    segment_bytes_from: class.segment_bytes_from(op),
                                    segments_from: class.segments_from(),
                                    factor: e.factor(),
                                    observations: e.observations(),
                                });
                            }
                        }
                    }
                }
            }
        }
        out
    }
}
