//! The choice, as pure functions of a cost model, a job's shape and the work
//! already queued: CPU, GPU, or a split with both finishing together.
//!
//! Every whole-job candidate (all CPU, all GPU, the GPU taking a share of
//! the bytes) is priced from the job's totals alone (bytes, segments,
//! largest segment), which costs the same for 1 segment as for 100 000;
//! only a split that wins is then placed on real segment boundaries (or
//! inside a segment, where the op allows), by one walk over the lengths,
//! and priced again exactly.

use super::model::{
    gpu_line_kind, gpu_line_ns, gpu_serial, gpu_stage_ns, CostModel, CpuCost, GpuLine, HostMemory,
    LinearCost, DIRECT_MIN,
};
use crate::cpu::{gcm_cut_applies, DEFAULT_SPLIT_BYTES, GCM_CUT_COST, GCM_CUT_PIECES};
use crate::job::{OpKind, MAX_SEGMENT_LEN};

/// Jobs below this many bytes are never split: a thread start and a second
/// fixed cost would eat the gain.
pub(crate) const MIN_SPLIT_BYTES: u64 = 1 << 20;
/// What a split costs beyond its two parts (starting the GPU thread).
pub(crate) const SPLIT_OVERHEAD_NS: f64 = 30_000.0;
/// A split must beat the better single backend by this fraction. The
/// model prices each side alone; run together on the H100 host they slowed
/// each other (host memory, cores) so that splits predicted 5-10% ahead ran
/// at 0.1-0.7x the better backend. Pageable and packed
/// jobs are no longer split at all; for page-locked pieces under
/// `LARGE_SPLIT_SEGMENT` the GPU side is still priced high (64 x 1 MiB
/// GCM: ~35 GB/s priced, 17.8 measured on the H100 host), so the margin stays.
pub(crate) const SPLIT_MARGIN: f64 = 0.25;

/// Average segment size from which a page-locked job's split needs only
/// `LARGE_SPLIT_MARGIN`: the shape `bench calibrate` measures the GPU's
/// large-job line on (4 x 16 MiB and 4 x 256 MiB).
pub(crate) const LARGE_SPLIT_SEGMENT: u64 = 16 << 20;

/// The margin for page-locked jobs of `LARGE_SPLIT_SEGMENT` segments and up.
/// Their GPU part is DMA'd straight from and back to the caller's memory
/// (no cores taken) and priced from a measured line. Both sides' prices are
/// optimistic where host memory is the limit (2-of-4-segment
/// GCM splits priced at 80-92 GB/s ran at 68-77; the CPU alone priced at
/// 62.6, measured 47-52), so the gain comes out about as predicted. Every
/// balanced split of 4 pinned 16 MiB-1 GiB segments ran at 1.21-1.86x the
/// better backend there (GCM and BLAKE3), while 0.25 kept 4
/// x 16 and 4 x 64 MiB seals, 1.21-1.34x when split, on the CPU.
pub(crate) const LARGE_SPLIT_MARGIN: f64 = 0.10;

/// The margin a split of the job `stats` describes must clear:
/// `LARGE_SPLIT_MARGIN` for page-locked jobs of large segments, else
/// `split_margin()`; `GVAULT_SPLIT_MARGIN` overrides both.
pub(crate) fn margin_for(stats: &JobStats) -> f64 {
    if let Some(m) = margin_override() {
        return m;
    }
    let large = stats.bytes >= LARGE_SPLIT_SEGMENT.saturating_mul(stats.segments.max(1) as u64);
    if stats.mem == HostMemory::Pinned && large {
        LARGE_SPLIT_MARGIN
    } else {
        SPLIT_MARGIN
    }
}

fn margin_override() -> Option<f64> {
    crate::tuning::tuning().split_margin
}

/// `SPLIT_MARGIN`, or `GVAULT_SPLIT_MARGIN` (0 to 0.9) for measurements of
/// where splits pay on a host. Read once.
#[cfg(test)]
fn split_margin() -> f64 {
    margin_override().unwrap_or(SPLIT_MARGIN)
}

