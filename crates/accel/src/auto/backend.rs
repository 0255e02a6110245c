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

use super::decide::{
    decide_stats, sketch, Decision, JobStats, OpCosts, Plan, Sides, Sketch, SplitPoint,
    SPLIT_OVERHEAD_NS,
};
use super::file::{self, ModelSource};
use super::inspect;
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
}

/// Work counted on a queue until dropped.
struct Enqueued<'a> {
    queue: &'a Queue,
    ns: u64,
    bytes: u64,
}

impl Queue {
    fn enqueue(&self, ns: f64, bytes: u64) -> Enqueued<'_> {
        let ns = ns.max(0.0) as u64;
        self.ns.fetch_add(ns, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        Enqueued {
            queue: self,
            ns,
            bytes,
        }
    }
}

impl Drop for Enqueued<'_> {
    fn drop(&mut self) {
        self.queue.ns.fetch_sub(self.ns, Ordering::Relaxed);
        self.queue.bytes.fetch_sub(self.bytes, Ordering::Relaxed);
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
        }
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

    /// What `run` would do with `job` now.
    pub fn decide(&self, job: &Job<'_>) -> Decision {
        self.decide_surveyed(job, &self.cpu().survey(job))
    }

    /// As [`AutoBackend::decide`], from the job's survey: O(1) in the
    /// number of segments unless a split is placed (the CPU backend runs a
    /// job from the same survey, so deciding adds no pass over the job).
    pub(super) fn decide_surveyed(&self, job: &Job<'_>, survey: &Survey) -> Decision {
        let op = job.op();
        let all = &self.loaded().costs;
        let costs = &all[Self::op_index(op)];
        let sides = Sides {
            cpu_threads: self.cpu_threads,
            cores: self.cores,
            gpu: self.gpu_usable(op),
            cpu_queued_ns: self.cpu_queue.ns.load(Ordering::Relaxed) as f64,
            gpu_queued_ns: self.gpu_queue.ns.load(Ordering::Relaxed) as f64,
        };
        let mut stats = inspect::stats(survey);
        if stats.mem != HostMemory::Device && sides.gpu {
            // Asking the driver about the memory is worth it only where the
            // GPU could win from some kind of host memory.
            let screen = |mem| sketch(costs, &JobStats { mem, ..stats }, &sides);
            let (pageable, decision) = screen(HostMemory::Pageable);
            if pageable == Sketch::Cpu && screen(HostMemory::Pinned).0 == Sketch::Cpu {
                return decision;
            }
            if self
                .page_locked
                .is_some_and(|f| inspect::host_is_pinned(job, f))
            {
                stats.mem = HostMemory::Pinned;
            }
        }
        decide_stats(costs, &stats, &sides, || inspect::lengths(job))
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
        self.execute(job, Decision { plan, ..d }, &survey)
    }

    fn execute(
        &self,
        job: &mut Job<'_>,
        d: Decision,
        survey: &Survey,
    ) -> Result<Vec<SegmentResult>, BackendError> {
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
                let _q =
                    (own >= CPU_QUEUE_MIN_NS).then(|| self.cpu_queue.enqueue(own, survey.bytes));
                self.cpu().run_surveyed(job, survey)
            }
            Plan::Gpu => {
                let own = d.gpu_finish_ns.unwrap_or(0.0) - gpu_q.0 as f64;
                let _q = self.gpu_queue.enqueue(own, survey.bytes);
                self.on_gpu(job)
            }
            Plan::Split(at) => {
                let bytes = survey.bytes;
                let finish = d.plan_finish_ns - SPLIT_OVERHEAD_NS;
                let _qc = self.cpu_queue.enqueue(finish - cpu_q.0 as f64, bytes / 2);
                let _qg = self.gpu_queue.enqueue(finish - gpu_q.0 as f64, bytes / 2);
                self.run_split(job, at, d.split_cpu_threads)
            }
        }
    }

    /// Runs on the GPU; an op it does not implement runs on the CPU and is
    /// remembered, so the GPU is not asked again.
    fn on_gpu(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        let Some(gpu) = self.gpu_side() else {
            return self.cpu().run(job);
        };
        if self.gpu_refused(job.op()) {
            return self.cpu().run(job);
        }
        match gpu.backend.run(job) {
            // Both are returned before any data is touched.
            Err(BackendError::Unsupported { .. } | BackendError::Unavailable { .. }) => {
                self.refused
                    .fetch_or(Self::op_bit(job.op()), Ordering::Relaxed);
                self.cpu().run(job)
            }
            other => other,
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

    fn run_split(
        &self,
        job: &mut Job<'_>,
        at: SplitPoint,
        cpu_threads: usize,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let (mut g, mut c) = split(job, at)?;
        let (gn, cn) = (g.len(), c.len());
        let own_pool = (cpu_threads < self.cpu_threads).then(|| self.split_cpu(cpu_threads));
        let cpu = own_pool.as_deref().unwrap_or_else(|| self.cpu());
        let (gr, cr) = std::thread::scope(|s| {
            let gpu_part = s.spawn(|| self.on_gpu(&mut g));
            let cr = cpu.run(&mut c);
            let gr = gpu_part.join().unwrap_or_else(|_| {
                Err(BackendError::Device(
                    "the GPU part of a split job panicked".into(),
                ))
            });
            (gr, cr)
        });
        let (gr, cr) = (gr?, cr?);
        if gr.len() != gn || cr.len() != cn {
            return Err(BackendError::Device(format!(
                "a backend returned {}+{} results for {gn}+{cn} segments",
                gr.len(),
                cr.len()
            )));
        }
        Ok(merge(at, gr, cr))
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
        let first = self.decide_surveyed(job, &survey);
        if first.plan == Plan::Cpu || self.gpu.get().is_some() {
            return self.execute(job, first, &survey);
        }
        // The first job for the GPU opens it, which may replace the model
        // (checked against the real GPU) or fail: decide again after.
        self.gpu_side();
        let d = self.decide_surveyed(job, &survey);
        self.execute(job, d, &survey)
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
}
