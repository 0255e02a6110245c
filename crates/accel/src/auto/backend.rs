//! [`AutoBackend`]: the backend callers use by default. Per job it predicts
//! the finish time on the CPU and on the GPU (work already queued on each
//! included) and runs the job on the sooner one, or splits it so that both
//! finish together. Nothing is opened up front: the model loads on the
//! first job and the GPU on the first job the model sends to it, so a
//! machine without a GPU (or a process of small jobs) pays only a check of
//! whether CUDA's libraries exist, once.

use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::decide::{
    decide_corrected, sketch_corrected, split_part_times, Corrections, Decision, GpuPart, JobStats,
    OpCosts, Plan, Sides, Sketch, SplitPoint, SPLIT_OVERHEAD_NS,
};
use super::file::{self, ModelSource};
use super::inspect;
use super::learn::{near_tie, JobKey, LearnedFactor, Learner, Run, Side, MIN_OBSERVED_NS};
use super::model::{CostModel, HostMemory, Identity};
use super::split::{merge, split};
use crate::backend::Backend;
use crate::cpu::{CpuBackend, Survey};
use crate::error::BackendError;
use crate::gpu::GpuBackend;
use crate::job::{Job, OpKind, SegmentResult};

/// How many cores the CPU side may use; the rest are left to the
/// application (seed 001 §4.3: offloading frees cores for it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CpuThreads {
    All,
    Count(usize),
    /// A share of the logical cores, in (0, 1].
    Fraction(f64),
}

impl CpuThreads {
    /// Threads for a machine with `cores` logical cores (at least one: the
    /// CPU runs what the GPU cannot).
    pub fn resolve(self, cores: usize) -> usize {
        match self {
            CpuThreads::All => cores.max(1),
            CpuThreads::Count(n) => n.max(1),
            CpuThreads::Fraction(f) => ((cores as f64 * f).round() as usize).max(1),
        }
    }

    /// `GVAULT_CPU_THREADS`, or all cores when unset; a bad value is
    /// reported once and ignored.
    pub fn from_env() -> CpuThreads {
        match &crate::tuning::tuning().cpu_threads {
            Some(v) => v.parse().unwrap_or_else(|e| {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    eprintln!("gvault: warning: GVAULT_CPU_THREADS: {e}; using all cores")
                });
                CpuThreads::All
            }),
            None => CpuThreads::All,
        }
    }
}

impl FromStr for CpuThreads {
    type Err = String;

    /// "8" (threads), "0.5" or "50%" (share of cores), "all".
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad =
            || format!("{s:?} is not a thread count (8), a share of cores (0.5, 50%) or \"all\"");
        if s.eq_ignore_ascii_case("all") {
            return Ok(CpuThreads::All);
        }
        let fraction = if let Some(p) = s.strip_suffix('%') {
            p.trim().parse::<f64>().map_err(|_| bad())? / 100.0
        } else if s.contains('.') {
            s.parse::<f64>().map_err(|_| bad())?
        } else {
            return match s.parse::<usize>() {
                Ok(0) => Err(format!("{s:?}: at least one CPU thread is needed")),
                Ok(n) => Ok(CpuThreads::Count(n)),
                Err(_) => Err(bad()),
            };
        };
        if fraction.is_finite() && fraction > 0.0 && fraction <= 1.0 {
            Ok(CpuThreads::Fraction(fraction))
        } else {
            Err(format!("{s:?}: a share of cores must be in (0, 1]"))
        }
    }
}

/// Predicted work in flight on one side.
#[derive(Default)]
struct Queue {
    ns: AtomicU64,
    bytes: AtomicU64,
    /// Jobs in flight, and jobs ever enqueued: whether a job ran alone.
    jobs: AtomicU64,
    started: AtomicU64,
}

/// Work counted on a queue until dropped.
struct Enqueued<'a> {
    queue: &'a Queue,
    ns: u64,
    bytes: u64,
    /// No other job was in flight on the side when this one was enqueued.
    first_in: bool,
    /// The queue's `started` before this job.
    epoch: u64,
}