/// Host data goes to the GPU only when it is predicted this much sooner
/// done than on the CPU: the GPU's end-to-end figures swing more from run
/// to run than the CPU's (the link, pinned staging, host memory traffic),
/// and a near tie lost there (H100: BLAKE3 64 KiB x 1024
/// pinned, GPU predicted 8% ahead, ran at 0.74x the CPU).
pub(crate) const GPU_MARGIN: f64 = 0.1;
/// Pageable host jobs are never split: the GPU part's staging copy runs on
/// the CPU's cores and memory bandwidth, next to the CPU part (H100,
/// BLAKE3 1 MiB x 64 pageable, a split predicted 34%
/// ahead ran at 0.65x the CPU alone; pinned splits of the same op ran at
/// 1.1-1.7x the better backend).
/// Segments are cut inside only at multiples of this (an AES block; two
/// blocks of the 64-bit ciphers), with the counter advanced to match.
pub(crate) const CUT_ALIGN: u64 = 16;
/// GPU shares of the bytes priced besides the balance point: a split's
/// finish time is not linear in the share (CPU parallelism is a step
/// function of the segments left), so the grid catches what the balance
/// point misses.
const SHARE_GRID: usize = 16;

/// What the decision needs to know about a job: totals, one pass to gather.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct JobStats {
    pub bytes: u64,
    pub segments: usize,
    /// Length of the longest segment.
    pub largest: u64,
    pub mem: HostMemory,
}

impl JobStats {
    pub fn of_lengths(lengths: &[u64], mem: HostMemory) -> JobStats {
        JobStats {
            bytes: lengths.iter().sum(),
            segments: lengths.len(),
            largest: lengths.iter().copied().max().unwrap_or(0),
            mem,
        }
    }
}

/// A job as the pure decision sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct JobShape<'a> {
    pub op: OpKind,
    /// Length of every segment, in order.
    pub lengths: &'a [u64],
    /// Where its data lives (device memory: only the GPU can read it).
    pub mem: HostMemory,
}

/// The two sides as they stand now.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sides {
    /// Threads the CPU side may use.
    pub cpu_threads: usize,
    /// Logical cores of the host: the GPU backend's staging copies run on
    /// the process-wide pool of this many threads.
    pub cores: usize,
    /// The GPU is present (or may be started) and has not refused this op.
    pub gpu: bool,
    /// Predicted nanoseconds of work already queued on each side.
    pub cpu_queued_ns: f64,
    pub gpu_queued_ns: f64,
}

/// Where a split cuts the job: the GPU takes segments `..segment` plus the
/// first `offset` bytes of `segment`; the CPU takes the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPoint {
    pub segment: usize,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Cpu,
    Gpu,
    Split(SplitPoint),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub plan: Plan,
    /// Predicted finish times (queued work included) of each single backend
    /// and of the plan chosen.
    pub cpu_finish_ns: f64,
    pub gpu_finish_ns: Option<f64>,
    pub plan_finish_ns: f64,
    /// Threads the CPU part of a split runs on (the CPU side's threads
    /// less those left to the GPU part's staging copies); for a whole job,
    /// the CPU side's threads.
    pub split_cpu_threads: usize,
}

/// Learned factors (observed ÷ predicted time, `auto/learn`) by which the
/// model's predictions of each side are scaled for one job; 1 where
/// nothing has been learned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Corrections {
    /// The whole job on the CPU, on the GPU.
    pub cpu: f64,
    pub gpu: f64,
    /// The CPU and GPU parts of a split: run together, they slow each
    /// other (host memory, cores) in ways whole jobs do not show.
    pub cpu_part: f64,
    pub gpu_part: f64,
}

impl Corrections {
    /// The model as it stands: every prediction multiplied by exactly 1,
    /// so decisions are the uncorrected ones bit for bit.
    pub(crate) const NONE: Corrections = Corrections {
        cpu: 1.0,
        gpu: 1.0,
        cpu_part: 1.0,
        gpu_part: 1.0,
    };
}

/// Ops whose segments the auto backend may cut inside: CTR modes, which
/// carry no state across blocks.
pub(crate) fn cuttable(op: OpKind) -> bool {
    matches!(op, OpKind::AesCtr | OpKind::TeaCtr | OpKind::BlowfishCtr)
}

/// CPU-thread nanoseconds per byte of a host staging copy (memcpy into or
/// out of a pinned slot).
const STAGE_NS_PER_BYTE: f64 = 0.1;

/// Host copies per byte the GPU part of a split costs the CPU cores: the
/// GPU backend stages pageable data and page-locked pieces under
/// `DIRECT_MIN` through pinned slots (in, and out again where the op
/// writes), with copies that run on the same cores as the CPU part. Larger
/// page-locked pieces are DMA'd straight from and back to the caller's
/// memory (`gpu/ctr.rs`, `gpu/stage.rs`), and device-resident data is not
/// copied at all: no copies. (Once in-place outputs of direct
/// pieces were priced as staged, so a pinned GCM split left 4-5 of 16
/// cores idle for copies that never ran.)
fn staging_copies(op: OpKind, line: GpuLine) -> f64 {
    if matches!(line, GpuLine::Pinned | GpuLine::Kernel) {
        return 0.0;
    }
    let writes = !matches!(
        op,
        OpKind::Sha256
            | OpKind::Md5
            | OpKind::Crc32
            | OpKind::Crc32c
            | OpKind::Blake3
            | OpKind::Blake3Keyed
            | OpKind::Chunk
            | OpKind::ChunkDigest
    );
    1.0 + if writes { 1.0 } else { 0.0 }
}

