//! [`AutoBackend`]: the backend callers use by default. Per job it predicts
//! the finish time on the CPU and on the GPU (work already queued on each
//! included) and runs the job on the sooner one, or splits it so that both
//! finish together. Without a GPU it is the CPU backend plus one check.

use std::str::FromStr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::decide::{decide, Decision, JobShape, Plan, Sides, SplitPoint, SPLIT_OVERHEAD_NS};
use super::file::{self, ModelSource};
use super::model::{CostModel, Identity};
use super::split::{merge, split};
use crate::backend::Backend;
use crate::cpu::CpuBackend;
use crate::error::BackendError;
use crate::gpu::GpuBackend;
use crate::job::{Data, DataMut, Job, OpKind, SegmentResult};

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
        match std::env::var("GVAULT_CPU_THREADS") {
            Ok(v) if !v.trim().is_empty() => v.parse().unwrap_or_else(|e| {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    eprintln!("gvault: warning: GVAULT_CPU_THREADS: {e}; using all cores")
                });
                CpuThreads::All
            }),
            _ => CpuThreads::All,
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

pub struct AutoBackend {
    cpu: CpuBackend,
    gpu: Option<Box<dyn Backend>>,
    model: CostModel,
    source: ModelSource,
    /// One bit per [`OpKind::ALL`] index: ops the GPU has refused.
    refused: AtomicU32,
    cpu_queue: Queue,
    gpu_queue: Queue,
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
        driver_version: gpu.and_then(|_| driver_version()),
    }
}

/// The CUDA driver's version (e.g. 13000), once a GPU has been opened.
fn driver_version() -> Option<i32> {
    let mut v: std::ffi::c_int = 0;
    // SAFETY: only called after GpuBackend::probe succeeded, so libcuda is
    // loaded; the call writes one int through a valid pointer.
    let r = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut v) };
    (r == cudarc::driver::sys::CUresult::CUDA_SUCCESS).then_some(v)
}

impl AutoBackend {
    /// All cores unless `GVAULT_CPU_THREADS` says otherwise, every visible
    /// GPU, the calibrated model (or the shipped defaults, with a warning).
    pub fn new() -> Self {
        Self::with_cpu_threads(CpuThreads::from_env())
    }

    /// As [`AutoBackend::new`], with the CPU side limited to `threads`.
    pub fn with_cpu_threads(threads: CpuThreads) -> Self {
        let gpu = GpuBackend::probe().ok();
        let identity = machine_identity(gpu.as_ref());
        let cores = identity.cpu_cores;
        let (model, source) = file::load(file::default_path().as_deref(), &identity);
        file::warn_once(&source, gpu.is_some());
        let cpu = CpuBackend::with_threads(threads.resolve(cores));
        Self::from_parts(
            cpu,
            gpu.map(|g| Box::new(g) as Box<dyn Backend>),
            model,
            source,
        )
    }

    /// From explicit parts: tests and benchmarks pass a stand-in GPU and a
    /// synthetic model.
    pub fn from_parts(
        cpu: CpuBackend,
        gpu: Option<Box<dyn Backend>>,
        model: CostModel,
        source: ModelSource,
    ) -> Self {
        Self {
            cpu,
            gpu,
            model,
            source,
            refused: AtomicU32::new(0),
            cpu_queue: Queue::default(),
            gpu_queue: Queue::default(),
        }
    }

    pub fn model(&self) -> &CostModel {
        &self.model
    }

    pub fn model_source(&self) -> &ModelSource {
        &self.source
    }

    pub fn cpu_threads(&self) -> usize {
        self.cpu.threads()
    }