impl Queue {
    fn enqueue(&self, ns: f64, bytes: u64) -> Enqueued<'_> {
        let ns = ns.max(0.0) as u64;
        self.ns.fetch_add(ns, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let first_in = self.jobs.fetch_add(1, Ordering::Relaxed) == 0;
        Enqueued {
            queue: self,
            ns,
            bytes,
            first_in,
            epoch: self.started.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl Enqueued<'_> {
    /// Whether the job had its side to itself so far: none in flight when
    /// it came, none enqueued since. Only such runs are learned from, so
    /// that waiting for or sharing with other jobs is not taken for a
    /// slow side. (CPU jobs too short to be queued go unseen.)
    fn ran_alone(&self) -> bool {
        self.first_in && self.queue.started.load(Ordering::Relaxed) == self.epoch + 1
    }
}

impl Drop for Enqueued<'_> {
    fn drop(&mut self) {
        self.queue.ns.fetch_sub(self.ns, Ordering::Relaxed);
        self.queue.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
        self.queue.jobs.fetch_sub(1, Ordering::Relaxed);
    }
}

/// CPU jobs predicted shorter than this are not counted on the CPU queue:
/// they barely move a large job's choice, and four atomic updates on a
/// shared line would cost a 4 KiB block read a noticeable share.
const CPU_QUEUE_MIN_NS: f64 = 50_000.0;

/// A model, where it came from, and its costs per op looked up once.
struct Loaded {
    model: CostModel,
    source: ModelSource,
    costs: Vec<OpCosts>,
}

impl Loaded {
    fn new(model: CostModel, source: ModelSource) -> Loaded {
        let costs = OpCosts::all(&model);
        Loaded {
            model,
            source,
            costs,
        }
    }
}

/// A decision, and what learning records its job against.
struct Decided {
    decision: Decision,
    /// `None` where nothing is learned (learning off, device-resident
    /// data, a forced plan).
    learn: Option<Learning>,
}

/// The job's key, and the factors and sides it was decided with.
#[derive(Clone, Copy)]
struct Learning {
    key: JobKey,
    fix: Corrections,
    stats: JobStats,
    sides: Sides,
}

/// What a split's parts took.
struct SplitRun {
    gpu_part: GpuPart,
    gpu_took: Duration,
    /// The GPU part ran on the GPU (it was not refused).
    on_gpu: bool,
    cpu_took: Duration,
}

/// What the first job loads: the model and whether a GPU may exist.
struct Setup {
    loaded: Loaded,
    gpu_possible: bool,
}

/// The GPU side once started, with the model re-checked against it when
/// the GPU it was measured with could not be known before.
struct GpuSide {
    backend: Box<dyn Backend>,
    model: Option<Loaded>,
}

/// Starts the GPU side: opens the devices, or says why not.
pub type GpuStarter = Box<dyn FnOnce() -> Result<Box<dyn Backend>, String> + Send>;

type SideStarter = Box<dyn FnOnce() -> Result<GpuSide, String> + Send>;

pub struct AutoBackend {
    cpu_threads: usize,
    /// Logical cores: the size of the process-wide pool that the GPU
    /// backend's staging copies run on.
    cores: usize,
    /// Pools for the CPU parts of splits that leave cores to the GPU part's
    /// staging copies, by thread count (a few sizes: one per op and memory
    /// kind at most), built by the first split that needs each.
    split_pools: Mutex<Vec<Arc<CpuBackend>>>,
    /// Its thread pool is built by the first job.
    cpu: OnceLock<CpuBackend>,
    /// Loaded by the first job (`new` only records what to load).
    setup: OnceLock<Setup>,
    /// Started by the first job the model sends (part of) to the GPU;
    /// `None` inside once starting failed.
    gpu: OnceLock<Option<GpuSide>>,
    starter: Mutex<Option<SideStarter>>,
    /// Whether host memory is page-locked, where that can be asked.
    page_locked: Option<fn(&[u8]) -> bool>,
    /// One bit per [`OpKind::ALL`] index: ops the GPU has refused.
    refused: AtomicU32,
    cpu_queue: Queue,
    gpu_queue: Queue,
    placed: PlacedCounters,
    /// Corrections of the model from completed jobs.
    learner: Learner,
    /// `GVAULT_AUTO_POOL_CALLERS=alone`: a job from a rayon pool thread is
    /// priced with nothing queued on the CPU side.
    pool_callers_alone: bool,
}

/// Where the jobs of an auto backend ran, counted since it was built:
/// what `gvault serve status` shows as GPU use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placements {
    pub cpu_jobs: u64,
    pub gpu_jobs: u64,
    pub split_jobs: u64,
    pub cpu_bytes: u64,
    pub gpu_bytes: u64,
    /// Near-tie jobs run on the side the model did not choose, to correct
    /// it (`GVAULT_AUTO_LEARN`); counted in `cpu_jobs` or `gpu_jobs` too.
    pub explored_jobs: u64,
}

#[derive(Default)]
struct PlacedCounters {
    cpu_jobs: AtomicU64,
    gpu_jobs: AtomicU64,
    split_jobs: AtomicU64,
    cpu_bytes: AtomicU64,
    gpu_bytes: AtomicU64,
}