/// Whether the CPU backend cuts large segments of `op` across its threads
/// (CTR, BLAKE3 and CRC jobs).
fn cpu_cuts_inside(op: OpKind, threads: usize) -> bool {
    threads > 1
        && matches!(
            op,
            OpKind::AesCtr
                | OpKind::TeaCtr
                | OpKind::BlowfishCtr
                | OpKind::Blake3
                | OpKind::Blake3Keyed
                | OpKind::Crc32
                | OpKind::Crc32c
        )
}

/// CPU time of `segments` segments, `bytes` in all, the longest `largest`.
pub(super) fn cpu_time(
    c: &OpCosts,
    bytes: u64,
    segments: usize,
    largest: u64,
    threads: usize,
) -> f64 {
    if segments == 0 {
        return 0.0;
    }
    let op = c.op;
    let piece = DEFAULT_SPLIT_BYTES as u64;
    let gcm = matches!(op, OpKind::AesGcmSeal | OpKind::AesGcmOpen);
    if gcm && gcm_cut_applies(segments, largest, threads, piece * GCM_CUT_PIECES as u64) {
        // The CPU backend cuts these segments (see `gcm_cut_applies`).
        let units = segments + (bytes / piece) as usize;
        return c.cpu.map_or(0.0, |m| {
            m.predict_cut_ns(
                bytes,
                segments,
                units,
                largest.min(piece),
                threads,
                m.cut_cost.unwrap_or(GCM_CUT_COST),
            )
        });
    }
    let (units, largest_unit) = if cpu_cuts_inside(op, threads) {
        // Each segment is at most ceil(len / piece) pieces: at most this many.
        (segments + (bytes / piece) as usize, largest.min(piece))
    } else {
        (segments, largest)
    };
    c.cpu.map_or(0.0, |m| {
        m.predict_ns(bytes, segments, units, largest_unit, threads)
    })
}

/// Largest job (bytes) that `gvault bench calibrate` times (16 MiB x 2):
/// beyond it the pinned end-to-end line is extrapolated.
pub(crate) const CALIBRATED_JOB_BYTES: u64 = 32 << 20;

/// Largest pageable job the stage lines are fitted on (64 MiB of small
/// pieces): beyond it the measured large pageable line prices the bytes.
pub(crate) const CALIBRATED_PAGEABLE_BYTES: u64 = 64 << 20;

/// GPU time of `segments` segments, `bytes` in all, the longest `largest`.
pub(super) fn gpu_time(
    c: &OpCosts,
    bytes: u64,
    segments: usize,
    largest: u64,
    mem: HostMemory,
) -> Option<f64> {
    if segments == 0 {
        return Some(0.0);
    }
    let kind = gpu_line_kind(mem, bytes, segments);
    let line = c.gpu(kind)?;
    let stages = |bytes| {
        gpu_line_ns(
            c.op,
            kind,
            &line,
            c.thread_ns_per_byte,
            bytes,
            segments,
            largest,
        )
    };
    // A measured line of large jobs replaces the byte (and, for packed
    // ops, the summed segment) stage; the segment and thread stages alone
    // still bound it: the lines were measured on other segment counts.
    let other_stages = || {
        let no_bytes = LinearCost {
            ns_per_byte: 0.0,
            ..line
        };
        gpu_stage_ns(
            &no_bytes,
            c.thread_ns_per_byte,
            bytes,
            segments,
            largest,
            false,
        )
    };
    if kind == GpuLine::Pageable && bytes > CALIBRATED_PAGEABLE_BYTES {
        if let Some(large) = c.pageable_large {
            // A larger job never costs less than the largest calibrated one.
            let floor = stages(CALIBRATED_PAGEABLE_BYTES);
            return Some(
                large
                    .predict_ns(bytes, segments)
                    .max(other_stages())
                    .max(floor),
            );
        }
    }
    if kind != GpuLine::Pinned || bytes <= CALIBRATED_JOB_BYTES {
        return Some(stages(bytes));
    }
    // Page-locked copies overlap the kernels once the pipeline is full,
    // which the calibrated sizes do not reach (H100: GCM 23 GB/s at 32
    // MiB, 47 GB/s at 4 GiB): past them, the slower of link and kernel
    // sets the rate. Only DMA'd pieces reach the link's rate.
    let plateau = c
        .pinned_plateau_ns_per_byte
        .map(|rate| stages(CALIBRATED_JOB_BYTES) + rate * (bytes - CALIBRATED_JOB_BYTES) as f64);
    let Some(large) = c.pinned_large else {
        return Some(plateau.unwrap_or_else(|| stages(bytes)));
    };
    // The plateau (or, without one, the largest calibrated job's price)
    // stays a floor: no pipeline beats the link, and a larger job never
    // costs less than a calibrated one.
    let floor = plateau.unwrap_or_else(|| stages(CALIBRATED_JOB_BYTES));
    Some(
        large
            .predict_ns(bytes, segments)
            .max(floor)
            .max(other_stages()),
    )
}