    pub fn has_gpu(&self) -> bool {
        self.gpu.is_some()
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

    fn op_bit(op: OpKind) -> u32 {
        1 << OpKind::ALL.iter().position(|o| *o == op).unwrap_or(0)
    }

    /// Whether the GPU has refused `op` (it is then never tried again).
    pub fn gpu_refused(&self, op: OpKind) -> bool {
        self.refused.load(Ordering::Relaxed) & Self::op_bit(op) != 0
    }

    /// What `run` would do with `job` now.
    pub fn decide(&self, job: &Job<'_>) -> Decision {
        let op = job.op();
        let (lengths, resident) = shape_of(job);
        let sides = Sides {
            cpu_threads: self.cpu.threads(),
            gpu: self.gpu.is_some() && !self.gpu_refused(op),
            cpu_queued_ns: self.cpu_queue.ns.load(Ordering::Relaxed) as f64,
            gpu_queued_ns: self.gpu_queue.ns.load(Ordering::Relaxed) as f64,
        };
        let shape = JobShape {
            op,
            lengths: &lengths,
            resident,
        };
        decide(&self.model, &shape, &sides)
    }

    /// Runs `job` by `plan` whatever the model says: for tests and
    /// benchmarks. A split with no GPU runs both parts on the CPU.
    pub fn run_plan(
        &self,
        job: &mut Job<'_>,
        plan: Plan,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let d = self.decide(job);
        self.execute(job, Decision { plan, ..d })
    }

    fn execute(&self, job: &mut Job<'_>, d: Decision) -> Result<Vec<SegmentResult>, BackendError> {
        let bytes = job.bytes();
        let (cpu_q, gpu_q) = self.queued();
        match d.plan {
            Plan::Cpu => {
                let _q = self
                    .cpu_queue
                    .enqueue(d.cpu_finish_ns - cpu_q.0 as f64, bytes);
                self.cpu.run(job)
            }
            Plan::Gpu => {
                let own = d.gpu_finish_ns.unwrap_or(0.0) - gpu_q.0 as f64;
                let _q = self.gpu_queue.enqueue(own, bytes);
                self.on_gpu(job)
            }
            Plan::Split(at) => {
                let finish = d.plan_finish_ns - SPLIT_OVERHEAD_NS;
                let _qc = self.cpu_queue.enqueue(finish - cpu_q.0 as f64, bytes / 2);
                let _qg = self.gpu_queue.enqueue(finish - gpu_q.0 as f64, bytes / 2);
                self.run_split(job, at)
            }
        }
    }

    /// Runs on the GPU; an op it does not implement runs on the CPU and is
    /// remembered, so the GPU is not asked again.
    fn on_gpu(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        let Some(gpu) = &self.gpu else {
            return self.cpu.run(job);
        };
        if self.gpu_refused(job.op()) {
            return self.cpu.run(job);
        }
        match gpu.run(job) {
            // Both are returned before any data is touched.
            Err(BackendError::Unsupported { .. } | BackendError::Unavailable { .. }) => {
                self.refused
                    .fetch_or(Self::op_bit(job.op()), Ordering::Relaxed);
                self.cpu.run(job)
            }
            other => other,
        }
    }

    fn run_split(
        &self,
        job: &mut Job<'_>,
        at: SplitPoint,
    ) -> Result<Vec<SegmentResult>, BackendError> {
        let (mut g, mut c) = split(job, at)?;
        let (gn, cn) = (g.len(), c.len());
        let (gr, cr) = std::thread::scope(|s| {
            let gpu_part = s.spawn(|| self.on_gpu(&mut g));
            let cr = self.cpu.run(&mut c);
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

/// Segment lengths and whether any segment is in device memory.
fn shape_of(job: &Job<'_>) -> (Vec<u64>, bool) {
    let dm = |d: &DataMut<'_>| (d.len() as u64, matches!(d, DataMut::Device(_)));
    let d = |d: &Data<'_>| (d.len() as u64, matches!(d, Data::Device(_)));
    let pairs: Vec<(u64, bool)> = match job {
        Job::Seal { segments, .. } => segments.iter().map(|s| dm(&s.data)).collect(),
        Job::Open { segments, .. } => segments.iter().map(|s| dm(&s.data)).collect(),
        Job::Ctr { segments, .. } => segments.iter().map(|s| dm(&s.data)).collect(),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => segments.iter().map(d).collect(),
        Job::RsaPrivate { segments, .. } => {
            segments.iter().map(|s| (s.len() as u64, false)).collect()
        }
    };
    let resident = pairs.iter().any(|p| p.1);
    (pairs.into_iter().map(|p| p.0).collect(), resident)
}

impl Backend for AutoBackend {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        if self.gpu.is_none() || job.is_empty() {
            return self.cpu.run(job);
        }
        let d = self.decide(job);
        self.execute(job, d)
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