impl PlacedCounters {
    fn add(&self, jobs: &AtomicU64, bytes: &AtomicU64, n: u64) {
        jobs.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(n, Ordering::Relaxed);
    }
}

/// What this machine is, for matching a calibration file to it.
pub fn machine_identity(gpu: Option<&GpuBackend>) -> Identity {
    let names: Vec<&str> = gpu
        .map(|g| g.devices().iter().map(|d| d.name.as_str()).collect())
        .unwrap_or_default();
    Identity {
        gvault_version: env!("CARGO_PKG_VERSION").to_string(),
        cpu_cores: crate::sysinfo::cpu_info().logical_cores,
        gpu_name: (!names.is_empty()).then(|| names.join(" + ")),
        driver_version: gpu.and_then(GpuBackend::driver_version),
    }
}

/// The model to decide with until the GPU is open: checked against the
/// host only where CUDA's libraries are present (the GPU is checked when
/// it opens), fully where they are not (then no job goes to a GPU).
fn machine_setup() -> Setup {
    let gpu_possible = crate::gpu::probe_libraries().is_ok();
    let host = machine_identity(None);
    let path = file::default_path();
    let (model, source) = if gpu_possible {
        file::load_before_gpu(path.as_deref(), &host)
    } else {
        file::load(path.as_deref(), &host)
    };
    // A missing file is reported once the GPU opens (it matters then).
    file::warn_once(&source, false);
    Setup {
        loaded: Loaded::new(model, source),
        gpu_possible,
    }
}

/// Opens every visible GPU and checks the model against it.
fn start_machine_gpu() -> Result<GpuSide, String> {
    let gpu = GpuBackend::probe()?;
    let identity = machine_identity(Some(&gpu));
    let (model, source) = file::load(file::default_path().as_deref(), &identity);
    file::warn_once(&source, true);
    Ok(GpuSide {
        backend: Box::new(gpu),
        model: Some(Loaded::new(model, source)),
    })
}

impl AutoBackend {
    /// All cores unless `GVAULT_CPU_THREADS` says otherwise, every visible
    /// GPU, the calibrated model (or the shipped defaults, with a warning).
    /// Cheap: the model loads on the first job, and the GPU opens on the
    /// first job the model sends to it.
    pub fn new() -> Self {
        Self::with_cpu_threads(CpuThreads::from_env())
    }

    /// As [`AutoBackend::new`], with the CPU side limited to `threads`.
    pub fn with_cpu_threads(threads: CpuThreads) -> Self {
        let cores = crate::sysinfo::cpu_info().logical_cores;
        let mut auto = Self::build(
            threads.resolve(cores),
            OnceLock::new(),
            OnceLock::new(),
            Some(Box::new(start_machine_gpu)),
        );
        auto.page_locked = Some(crate::gpu::host_page_locked);
        auto
    }

    /// From explicit parts: tests and benchmarks pass a stand-in GPU and a
    /// synthetic model.
    pub fn from_parts(
        cpu: CpuBackend,
        gpu: Option<Box<dyn Backend>>,
        model: CostModel,
        source: ModelSource,
    ) -> Self {
        let starter = gpu.map(|g| Box::new(move || Ok(g)) as GpuStarter);
        Self::from_starter(cpu, starter, model, source)
    }

    /// As [`AutoBackend::from_parts`], with a GPU that is started (or fails
    /// to start) by the first job sent to it.
    pub fn from_starter(
        cpu: CpuBackend,
        starter: Option<GpuStarter>,
        model: CostModel,
        source: ModelSource,
    ) -> Self {
        let setup = Setup {
            loaded: Loaded::new(model, source),
            gpu_possible: starter.is_some(),
        };
        let starter = starter.map(|start| {
            Box::new(move || {
                start().map(|backend| GpuSide {
                    backend,
                    model: None,
                })
            }) as SideStarter
        });
        Self::build(
            cpu.threads(),
            OnceLock::from(cpu),
            OnceLock::from(setup),
            starter,
        )
    }

    /// Tells a stand-in GPU's auto backend how to recognise page-locked
    /// host memory (the real one asks the CUDA driver).
    pub fn with_page_locked_check(mut self, is_locked: fn(&[u8]) -> bool) -> Self {
        self.page_locked = Some(is_locked);
        self
    }

    fn build(
        cpu_threads: usize,
        cpu: OnceLock<CpuBackend>,
        setup: OnceLock<Setup>,
        starter: Option<SideStarter>,
    ) -> Self {
        Self {
            cpu_threads,
            cores: crate::sysinfo::cpu_info().logical_cores,
            split_pools: Mutex::new(Vec::new()),
            cpu,
            setup,
            gpu: OnceLock::new(),
            starter: Mutex::new(starter),
            page_locked: None,
            refused: AtomicU32::new(0),
            cpu_queue: Queue::default(),
            gpu_queue: Queue::default(),
            placed: PlacedCounters::default(),
            learner: Learner::from_env(),
            pool_callers_alone: crate::tuning::tuning()
                .auto_pool_callers_alone
                .unwrap_or(false),
        }
    }