/// One op's costs, looked up once (the model keys ops by name).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpCosts {
    pub(super) op: OpKind,
    pub(super) cpu: Option<CpuCost>,
    /// Indexed by [`line_index`].
    gpu: [Option<LinearCost>; 4],
    thread_ns_per_byte: Option<f64>,
    /// Per-byte rate of large pinned jobs, where faster than the fitted one.
    pinned_plateau_ns_per_byte: Option<f64>,
    /// The measured line of large pinned jobs (`GpuCost::pinned_large`).
    pinned_large: Option<LinearCost>,
    /// The measured line of large pageable jobs (`GpuCost::pageable_large`).
    pageable_large: Option<LinearCost>,
    /// RSA: the message length these costs are sized for (`rsa_sized`);
    /// 0 while they are per RSA-2048 operation, as the model holds them.
    rsa_len: u64,
}

fn line_index(line: GpuLine) -> usize {
    match line {
        GpuLine::Kernel => 0,
        GpuLine::Pinned => 1,
        GpuLine::PinnedPacked => 2,
        GpuLine::Pageable => 3,
    }
}

impl OpCosts {
    pub(crate) fn of(model: &CostModel, op: OpKind) -> OpCosts {
        let line = |mem| model.gpu_cost(op, mem);
        let gpu = GpuLine::ALL.map(|kind| model.gpu_line(op, kind));
        let plateau = match (
            model.op(op).and_then(|m| m.gpu),
            model.link,
            line(HostMemory::Pinned),
        ) {
            (Some(g), Some(link), Some(pinned)) if !gpu_serial(op) => {
                let rate = g.kernel.ns_per_byte.max(link.ns_per_byte);
                (rate < pinned.ns_per_byte).then_some(rate)
            }
            _ => None,
        };
        let gpu_cost = model.op(op).and_then(|m| m.gpu);
        OpCosts {
            pinned_plateau_ns_per_byte: plateau,
            pinned_large: gpu_cost.and_then(|g| g.pinned_large),
            pageable_large: gpu_cost.and_then(|g| g.pageable_large),
            op,
            cpu: model.op(op).map(|m| m.cpu),
            gpu,
            // Only where one thread runs a whole segment (or an RSA
            // message): files calibrated before the CRCs were cut into
            // pieces carry a thread rate for them too.
            thread_ns_per_byte: gpu_cost
                .and_then(|g| g.thread_ns_per_byte)
                .filter(|_| gpu_serial(op) || op == OpKind::RsaPrivate),
            rsa_len: 0,
        }
    }

    /// Every op of `model`, in [`OpKind::ALL`] order.
    pub(crate) fn all(model: &CostModel) -> Vec<OpCosts> {
        OpKind::ALL
            .iter()
            .map(|&op| OpCosts::of(model, op))
            .collect()
    }

    fn gpu(&self, line: GpuLine) -> Option<LinearCost> {
        self.gpu[line_index(line)]
    }

    /// RSA's costs for messages of `len` bytes. The model holds them per
    /// RSA-2048 operation (256-byte messages), the size calibration
    /// measures; other sizes are priced by exponents fitted to the H200
    /// host (bench/JOURNAL.md 2026-11-27): one message's time on a CPU core
    /// and a message's share of a large GPU batch (host-bound: blinding and
    /// the public-exponent check) grow as (len / 256)^2.5 and ^2, and the
    /// GPU's floor, one exponentiation on one GPU thread, whatever the
    /// batch, as ^3 (RSA-1024 / 2048 / 4096: CPU 660 us / 1.8 ms / 10.7 ms,
    /// GPU floor 2.9 / 19.2 / 140 ms).
    fn rsa_sized(&self, len: u64) -> OpCosts {
        if self.op != OpKind::RsaPrivate || len == 0 || self.rsa_len != 0 {
            return *self;
        }
        let x = len as f64 / 256.0;
        let mut c = *self;
        c.rsa_len = len;
        if let Some(cpu) = c.cpu.as_mut() {
            cpu.one_thread.ns_per_segment *= x.powf(2.5);
        }
        for line in c.gpu.iter_mut().flatten() {
            line.ns_per_segment *= x * x;
        }
        // The floor is priced per byte of the longest message:
        // t * len * x^2 = (t * 256) * x^3.
        c.thread_ns_per_byte = c.thread_ns_per_byte.map(|t| t * x * x);
        c
    }
}

/// One part of a split: what the GPU takes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GpuPart {
    pub(crate) bytes: u64,
    pub(crate) segments: usize,
}

/// A split priced: its finish and the threads its CPU part runs on.
#[derive(Clone, Copy, Debug)]
pub(super) struct SplitPrice {
    pub(super) finish_ns: f64,
    pub(super) cpu_threads: usize,
}

/// Threads for a split's CPU part, and the staging work (CPU-ns) left over
/// for its cores. The GPU part's staging copies run on the process-wide
/// pool, whose workers pick them up only once idle: a CPU part on every
/// core starved them (on the H100 host, splits ran at 0.1-0.7x the better
/// backend). So the CPU part leaves the copies the cores they keep busy
/// while the GPU part runs (at least one, for the thread driving the GPU),
/// on a pool of its own; copies beyond that share the CPU part's cores.
pub(super) fn split_threads(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    gpu: GpuPart,
    g: f64,
) -> (usize, f64) {
    let line = gpu_line_kind(stats.mem, gpu.bytes, gpu.segments);
    let staging = gpu.bytes as f64 * staging_copies(c.op, line) * STAGE_NS_PER_BYTE;
    let need = if g > 0.0 && g.is_finite() {
        ((staging / g).ceil() as usize).max(1)
    } else {
        1
    };
    let free = sides.cores.saturating_sub(sides.cpu_threads);
    let threads = sides.cpu_threads.max(1);
    let reserve = need.saturating_sub(free).min(threads - 1);
    let absorbed = (free + reserve) as f64 * if g.is_finite() { g } else { 0.0 };
    (threads - reserve, (staging - absorbed).max(0.0))
}

/// A split's parts priced apart, each scaled by its learned factor.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SplitParts {
    /// The GPU part's time.
    pub gpu_ns: f64,
    /// The CPU part's time, and the GPU part's staging copies that spill
    /// onto its cores.
    pub cpu_ns: f64,
    pub spill_ns: f64,
    /// Threads the CPU part runs on.
    pub cpu_threads: usize,
}

/// The two parts of a split giving the GPU `gpu` (and, `cut_inside`, the
/// CPU the rest of a segment cut inside). The CPU part's longest segment
/// is taken to be the job's (it may be less).
fn split_parts(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    gpu: GpuPart,
    cut_inside: bool,
    fix: &Corrections,
) -> SplitParts {
    let cpu_bytes = stats.bytes - gpu.bytes.min(stats.bytes);
    let cpu_segments = stats.segments - gpu.segments.min(stats.segments) + usize::from(cut_inside);
    let largest = stats.largest.min(gpu.bytes);
    let g = gpu_time(c, gpu.bytes, gpu.segments, largest, stats.mem).unwrap_or(f64::INFINITY)
        * fix.gpu_part;
    let (threads, spill) = split_threads(c, stats, sides, gpu, g);
    let cpu = cpu_time(
        c,
        cpu_bytes,
        cpu_segments,
        stats.largest.min(cpu_bytes),
        threads,
    ) * fix.cpu_part;
    let spill = c.cpu.map_or(0.0, |m| spill / m.speedup_at(threads)) * fix.cpu_part;
    SplitParts {
        gpu_ns: g,
        cpu_ns: cpu,
        spill_ns: spill,
        cpu_threads: threads,
    }
}

/// As the decision priced them, the parts of a split that gave the GPU
/// `gpu`: what the auto backend compares each part's time with.
pub(crate) fn split_part_times(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    gpu: GpuPart,
    cut_inside: bool,
    fix: &Corrections,
) -> SplitParts {
    split_parts(
        &c.rsa_sized(stats.largest),
        stats,
        sides,
        gpu,
        cut_inside,
        fix,
    )
}

/// Predicted finish of a split: both parts run at once.
fn split_finish(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    gpu: GpuPart,
    cut_inside: bool,
    fix: &Corrections,
) -> SplitPrice {
    let p = split_parts(c, stats, sides, gpu, cut_inside, fix);
    SplitPrice {
        finish_ns: (sides.gpu_queued_ns + p.gpu_ns)
            .max(sides.cpu_queued_ns + p.cpu_ns + p.spill_ns)
            + SPLIT_OVERHEAD_NS,
        cpu_threads: p.cpu_threads,
    }
}