    /// Prices jobs from rayon pool threads with nothing queued on the CPU
    /// side (or not), whatever `GVAULT_AUTO_POOL_CALLERS` says (tests).
    pub fn with_pool_callers_alone(mut self, alone: bool) -> Self {
        self.pool_callers_alone = alone;
        self
    }

    /// Turns learning from completed jobs on or off, whatever
    /// `GVAULT_AUTO_LEARN` says (tests, benchmarks); what was learned is
    /// dropped.
    pub fn with_learning(mut self, on: bool) -> Self {
        self.learner = Learner::new(on);
        self
    }

    /// Whether decisions are corrected from completed jobs.
    pub fn learning(&self) -> bool {
        self.learner.is_on()
    }

    /// The factors learned so far (observed ÷ predicted time), by op,
    /// side, memory and shape class.
    pub fn learned(&self) -> Vec<LearnedFactor> {
        self.learner.learned()
    }

    fn cpu(&self) -> &CpuBackend {
        self.cpu
            .get_or_init(|| CpuBackend::with_threads(self.cpu_threads))
    }

    fn setup(&self) -> &Setup {
        self.setup.get_or_init(machine_setup)
    }

    /// The GPU side, started on first use; `None` when there is none or it
    /// failed to start (reported once, then every job runs on the CPU).
    fn gpu_side(&self) -> Option<&GpuSide> {
        self.gpu
            .get_or_init(|| {
                let start = self
                    .starter
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take()?;
                match start() {
                    Ok(side) => Some(side),
                    Err(why) => {
                        eprintln!(
                            "gvault: warning: auto backend: the GPU did not start ({why}); \
                             running every job on the CPU"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The model in use: the one checked against the open GPU, once open.
    fn loaded(&self) -> &Loaded {
        match self
            .gpu
            .get()
            .and_then(Option::as_ref)
            .and_then(|g| g.model.as_ref())
        {
            Some(l) => l,
            None => &self.setup().loaded,
        }
    }

    pub fn model(&self) -> &CostModel {
        &self.loaded().model
    }

    pub fn model_source(&self) -> &ModelSource {
        &self.loaded().source
    }

    pub fn cpu_threads(&self) -> usize {
        self.cpu_threads
    }

    /// Whether a GPU is open or may still be opened for a job.
    pub fn has_gpu(&self) -> bool {
        match self.gpu.get() {
            Some(side) => side.is_some(),
            None => self.setup().gpu_possible,
        }
    }

    /// Whether the GPU has been opened (by a job that needed it).
    pub fn gpu_started(&self) -> bool {
        self.gpu.get().is_some_and(Option::is_some)
    }

    /// Predicted nanoseconds and bytes in flight on (CPU, GPU).
    pub fn queued(&self) -> ((u64, u64), (u64, u64)) {
        let q = |q: &Queue| {
            (
                q.ns.load(Ordering::Relaxed),
                q.bytes.load(Ordering::Relaxed),
            )
        };
        (q(&self.cpu_queue), q(&self.gpu_queue))
    }

    /// Where this backend's jobs ran so far.
    pub fn placements(&self) -> Placements {
        let p = &self.placed;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Placements {
            cpu_jobs: get(&p.cpu_jobs),
            gpu_jobs: get(&p.gpu_jobs),
            split_jobs: get(&p.split_jobs),
            cpu_bytes: get(&p.cpu_bytes),
            gpu_bytes: get(&p.gpu_bytes),
            explored_jobs: self.learner.explored(),
        }
    }

    fn op_index(op: OpKind) -> usize {
        OpKind::ALL.iter().position(|o| *o == op).unwrap_or(0)
    }

    fn op_bit(op: OpKind) -> u32 {
        1 << Self::op_index(op)
    }

    /// Whether the GPU has refused `op` (it is then never tried again).
    pub fn gpu_refused(&self, op: OpKind) -> bool {
        self.refused.load(Ordering::Relaxed) & Self::op_bit(op) != 0
    }

    /// Whether `op` may go to the GPU: O(1), so that a machine without one
    /// pays nothing more per job.
    fn gpu_usable(&self, op: OpKind) -> bool {
        self.has_gpu() && !self.gpu_refused(op)
    }

    /// What `run` would do with `job` now, unless it explores the job
    /// (runs a near tie on the side the model did not choose, to learn).
    pub fn decide(&self, job: &Job<'_>) -> Decision {
        self.decide_surveyed(job, &self.cpu().survey(job))
    }

    /// As [`AutoBackend::decide`], from the job's survey: O(1) in the
    /// number of segments unless a split is placed (the CPU backend runs a
    /// job from the same survey, so deciding adds no pass over the job).
    pub(super) fn decide_surveyed(&self, job: &Job<'_>, survey: &Survey) -> Decision {
        self.decide_full(job, survey).decision
    }

    fn costs(&self, op: OpKind) -> &OpCosts {
        &self.loaded().costs[Self::op_index(op)]
    }

    /// The decision for `job`, its predictions corrected by what was
    /// learned from earlier jobs of its key.
    fn decide_full(&self, job: &Job<'_>, survey: &Survey) -> Decided {
        let op = job.op();
        let costs = self.costs(op);
        // A job from a parallel loop's body (a restore's groups, each its
        // own open job) finds its siblings queued on the CPU side, though
        // they run beside it, not before it; sent to the GPU, it leaves its
        // thread's core idle while it waits. With the A/B setting on, such
        // a job is priced as if the CPU side had nothing queued.
        let from_pool = self.pool_callers_alone && rayon::current_thread_index().is_some();
        let sides = Sides {
            cpu_threads: self.cpu_threads,
            cores: self.cores,
            gpu: self.gpu_usable(op),
            cpu_queued_ns: if from_pool {
                0.0
            } else {
                self.cpu_queue.ns.load(Ordering::Relaxed) as f64
            },
            gpu_queued_ns: self.gpu_queue.ns.load(Ordering::Relaxed) as f64,
        };
        let fix = |stats: &JobStats| self.learner.corrections(JobKey::of(op, stats));
        let mut stats = inspect::stats(survey);
        if stats.mem != HostMemory::Device && sides.gpu {
            // Asking the driver about the memory is worth it only where the
            // GPU could win from some kind of host memory, or where a near
            // tie may be explored (its observations are keyed by memory).
            let screen = |mem| {
                let stats = JobStats { mem, ..stats };
                let fix = fix(&stats);
                (sketch_corrected(costs, &stats, &sides, &fix), stats, fix)
            };
            let ((pageable, decision), pageable_stats, pageable_fix) = screen(HostMemory::Pageable);
            if pageable == Sketch::Cpu {
                let ((pinned, pinned_decision), _, _) = screen(HostMemory::Pinned);
                let explorable =
                    self.learner.is_on() && (near_tie(&decision) || near_tie(&pinned_decision));
                if pinned == Sketch::Cpu && !explorable {
                    return self.decided(op, decision, pageable_stats, sides, pageable_fix);
                }
            }
            if self
                .page_locked
                .is_some_and(|f| inspect::host_is_pinned(job, f))
            {
                stats.mem = HostMemory::Pinned;
            }
        }
        let fix = fix(&stats);
        let decision = decide_corrected(costs, &stats, &sides, &fix, || inspect::lengths(job));
        self.decided(op, decision, stats, sides, fix)
    }

    fn decided(
        &self,
        op: OpKind,
        decision: Decision,
        stats: JobStats,
        sides: Sides,
        fix: Corrections,
    ) -> Decided {
        let learn = JobKey::of(op, &stats)
            .filter(|_| self.learner.is_on())
            .map(|key| Learning {
                key,
                fix,
                stats,
                sides,
            });
        Decided { decision, learn }
    }

    /// Now and then runs a near-tie job on the side that has too few
    /// observations in its key (`learn/explore.rs`).
    fn explore(&self, decided: Decided) -> Decided {
        let Some(l) = decided.learn else {
            return decided;
        };
        let d = decided.decision;
        let Some(plan) = self.learner.explore(&d, &l.sides, l.key) else {
            return decided;
        };
        let finish = match plan {
            Plan::Gpu => d.gpu_finish_ns.unwrap_or(d.plan_finish_ns),
            _ => d.cpu_finish_ns,
        };
        Decided {
            decision: Decision {
                plan,
                plan_finish_ns: finish,
                split_cpu_threads: l.sides.cpu_threads,
                ..d
            },
            learn: decided.learn,
        }
    }

    /// Runs `job` by `plan` whatever the model says: for tests and
    /// benchmarks. A split with no GPU runs both parts on the CPU.
    pub fn run_plan(
        &self,
        job: &mut Job<'_>,
        plan: Plan,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let survey = self.cpu().survey(job);
        let d = self.decide_surveyed(job, &survey);
        // Forced plans are not learned from: sweeps stay reproducible.
        let forced = Decided {
            decision: Decision { plan, ..d },
            learn: None,
        };
        self.execute(job, forced, &survey)
    }

    /// Learns from a job (or part) that ran on `side`, where it was
    /// predicted (corrected) at `predicted_ns` and took `took`: if it
    /// counts (it ran there, alone) and was long enough to time.
    fn learn_from(
        &self,
        l: &Learning,
        side: Side,
        run: Run,
        predicted_ns: f64,
        counts: bool,
        took: Duration,
    ) {
        if !counts || predicted_ns < MIN_OBSERVED_NS {
            return;
        }
        let factor = match (side, run) {
            (Side::Cpu, Run::Whole) => l.fix.cpu,
            (Side::Gpu, Run::Whole) => l.fix.gpu,
            (Side::Cpu, Run::Part) => l.fix.cpu_part,
            (Side::Gpu, Run::Part) => l.fix.gpu_part,
        };
        let observed_ns = took.as_nanos() as f64;
        self.learner
            .observe(l.key, side, run, predicted_ns / factor, observed_ns);
    }

    /// Learns from both parts of a split, each compared with its price
    /// in the decision; `counts`: whether the (CPU, GPU) part counts.
    fn learn_from_split(
        &self,
        l: &Learning,
        op: OpKind,
        at: SplitPoint,
        times: &SplitRun,
        counts: (bool, bool),
    ) {
        let c = self.costs(op);
        let cut_inside = at.offset > 0;
        let parts = split_part_times(c, &l.stats, &l.sides, times.gpu_part, cut_inside, &l.fix);
        let cpu_ns = parts.cpu_ns + parts.spill_ns;
        self.learn_from(l, Side::Cpu, Run::Part, cpu_ns, counts.0, times.cpu_took);
        self.learn_from(
            l,
            Side::Gpu,
            Run::Part,
            parts.gpu_ns,
            counts.1,
            times.gpu_took,
        );
    }

    fn execute(
        &self,
        job: &mut Job<'_>,
        decided: Decided,
        survey: &Survey,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let Decided { decision: d, learn } = decided;
        let (cpu_q, gpu_q) = self.queued();
        let p = &self.placed;
        match d.plan {
            Plan::Cpu => p.add(&p.cpu_jobs, &p.cpu_bytes, survey.bytes),
            Plan::Gpu => p.add(&p.gpu_jobs, &p.gpu_bytes, survey.bytes),
            Plan::Split(_) => {
                p.add(&p.split_jobs, &p.gpu_bytes, survey.bytes / 2);
                p.cpu_bytes.fetch_add(survey.bytes / 2, Ordering::Relaxed);
            }
        }
        match d.plan {
            Plan::Cpu => {
                let own = d.cpu_finish_ns - cpu_q.0 as f64;
                let q =
                    (own >= CPU_QUEUE_MIN_NS).then(|| self.cpu_queue.enqueue(own, survey.bytes));
                // Jobs too short to queue are too short to learn from.
                let start = q.as_ref().and(learn.as_ref()).map(|_| Instant::now());
                let r = self.cpu().run_surveyed(job, survey);
                if let (Some(l), Some(q), Some(start)) = (&learn, &q, start) {
                    let predicted = d.cpu_finish_ns - l.sides.cpu_queued_ns;
                    let counts = r.is_ok() && q.ran_alone();
                    let took = start.elapsed();
                    self.learn_from(l, Side::Cpu, Run::Whole, predicted, counts, took);
                }
                r
            }
            Plan::Gpu => {
                let own = d.gpu_finish_ns.unwrap_or(0.0) - gpu_q.0 as f64;
                let q = self.gpu_queue.enqueue(own, survey.bytes);
                let start = Instant::now();
                let (r, on_gpu) = self.on_gpu(job);
                if let Some(l) = &learn {
                    let predicted = d.gpu_finish_ns.unwrap_or(0.0) - l.sides.gpu_queued_ns;
                    let counts = on_gpu && r.is_ok() && q.ran_alone();
                    let took = start.elapsed();
                    self.learn_from(l, Side::Gpu, Run::Whole, predicted, counts, took);
                }
                r
            }
            Plan::Split(at) => {
                let bytes = survey.bytes;
                let finish = d.plan_finish_ns - SPLIT_OVERHEAD_NS;
                let qc = self.cpu_queue.enqueue(finish - cpu_q.0 as f64, bytes / 2);
                let qg = self.gpu_queue.enqueue(finish - gpu_q.0 as f64, bytes / 2);
                let (results, times) = self.run_split(job, at, d.split_cpu_threads)?;
                if let Some(l) = &learn {
                    let counts = (qc.ran_alone(), times.on_gpu && qg.ran_alone());
                    self.learn_from_split(l, job.op(), at, &times, counts);
                }
                Ok(results)
            }
        }
    }

    /// Runs on the GPU; an op it does not implement runs on the CPU and is
    /// remembered, so the GPU is not asked again. Says whether it ran on
    /// the GPU.
    fn on_gpu(&self, job: &mut Job<'_>) -> (Result<Vec<SegmentResult>, BackendError>, bool) {
        let Some(gpu) = self.gpu_side() else {
            return (self.cpu().run(job), false);
        };
        if self.gpu_refused(job.op()) {
            return (self.cpu().run(job), false);
        }
        match gpu.backend.run(job) {
            // Both are returned before any data is touched.
            Err(BackendError::Unsupported { .. } | BackendError::Unavailable { .. }) => {
                self.refused
                    .fetch_or(Self::op_bit(job.op()), Ordering::Relaxed);
                (self.cpu().run(job), false)
            }
            other => (other, true),
        }
    }

    /// The CPU backend for a split's CPU part on `threads` threads: the
    /// CPU side itself, or (leaving cores to the GPU part's staging copies)
    /// a pool of that size of its own.
    fn split_cpu(&self, threads: usize) -> Arc<CpuBackend> {
        let mut pools = self.split_pools.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pools.iter().find(|p| p.threads() == threads) {
            return Arc::clone(p);
        }
        let pool = Arc::new(CpuBackend::with_own_pool(threads));
        pools.push(Arc::clone(&pool));
        pool
    }

    /// Runs the two parts of a split at once: the results, and what each
    /// part took.
    fn run_split(
        &self,
        job: &mut Job<'_>,
        at: SplitPoint,
        cpu_threads: usize,
    ) -> Result<(Vec<SegmentResult>, SplitRun), BackendError> {
        let (mut g, mut c) = split(job, at)?;
        let (gn, cn) = (g.len(), c.len());
        let gpu_part = GpuPart {
            bytes: g.bytes(),
            segments: gn,
        };
        let own_pool = (cpu_threads < self.cpu_threads).then(|| self.split_cpu(cpu_threads));
        let cpu = own_pool.as_deref().unwrap_or_else(|| self.cpu());
        let ((gr, on_gpu, gpu_took), (cr, cpu_took)) = std::thread::scope(|s| {
            let gpu_part = s.spawn(|| {
                let start = Instant::now();
                let (r, on_gpu) = self.on_gpu(&mut g);
                (r, on_gpu, start.elapsed())
            });
            let start = Instant::now();
            let cr = cpu.run(&mut c);
            let cpu_took = start.elapsed();
            let gr = gpu_part.join().unwrap_or_else(|_| {
                let panicked = "the GPU part of a split job panicked".into();
                (Err(BackendError::Device(panicked)), false, Duration::ZERO)
            });
            (gr, (cr, cpu_took))
        });
        let (gr, cr) = (gr?, cr?);
        if gr.len() != gn || cr.len() != cn {
            return Err(BackendError::Device(format!(
                "a backend returned {}+{} results for {gn}+{cn} segments",
                gr.len(),
                cr.len()
            )));
        }
        let times = SplitRun {
            gpu_part,
            gpu_took,
            on_gpu,
            cpu_took,
        };
        Ok((merge(at, gr, cr), times))
    }
}

impl Default for AutoBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for AutoBackend {
    fn name(&self) -> &'static str {
        "auto"
    }

    /// Starts the GPU side if it is not running: a caller asking for
    /// page-locked memory means to give the GPU work.
    fn alloc_host(&self, len: usize) -> Option<crate::gpu::PinnedBuffer> {
        self.gpu_side()?.backend.alloc_host(len)
    }

    /// Starts the GPU side if it is not running, as `alloc_host` does.
    fn alloc_on_device(
        &self,
        device: u32,
        len: usize,
    ) -> Option<Result<crate::gpu::DeviceAllocation, BackendError>> {
        self.gpu_side()?.backend.alloc_on_device(device, len)
    }

    /// Starts the GPU side if it is not running, as `alloc_host` does.
    unsafe fn copy_device(
        &self,
        device: u32,
        copies: &[crate::gpu::DeviceCopy],
    ) -> Option<Result<(), BackendError>> {
        // SAFETY: the caller's contract is the GPU side's.
        unsafe { self.gpu_side()?.backend.copy_device(device, copies) }
    }

    /// Starts the GPU side if it is not running, as `alloc_host` does.
    unsafe fn register_host(
        &self,
        ptr: *mut u8,
        len: usize,
    ) -> Option<Result<crate::gpu::HostRegistration, BackendError>> {
        // SAFETY: the caller's contract is the GPU side's.
        unsafe { self.gpu_side()?.backend.register_host(ptr, len) }
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        // Small AES-GCM jobs run on the calling thread, undecided: the GPU
        // cannot win them, and deciding costs a share of their time.
        if let Some(results) = crate::cpu::run_on_caller(job) {
            let p = &self.placed;
            p.add(&p.cpu_jobs, &p.cpu_bytes, job.bytes());
            return Ok(results);
        }
        if job.is_empty() || !self.gpu_usable(job.op()) {
            let p = &self.placed;
            p.add(&p.cpu_jobs, &p.cpu_bytes, job.bytes());
            return self.cpu().run(job);
        }
        let survey = self.cpu().survey(job);
        let mut decided = self.decide_full(job, &survey);
        if decided.decision.plan != Plan::Cpu && self.gpu.get().is_none() {
            // The first job for the GPU opens it, which may replace the
            // model (checked against the real GPU) or fail: decide again
            // after.
            self.gpu_side();
            decided = self.decide_full(job, &survey);
        }
        let decided = self.explore(decided);
        if decided.decision.plan == Plan::Gpu && self.gpu.get().is_none() {
            // An explored job opens the GPU before it is timed (its run is
            // the key's warm-up, not learned from).
            self.gpu_side();
        }
        self.execute(job, decided, &survey)
    }

    fn small_gcm_on_caller(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_threads_parse_and_resolve() {
        assert_eq!("8".parse(), Ok(CpuThreads::Count(8)));
        assert_eq!("all".parse(), Ok(CpuThreads::All));
        assert_eq!("0.5".parse(), Ok(CpuThreads::Fraction(0.5)));
        assert_eq!("25%".parse(), Ok(CpuThreads::Fraction(0.25)));
        for bad in ["0", "-1", "1.5", "0%", "x", "", "NaN"] {
            assert!(bad.parse::<CpuThreads>().is_err(), "{bad:?}");
        }
        assert_eq!(CpuThreads::Fraction(0.25).resolve(16), 4);
        assert_eq!(CpuThreads::Fraction(0.01).resolve(16), 1);
        assert_eq!(CpuThreads::All.resolve(16), 16);
        assert_eq!(CpuThreads::Count(3).resolve(16), 3);
    }

    #[test]
    fn pool_callers_alone_ignore_the_cpu_queue_only_from_pool_threads() {
        use crate::auto::test_models::model_with;
        use crate::job::{Data, DigestAlgo};
        // A core of 1 GB/s (SHA-256 of one segment runs on one); the GPU
        // 0.8 GB/s from host memory: a 1 MiB digest is the CPU's alone
        // (~1.05 ms against ~1.33 ms), the GPU's behind 10 ms of queued
        // CPU work.
        let data = vec![3u8; 1 << 20];
        let job = Job::Digest {
            algo: DigestAlgo::Sha256,
            segments: vec![Data::from(&data[..])],
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        for alone in [false, true] {
            let auto = AutoBackend::from_parts(
                CpuBackend::with_threads(2),
                Some(Box::new(CpuBackend::with_threads(1))),
                model_with(2, 1.0, 0.8, 0.8, 100.0),
                ModelSource::Defaults {
                    reason: "test".into(),
                },
            )
            .with_learning(false)
            .with_pool_callers_alone(alone);
            let survey = Survey::of(&job);
            assert_eq!(auto.decide_surveyed(&job, &survey).plan, Plan::Cpu);
            let _queued = auto.cpu_queue.enqueue(10e6, 0);
            let plain = auto.decide_surveyed(&job, &survey).plan;
            let in_pool = pool.install(|| auto.decide_surveyed(&job, &survey).plan);
            assert_eq!(plain, Plan::Gpu, "alone={alone}");
            let want = if alone { Plan::Cpu } else { Plan::Gpu };
            assert_eq!(in_pool, want, "alone={alone}");
        }
    }

    #[test]
    fn a_job_runs_alone_only_with_its_side_to_itself() {
        let q = Queue::default();
        let a = q.enqueue(1e6, 10);
        assert!(a.ran_alone());
        // One enqueued while `a` runs: neither ran alone.
        let b = q.enqueue(1e6, 10);
        assert!(!a.ran_alone() && !b.ran_alone());
        drop(a);
        assert!(!b.ran_alone(), "it waited or shared");
        drop(b);
        let c = q.enqueue(1e6, 10);
        assert!(c.ran_alone());
        drop(c);
        assert_eq!(q.jobs.load(Ordering::Relaxed), 0);
        assert_eq!(q.ns.load(Ordering::Relaxed), 0);
    }
}