/// Whether the GPU would pack the job's pieces (under `DIRECT_MIN` on
/// average) through its pinned slots. Such jobs are never split: packing
/// is bound by host memory bandwidth on every core (H100 host:
/// ~50 GB/s on all 16 cores, bench/JOURNAL.md), so a GPU part of small
/// pieces takes the cores its CPU part would run on. Priced with a copy at
/// one core's speed, BLAKE3 splits of 512 B to 64 KiB pieces came out
/// 25-40% ahead of the CPU; such splits ran at 0.64x the best (512 B
/// pinned) and 0.1-0.7x in earlier runs.
fn packed(stats: &JobStats) -> bool {
    stats.mem != HostMemory::Device && stats.bytes < DIRECT_MIN * stats.segments as u64
}

/// Outcome of pricing a job from its totals.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Sketch {
    Cpu,
    Gpu,
    /// A split giving the GPU about this many bytes.
    Split {
        gpu_bytes: u64,
        finish_ns: f64,
    },
}

/// The single backends' finish times and the best whole-job candidate,
/// priced from the totals alone: O(1) in the number of segments. The
/// model's own (the auto backend sketches with its corrections).
#[cfg(test)]
pub(crate) fn sketch(c: &OpCosts, stats: &JobStats, sides: &Sides) -> (Sketch, Decision) {
    sketch_corrected(c, stats, sides, &Corrections::NONE)
}

/// As [`sketch`], each side's predictions scaled by `fix`.
pub(crate) fn sketch_corrected(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    fix: &Corrections,
) -> (Sketch, Decision) {
    let sized = c.rsa_sized(stats.largest);
    let c = &sized;
    let op = c.op;
    let cpu_finish = sides.cpu_queued_ns
        + cpu_time(
            c,
            stats.bytes,
            stats.segments,
            stats.largest,
            sides.cpu_threads,
        ) * fix.cpu;
    let gpu_finish = if sides.gpu && stats.segments > 0 {
        gpu_time(c, stats.bytes, stats.segments, stats.largest, stats.mem)
            .map(|t| sides.gpu_queued_ns + t * fix.gpu)
    } else {
        None
    };
    let single = |plan, finish| Decision {
        plan,
        cpu_finish_ns: cpu_finish,
        gpu_finish_ns: gpu_finish,
        plan_finish_ns: finish,
        split_cpu_threads: sides.cpu_threads,
    };
    let Some(gpu_finish) = gpu_finish else {
        return (Sketch::Cpu, single(Plan::Cpu, cpu_finish));
    };
    if stats.mem == HostMemory::Device {
        // Only the GPU can read device memory.
        return (Sketch::Gpu, single(Plan::Gpu, gpu_finish));
    }
    let best = if gpu_finish < cpu_finish * (1.0 - GPU_MARGIN) {
        (Sketch::Gpu, single(Plan::Gpu, gpu_finish))
    } else {
        (Sketch::Cpu, single(Plan::Cpu, cpu_finish))
    };
    if stats.bytes < MIN_SPLIT_BYTES
        || (stats.segments < 2 && !cuttable(op))
        || gpu_serial(op)
        // Checksums: the CPU runs them at 55-160 GB/s on 16 cores, past
        // what the link gives a GPU part; a split could only slow them.
        || matches!(op, OpKind::Crc32 | OpKind::Crc32c)
        || packed(stats)
        || stats.mem == HostMemory::Pageable
    {
        return best;
    }
    // Neither side runs a share of the job in less than that share of the
    // whole job's time, so no split finishes before the two sides' times
    // combined in parallel: where that does not beat the better backend by
    // the margin, pricing the shares (~2 µs) is skipped. Each side is
    // priced here with its factor for split parts in place of the whole
    // job's.
    let (cpu_alone, gpu_alone) = (
        (cpu_finish - sides.cpu_queued_ns) * (fix.cpu_part / fix.cpu),
        (gpu_finish - sides.gpu_queued_ns) * (fix.gpu_part / fix.gpu),
    );
    let ideal = cpu_alone * gpu_alone / (cpu_alone + gpu_alone) + SPLIT_OVERHEAD_NS;
    if ideal >= best.1.plan_finish_ns * (1.0 - margin_for(stats)) {
        return best;
    }
    // Segments taken to be of even size: a share f of the bytes is about
    // f of the segments. The walk in `place_split` corrects this.
    // Uncuttable jobs are split on a segment boundary: the bytes are then
    // those of whole segments, so that a share's bytes and segments agree
    // (priced apart, 38.2 MB on 146 of 333 x 256 KiB segments cost 23% more
    // than the 145 segments' 38.0 MB, and the grid missed the best split).
    let part = |f: f64| {
        if cuttable(op) {
            let segments = ((f * stats.segments as f64).ceil() as usize).max(1);
            GpuPart {
                bytes: (f * stats.bytes as f64) as u64,
                segments,
            }
        } else {
            let segments =
                ((f * stats.segments as f64).round() as usize).clamp(1, stats.segments - 1);
            GpuPart {
                bytes: (stats.bytes as u128 * segments as u128 / stats.segments as u128) as u64,
                segments,
            }
        }
    };
    let price = |f: f64| split_finish(c, stats, sides, part(f), cuttable(op), fix).finish_ns;
    let mut shares: Vec<f64> = (1..SHARE_GRID)
        .map(|k| k as f64 / SHARE_GRID as f64)
        .collect();
    shares.push(balance_point(c, stats, sides, cpu_finish, gpu_finish, fix));
    let (f, finish) = shares
        .into_iter()
        .filter(|f| *f > 0.0 && *f < 1.0)
        .map(|f| (f, price(f)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0.0, f64::INFINITY));
    if finish < best.1.plan_finish_ns * (1.0 - margin_for(stats)) {
        let gpu_bytes = (f * stats.bytes as f64) as u64;
        (
            Sketch::Split {
                gpu_bytes,
                finish_ns: finish,
            },
            best.1,
        )
    } else {
        best
    }
}

/// The GPU's share of the bytes at which both sides would finish together
/// if each were linear in its share:
///   Qg + Fg + f·Vg = Qc + Fc + (1 − f)·Vc,
/// each side priced with its factor for split parts (the finishes given
/// carry the whole job's).
fn balance_point(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    cpu_finish: f64,
    gpu_finish: f64,
    fix: &Corrections,
) -> f64 {
    let fixed_g = gpu_time(c, 0, 1, 0, stats.mem).unwrap_or(0.0) * fix.gpu_part;
    let fixed_c = cpu_time(c, 0, 1, 0, sides.cpu_threads) * fix.cpu_part;
    let var_g = ((gpu_finish - sides.gpu_queued_ns) * (fix.gpu_part / fix.gpu) - fixed_g).max(0.0);
    let var_c = ((cpu_finish - sides.cpu_queued_ns) * (fix.cpu_part / fix.cpu) - fixed_c).max(0.0);
    if var_g + var_c <= 0.0 {
        return 0.5;
    }
    ((sides.cpu_queued_ns + fixed_c + var_c - sides.gpu_queued_ns - fixed_g) / (var_g + var_c))
        .clamp(0.0, 1.0)
}

/// Real cut points around byte `target` of the concatenated segments: the
/// boundaries before and after the segment holding it, and a block-aligned
/// cut inside it where the op allows; each with what the GPU part holds.
fn cut_points(
    op: OpKind,
    lengths: impl Iterator<Item = u64>,
    segments: usize,
    target: u64,
) -> Vec<(SplitPoint, GpuPart)> {
    let mut out = Vec::new();
    let mut before = 0u64;
    for (i, len) in lengths.enumerate() {
        if target < before + len || i + 1 == segments {
            let at = |segment, offset, bytes, segs| {
                (
                    SplitPoint { segment, offset },
                    GpuPart {
                        bytes,
                        segments: segs,
                    },
                )
            };
            out.push(at(i, 0, before, i));
            out.push(at(i + 1, 0, before + len, i + 1));
            let inside = (target.saturating_sub(before) / CUT_ALIGN) * CUT_ALIGN;
            if cuttable(op) && inside > 0 && inside < len && len <= MAX_SEGMENT_LEN {
                out.push(at(i, inside, before + inside, i + 1));
            }
            break;
        }
        before += len;
    }
    // A split gives both sides something.
    out.retain(|(p, _)| (p.segment > 0 || p.offset > 0) && p.segment < segments);
    out
}

/// Chooses CPU, GPU or a split on segment boundaries (or inside CTR
/// segments) for one job, by predicted finish time. `lengths` is walked
/// only when a split is worth placing.
pub(crate) fn decide_stats<I: Iterator<Item = u64>>(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    lengths: impl FnOnce() -> I,
) -> Decision {
    decide_corrected(c, stats, sides, &Corrections::NONE, lengths)
}

/// As [`decide_stats`], each side's predictions (whole jobs and split
/// parts, so the split point too) scaled by `fix`.
pub(crate) fn decide_corrected<I: Iterator<Item = u64>>(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    fix: &Corrections,
    lengths: impl FnOnce() -> I,
) -> Decision {
    let sized = c.rsa_sized(stats.largest);
    let c = &sized;
    let op = c.op;
    let (sketch, best) = sketch_corrected(c, stats, sides, fix);
    let gpu_bytes = match sketch {
        Sketch::Cpu | Sketch::Gpu => return best,
        Sketch::Split { gpu_bytes, .. } => gpu_bytes,
    };
    let split = cut_points(op, lengths(), stats.segments, gpu_bytes)
        .into_iter()
        .map(|(p, g)| (p, split_finish(c, stats, sides, g, p.offset > 0, fix)))
        .min_by(|a, b| a.1.finish_ns.total_cmp(&b.1.finish_ns));
    match split {
        Some((p, price)) if price.finish_ns < best.plan_finish_ns * (1.0 - margin_for(stats)) => {
            Decision {
                plan: Plan::Split(p),
                plan_finish_ns: price.finish_ns,
                split_cpu_threads: price.cpu_threads,
                ..best
            }
        }
        _ => best,
    }
}

/// Chooses CPU, GPU or a split for one job, by predicted finish time.
pub(crate) fn decide(model: &CostModel, shape: &JobShape<'_>, sides: &Sides) -> Decision {
    let stats = JobStats::of_lengths(shape.lengths, shape.mem);
    decide_stats(&OpCosts::of(model, shape.op), &stats, sides, || {
        shape.lengths.iter().copied()
    })
}

/// Crossing point of CPU and GPU for one op, jobs of `segments` segments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Crossover {
    NoGpu,
    GpuNeverFaster,
    GpuAlwaysFaster,
    /// The GPU is faster from this segment size up.
    At(u64),
    /// RSA: the GPU is faster from this many messages of `RSA_SHOWN_LEN`
    /// bytes up (RSA is priced by messages, not bytes).
    AtMessages(u64),
}

/// The key size RSA cross-overs are reported for: 2048 bits.
pub(crate) const RSA_SHOWN_LEN: u64 = 256;

/// Smallest segment size (512 B to 1 GiB) at which the GPU's predicted
/// time beats the CPU's, for idle backends and data in `mem`.
pub(crate) fn crossover(
    model: &CostModel,
    op: OpKind,
    segments: usize,
    cpu_threads: usize,
    mem: HostMemory,
) -> Crossover {
    let c = &OpCosts::of(model, op);
    if c.gpu(gpu_line_kind(mem, u64::MAX, 1)).is_none() {
        return Crossover::NoGpu;
    }
    if op == OpKind::RsaPrivate {
        return rsa_crossover(c, cpu_threads, mem);
    }
    let n = segments.max(1);
    let gpu_wins = |size: u64| {
        let cpu = cpu_time(c, size * n as u64, n, size, cpu_threads);
        gpu_time(c, size * n as u64, n, size, mem).is_some_and(|g| g < cpu)
    };
    let (lo, hi) = (512u64, 1u64 << 30);
    if gpu_wins(lo) {
        return Crossover::GpuAlwaysFaster;
    }
    if !gpu_wins(hi) {
        return Crossover::GpuNeverFaster;
    }
    // Bisection: the GPU's lead grows with the size (the line switches
    // once, to DMA'd pieces, at `DIRECT_MIN`), so it crosses about once.
    let (mut lo, mut hi) = (lo, hi);
    while hi - lo > 16 {
        let mid = lo + (hi - lo) / 2;
        if gpu_wins(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Crossover::At(hi)
}

/// Smallest batch of 2048-bit messages (1 to 2^24) the GPU finishes first.
fn rsa_crossover(c: &OpCosts, cpu_threads: usize, mem: HostMemory) -> Crossover {
    let len = RSA_SHOWN_LEN;
    let c = &c.rsa_sized(len);
    let gpu_wins = |n: u64| {
        let cpu = cpu_time(c, n * len, n as usize, len, cpu_threads);
        gpu_time(c, n * len, n as usize, len, mem).is_some_and(|g| g < cpu)
    };
    let (mut lo, mut hi) = (1u64, 1u64 << 24);
    if gpu_wins(lo) {
        return Crossover::GpuAlwaysFaster;
    }
    if !gpu_wins(hi) {
        return Crossover::GpuNeverFaster;
    }
    // The GPU's floor is one message's time whatever the batch, and the
    // CPU's time grows with it: they cross once.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if gpu_wins(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Crossover::AtMessages(hi)
}

#[cfg(test)]
mod tests;
