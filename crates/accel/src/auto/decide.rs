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
/// at 0.1-0.7x the better backend (sessions 3 and 4). Pageable and packed
/// jobs are no longer split at all; for page-locked pieces under
/// `LARGE_SPLIT_SEGMENT` the GPU side is still priced high (64 x 1 MiB
/// GCM: ~35 GB/s priced, 17.8 measured in session 9), so the margin stays.
pub(crate) const SPLIT_MARGIN: f64 = 0.25;

/// Average segment size from which a page-locked job's split needs only
/// `LARGE_SPLIT_MARGIN`: the shape `bench calibrate` measures the GPU's
/// large-job line on (4 x 16 MiB and 4 x 256 MiB).
pub(crate) const LARGE_SPLIT_SEGMENT: u64 = 16 << 20;

/// The margin for page-locked jobs of `LARGE_SPLIT_SEGMENT` segments and up.
/// Their GPU part is DMA'd straight from and back to the caller's memory
/// (no cores taken) and priced from a measured line. Both sides' prices are
/// optimistic where host memory is the limit (session 9: 2-of-4-segment
/// GCM splits priced at 80-92 GB/s ran at 68-77; the CPU alone priced at
/// 62.6, measured 47-52), so the gain comes out about as predicted. Every
/// balanced split of 4 pinned 16 MiB-1 GiB segments ran at 1.21-1.86x the
/// better backend there (GCM and BLAKE3, calls 2 and 5), while 0.25 kept 4
/// x 16 and 4 x 64 MiB seals, 1.21-1.34x when split, on the CPU (call 5).
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
    static MARGIN: std::sync::OnceLock<Option<f64>> = std::sync::OnceLock::new();
    *MARGIN.get_or_init(|| {
        std::env::var("GVAULT_SPLIT_MARGIN")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|m| (0.0..=0.9).contains(m))
    })
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
/// and a near tie lost there (H100, session 6 call 5: BLAKE3 64 KiB x 1024
/// pinned, GPU predicted 8% ahead, ran at 0.74x the CPU).
pub(crate) const GPU_MARGIN: f64 = 0.1;
/// Pageable host jobs are never split: the GPU part's staging copy runs on
/// the CPU's cores and memory bandwidth, next to the CPU part (H100,
/// session 6 call 5: BLAKE3 1 MiB x 64 pageable, a split predicted 34%
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
/// copied at all: no copies. (Until session 9 in-place outputs of direct
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
    // The measured line replaces the byte stage. The plateau (or, without
    // one, the largest calibrated job's price) stays a floor: no pipeline
    // beats the link, and a larger job never costs less than a calibrated
    // one. The segment and thread stages still bound it: the line was
    // measured on few segments.
    let floor = plateau.unwrap_or_else(|| stages(CALIBRATED_JOB_BYTES));
    let other_stages = gpu_stage_ns(
        &LinearCost {
            ns_per_byte: 0.0,
            ..line
        },
        c.thread_ns_per_byte,
        bytes,
        segments,
        largest,
        false,
    );
    Some(
        large
            .predict_ns(bytes, segments)
            .max(floor)
            .max(other_stages),
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
            op,
            cpu: model.op(op).map(|m| m.cpu),
            gpu,
            thread_ns_per_byte: gpu_cost.and_then(|g| g.thread_ns_per_byte),
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
}

/// One part of a split: what the GPU takes.
#[derive(Clone, Copy, Debug)]
pub(super) struct GpuPart {
    pub(super) bytes: u64,
    pub(super) segments: usize,
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

/// Predicted finish of a split: both parts run at once. The CPU part's
/// longest segment is taken to be the job's (it may be less).
fn split_finish(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    gpu: GpuPart,
    cut_inside: bool,
) -> SplitPrice {
    let cpu_bytes = stats.bytes - gpu.bytes.min(stats.bytes);
    let cpu_segments = stats.segments - gpu.segments.min(stats.segments) + usize::from(cut_inside);
    let largest = stats.largest.min(gpu.bytes);
    let g = gpu_time(c, gpu.bytes, gpu.segments, largest, stats.mem).unwrap_or(f64::INFINITY);
    let (threads, spill) = split_threads(c, stats, sides, gpu, g);
    let cpu = cpu_time(
        c,
        cpu_bytes,
        cpu_segments,
        stats.largest.min(cpu_bytes),
        threads,
    );
    let spill = c.cpu.map_or(0.0, |m| spill / m.speedup_at(threads));
    SplitPrice {
        finish_ns: (sides.gpu_queued_ns + g).max(sides.cpu_queued_ns + cpu + spill)
            + SPLIT_OVERHEAD_NS,
        cpu_threads: threads,
    }
}

/// Whether the GPU would pack the job's pieces (under `DIRECT_MIN` on
/// average) through its pinned slots. Such jobs are never split: packing
/// is bound by host memory bandwidth on every core (H100 host, session 5:
/// ~50 GB/s on all 16 cores, bench/JOURNAL.md), so a GPU part of small
/// pieces takes the cores its CPU part would run on. Priced with a copy at
/// one core's speed, BLAKE3 splits of 512 B to 64 KiB pieces came out
/// 25-40% ahead of the CPU; such splits ran at 0.64x the best (512 B
/// pinned, session 5) and 0.1-0.7x in sessions 3-4.
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
/// priced from the totals alone: O(1) in the number of segments.
pub(crate) fn sketch(c: &OpCosts, stats: &JobStats, sides: &Sides) -> (Sketch, Decision) {
    let op = c.op;
    let cpu_finish = sides.cpu_queued_ns
        + cpu_time(
            c,
            stats.bytes,
            stats.segments,
            stats.largest,
            sides.cpu_threads,
        );
    let gpu_finish = if sides.gpu && stats.segments > 0 {
        gpu_time(c, stats.bytes, stats.segments, stats.largest, stats.mem)
            .map(|t| sides.gpu_queued_ns + t)
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
        || packed(stats)
        || stats.mem == HostMemory::Pageable
    {
        return best;
    }
    // Neither side runs a share of the job in less than that share of the
    // whole job's time, so no split finishes before the two sides' times
    // combined in parallel: where that does not beat the better backend by
    // the margin, pricing the shares (~2 µs) is skipped.
    let (cpu_alone, gpu_alone) = (
        cpu_finish - sides.cpu_queued_ns,
        gpu_finish - sides.gpu_queued_ns,
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
    let price = |f: f64| split_finish(c, stats, sides, part(f), cuttable(op)).finish_ns;
    let mut shares: Vec<f64> = (1..SHARE_GRID)
        .map(|k| k as f64 / SHARE_GRID as f64)
        .collect();
    shares.push(balance_point(c, stats, sides, cpu_finish, gpu_finish));
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
///   Qg + Fg + f·Vg = Qc + Fc + (1 − f)·Vc.
fn balance_point(
    c: &OpCosts,
    stats: &JobStats,
    sides: &Sides,
    cpu_finish: f64,
    gpu_finish: f64,
) -> f64 {
    let fixed_g = gpu_time(c, 0, 1, 0, stats.mem).unwrap_or(0.0);
    let fixed_c = cpu_time(c, 0, 1, 0, sides.cpu_threads);
    let var_g = (gpu_finish - sides.gpu_queued_ns - fixed_g).max(0.0);
    let var_c = (cpu_finish - sides.cpu_queued_ns - fixed_c).max(0.0);
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
    let op = c.op;
    let (sketch, best) = sketch(c, stats, sides);
    let gpu_bytes = match sketch {
        Sketch::Cpu | Sketch::Gpu => return best,
        Sketch::Split { gpu_bytes, .. } => gpu_bytes,
    };
    let split = cut_points(op, lengths(), stats.segments, gpu_bytes)
        .into_iter()
        .map(|(p, g)| (p, split_finish(c, stats, sides, g, p.offset > 0)))
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
}

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

#[cfg(test)]
mod tests {
    use super::super::model::{CpuCost, GpuCost, Identity, LinearCost, OpModel};
    use super::*;

    /// CPU: 1 GB/s a core, `threads` cores at full speed-up, 2 µs to start;
    /// GPU: 20 µs fixed, `gpu_gbps` from host memory (pinned and pageable
    /// alike), 100 GB/s resident.
    fn model_with(threads: usize, cpu_gbps: f64, pinned: f64, pageable: f64) -> CostModel {
        let host = |gbps: f64| LinearCost {
            fixed_ns: 20_000.0,
            ns_per_byte: 1.0 / gbps,
            ns_per_segment: 10.0,
        };
        let ops = OpKind::ALL
            .iter()
            .map(|op| {
                let m = OpModel {
                    cpu: CpuCost {
                        one_thread: LinearCost {
                            fixed_ns: 2_000.0,
                            ns_per_byte: 1.0 / cpu_gbps,
                            ns_per_segment: 100.0,
                        },
                        threads,
                        speedup: threads as f64,
                        cut_cost: None,
                        small_speedup: None,
                    },
                    gpu: Some(GpuCost {
                        kernel: host(100.0),
                        pinned: Some(host(pinned)),
                        pageable: Some(host(pageable)),
                        pinned_packed: None,
                        thread_ns_per_byte: None,
                        pinned_large: None,
                    }),
                };
                (op.name().to_string(), m)
            })
            .collect();
        CostModel {
            format_version: super::super::model::FORMAT_VERSION,
            identity: Identity::default(),
            link: None,
            ops,
        }
    }

    fn model(gpu_gbps: f64) -> CostModel {
        model_with(8, 1.0, gpu_gbps, gpu_gbps)
    }

    fn idle(cpu_threads: usize) -> Sides {
        Sides {
            cpu_threads,
            cores: cpu_threads,
            gpu: true,
            cpu_queued_ns: 0.0,
            gpu_queued_ns: 0.0,
        }
    }

    /// Page-locked host data: the memory kind that may be split.
    fn shape(op: OpKind, lengths: &[u64]) -> JobShape<'_> {
        JobShape {
            op,
            lengths,
            mem: HostMemory::Pinned,
        }
    }

    /// The GPU part and CPU part lengths of a split.
    fn parts(lengths: &[u64], at: SplitPoint) -> (Vec<u64>, Vec<u64>) {
        let mut gpu: Vec<u64> = lengths[..at.segment].to_vec();
        let mut cpu = Vec::new();
        if at.segment < lengths.len() {
            let len = lengths[at.segment];
            if at.offset > 0 {
                gpu.push(at.offset);
                cpu.push(len - at.offset);
            } else {
                cpu.push(len);
            }
            cpu.extend_from_slice(&lengths[at.segment + 1..]);
        }
        (gpu, cpu)
    }

    #[test]
    fn small_jobs_go_to_the_cpu() {
        let m = model(50.0);
        for lengths in [vec![512u64], vec![4096; 4], vec![16384]] {
            let d = decide(&m, &shape(OpKind::Sha256, &lengths), &idle(8));
            assert_eq!(d.plan, Plan::Cpu, "{lengths:?}: {d:?}");
        }
    }

    #[test]
    fn large_jobs_go_to_a_faster_gpu() {
        // With the CPU reserved down to one thread the GPU alone must win.
        let m = model(50.0);
        let lengths = vec![16u64 << 20; 16];
        let d = decide(&m, &shape(OpKind::Sha256, &lengths), &idle(1));
        assert_eq!(d.plan, Plan::Gpu, "{d:?}");
        assert!(d.gpu_finish_ns.expect("gpu") < d.cpu_finish_ns);
    }

    #[test]
    fn a_slower_gpu_is_never_chosen_alone() {
        let m = model(0.5);
        let lengths = vec![16u64 << 20; 16];
        let d = decide(&m, &shape(OpKind::Sha256, &lengths), &idle(8));
        assert_ne!(d.plan, Plan::Gpu, "{d:?}");
    }

    #[test]
    fn pageable_jobs_are_never_split() {
        let m = model(8.0);
        let lengths = vec![1u64 << 20; 64];
        let pageable = JobShape {
            op: OpKind::AesGcmSeal,
            lengths: &lengths,
            mem: HostMemory::Pageable,
        };
        let d = decide(&m, &pageable, &idle(8));
        assert!(matches!(d.plan, Plan::Cpu | Plan::Gpu), "{d:?}");
        // The same job page-locked splits (next test).
        let d = decide(&m, &shape(OpKind::AesGcmSeal, &lengths), &idle(8));
        assert!(matches!(d.plan, Plan::Split(_)), "{d:?}");
    }

    #[test]
    fn comparable_backends_split_and_finish_together() {
        // CPU 8 GB/s, GPU 8 GB/s: a split halves the time.
        let m = model(8.0);
        let lengths = vec![1u64 << 20; 64];
        let d = decide(&m, &shape(OpKind::AesGcmSeal, &lengths), &idle(8));
        let Plan::Split(p) = d.plan else {
            panic!("expected a split: {d:?}")
        };
        assert_eq!(p.offset, 0, "GCM segments are never cut inside");
        assert!((24..=40).contains(&p.segment), "{p:?}");
        assert!(d.plan_finish_ns < 0.7 * d.cpu_finish_ns, "{d:?}");
    }

    #[test]
    fn one_huge_ctr_segment_is_cut_at_a_block_boundary() {
        let m = model(8.0);
        let lengths = [(256u64 << 20) + 13];
        let d = decide(&m, &shape(OpKind::AesCtr, &lengths), &idle(8));
        let Plan::Split(p) = d.plan else {
            panic!("expected a split: {d:?}")
        };
        assert_eq!(p.segment, 0);
        assert!(
            p.offset > 0 && p.offset < lengths[0] && p.offset % CUT_ALIGN == 0,
            "{p:?}"
        );
        // Serial digests (one GPU thread per segment) are never split.
        let many = vec![1u64 << 20; 64];
        let d = decide(&m, &shape(OpKind::Sha256, &many), &idle(8));
        assert!(!matches!(d.plan, Plan::Split(_)), "{d:?}");
        // One huge digest segment is not cut.
        let d = decide(&m, &shape(OpKind::Sha256, &lengths), &idle(8));
        assert!(!matches!(d.plan, Plan::Split(_)), "{d:?}");
    }

    /// The H200 host's GCM case: 32 cores at 4.5 GB/s each, GPU at 45 GB/s
    /// from pinned memory and 9.8 GB/s from pageable. Four 16 MiB segments
    /// used to keep only 4 cores busy (18 GB/s, so the GPU won pinned); the
    /// CPU backend now cuts them across all 32 threads at GCM_CUT_COST per
    /// byte (~63 GB/s), so the CPU wins pageable and pinned takes the CPU
    /// or a split, never the GPU alone.
    #[test]
    fn four_large_gcm_segments_are_cut_across_every_thread() {
        let m = model_with(32, 4.5, 45.0, 9.8);
        let lengths = vec![16u64 << 20; 4];
        let op = OpKind::AesGcmSeal;
        let pageable = JobShape {
            mem: HostMemory::Pageable,
            ..shape(op, &lengths)
        };
        let pageable = decide(&m, &pageable, &idle(32));
        assert_eq!(pageable.plan, Plan::Cpu, "{pageable:?}");
        let gbps = (64u64 << 20) as f64 / pageable.cpu_finish_ns;
        let cut = 32.0 * 4.5 / GCM_CUT_COST;
        assert!((0.9 * cut..1.01 * cut).contains(&gbps), "{gbps} GB/s");
        let pinned = JobShape {
            mem: HostMemory::Pinned,
            ..shape(op, &lengths)
        };
        let d = decide(&m, &pinned, &idle(32));
        assert!(matches!(d.plan, Plan::Cpu | Plan::Split(_)), "{d:?}");
        // On 8 threads four segments are not worth cutting (4 x 2.3 > 8):
        // priced as 4 busy threads.
        let d = decide(&m, &shape(op, &lengths), &idle(8));
        let gbps = (64u64 << 20) as f64 / d.cpu_finish_ns;
        assert!((0.9 * 18.0..18.01).contains(&gbps), "{gbps} GB/s");
        // Large pinned jobs use the GPU; with many segments the CPU may
        // join them; pageable ones of many segments stay on the 32 cores.
        let big = vec![256u64 << 20; 4];
        let d = decide(
            &m,
            &JobShape {
                mem: HostMemory::Pinned,
                ..shape(op, &big)
            },
            &idle(32),
        );
        assert_ne!(d.plan, Plan::Cpu, "{d:?}");
        let many = vec![1u64 << 20; 1024];
        let d = decide(&m, &shape(op, &many), &idle(32));
        assert!(matches!(d.plan, Plan::Cpu | Plan::Split(_)), "{d:?}");
        let d = decide(
            &m,
            &JobShape {
                mem: HostMemory::Pinned,
                ..shape(op, &many)
            },
            &idle(32),
        );
        assert!(matches!(d.plan, Plan::Cpu | Plan::Split(_)), "{d:?}");
    }

    /// Exact price of every candidate at segment granularity.
    fn brute_force(m: &CostModel, op: OpKind, lengths: &[u64], sides: &Sides) -> f64 {
        let stats = JobStats::of_lengths(lengths, HostMemory::Pinned);
        let c = OpCosts::of(m, op);
        let (_, d) = sketch(&c, &stats, sides);
        let single = d
            .cpu_finish_ns
            .min(d.gpu_finish_ns.unwrap_or(f64::INFINITY));
        (1..lengths.len())
            .map(|k| {
                let g = GpuPart {
                    bytes: lengths[..k].iter().sum(),
                    segments: k,
                };
                split_finish(&c, &stats, sides, g, false).finish_ns
            })
            .fold(single, f64::min)
    }

    #[test]
    fn the_plan_is_as_good_as_every_candidate_priced() {
        // Not a serial digest: those are never split.
        let op = OpKind::AesGcmOpen;
        for (threads, cpu, gpu) in [
            (8, 1.0, 8.0),
            (32, 2.0, 45.0),
            (2, 1.0, 3.0),
            (16, 1.5, 9.8),
        ] {
            let m = model_with(threads, cpu, gpu, gpu);
            for n in [2usize, 3, 5, 17, 40, 333] {
                for size in [256u64 << 10, 1 << 20, 5 << 20] {
                    let lengths = vec![size; n];
                    let d = decide(&m, &shape(op, &lengths), &idle(threads));
                    let best = brute_force(&m, op, &lengths, &idle(threads));
                    // 1% for the share grid's resolution: the split it
                    // finds may trail the exact best by a hair and so just
                    // miss the margin (16 threads, 333 x 1 MiB pinned).
                    assert!(
                        d.plan_finish_ns
                            <= 1.01 * best / (1.0 - split_margin()) + SPLIT_OVERHEAD_NS,
                        "{threads} threads, {n} x {size}: {d:?}, best {best}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_split_leaves_cores_to_the_gpu_parts_staging_copies() {
        // GPU at 8 GB/s from pageable memory: a GCM seal stages each byte in
        // and out (0.2 ns of copying), 1.6 cores busy while the GPU part runs.
        let m = model_with(16, 1.0, 8.0, 8.0);
        let gcm = OpCosts::of(&m, OpKind::AesGcmSeal);
        let stats = JobStats {
            bytes: 256 << 20,
            segments: 256,
            largest: 1 << 20,
            mem: HostMemory::Pageable,
        };
        let part = GpuPart {
            bytes: 128 << 20,
            segments: 128,
        };
        let g = gpu_time(&gcm, part.bytes, part.segments, 1 << 20, stats.mem).expect("gpu");
        assert_eq!(split_threads(&gcm, &stats, &idle(16), part, g), (14, 0.0));
        // A CPU side on 8 of 16 cores leaves the copies 8 already.
        let half = Sides {
            cores: 16,
            ..idle(8)
        };
        assert_eq!(split_threads(&gcm, &stats, &half, part, g), (8, 0.0));
        // A digest of pinned memory is DMA'd straight: one core is kept,
        // for the thread driving the GPU.
        let pinned = JobStats {
            mem: HostMemory::Pinned,
            ..stats
        };
        let blake3 = OpCosts::of(&m, OpKind::Blake3);
        assert_eq!(split_threads(&blake3, &pinned, &idle(16), part, g).0, 15);
        // So is a GCM seal's output, written back by DMA in place (H100,
        // session 9: pinned 4 x 1 GiB seal splits ran at 1.40x the better
        // backend on 15 threads, 1.22x on the 11 the staged price left).
        let pinned_large = JobStats {
            segments: 4,
            largest: 64 << 20,
            ..pinned
        };
        let big = GpuPart {
            bytes: 128 << 20,
            segments: 2,
        };
        assert_eq!(
            split_threads(&gcm, &pinned_large, &idle(16), big, g),
            (15, 0.0)
        );
        // Device-resident data is not copied either.
        let resident = JobStats {
            mem: HostMemory::Device,
            ..pinned_large
        };
        assert_eq!(split_threads(&gcm, &resident, &idle(16), big, g).0, 15);
        // One thread is never given up; the copies then share it.
        let (threads, spill) = split_threads(&gcm, &stats, &idle(1), part, g);
        assert_eq!(threads, 1);
        assert!(spill > 0.8 * (128 << 20) as f64 * 0.2, "{spill}");
    }

    #[test]
    fn large_pinned_segments_split_on_a_smaller_margin() {
        let stats = |bytes: u64, segments: usize, mem| JobStats {
            bytes,
            segments,
            largest: bytes / segments as u64,
            mem,
        };
        let large = stats(4 * LARGE_SPLIT_SEGMENT, 4, HostMemory::Pinned);
        assert_eq!(margin_for(&large), LARGE_SPLIT_MARGIN);
        // Smaller pieces, or pageable memory, keep the wide margin.
        let small = stats(4 * LARGE_SPLIT_SEGMENT, 64, HostMemory::Pinned);
        assert_eq!(margin_for(&small), SPLIT_MARGIN);
        let pageable = stats(4 * LARGE_SPLIT_SEGMENT, 4, HostMemory::Pageable);
        assert_eq!(margin_for(&pageable), SPLIT_MARGIN);
        // (Where it decides: h100::session9_large_pinned_gcm_splits_and_
        // small_pieces_stay_on_the_cpu, whose 4 x 16 and 4 x 64 MiB seals
        // the 0.25 margin kept on the CPU.)
    }

    #[test]
    fn a_split_on_every_core_runs_its_cpu_part_on_fewer() {
        // CPU and GPU about even (16 GB/s each): a split near one half.
        let m = model_with(16, 1.0, 16.0, 16.0);
        let lengths = vec![1u64 << 20; 256];
        let job = shape(OpKind::AesGcmSeal, &lengths);
        let d = decide(&m, &job, &idle(16));
        assert!(matches!(d.plan, Plan::Split(_)), "{d:?}");
        assert!((1..16).contains(&d.split_cpu_threads), "{d:?}");
        let half = Sides {
            cores: 32,
            ..idle(16)
        };
        let d = decide(&m, &job, &half);
        assert!(matches!(d.plan, Plan::Split(_)), "{d:?}");
        assert_eq!(d.split_cpu_threads, 16, "{d:?}");
        // Whole jobs keep every thread.
        let d = decide(&m, &shape(OpKind::AesGcmSeal, &[4096; 4]), &idle(16));
        assert_eq!((d.plan, d.split_cpu_threads), (Plan::Cpu, 16));
    }

    #[test]
    fn split_parts_sum_to_the_whole_job() {
        let m = model(8.0);
        let lengths: Vec<u64> = (0..50).map(|i| (i * 97_003 + 4_099) as u64).collect();
        for op in [OpKind::AesCtr, OpKind::Blake3, OpKind::AesGcmOpen] {
            for threads in [1, 2, 8] {
                let d = decide(&m, &shape(op, &lengths), &idle(threads));
                if let Plan::Split(p) = d.plan {
                    let (g, c) = parts(&lengths, p);
                    let total: u64 = lengths.iter().sum();
                    assert_eq!(g.iter().sum::<u64>() + c.iter().sum::<u64>(), total);
                    assert!(!g.is_empty() && !c.is_empty());
                    let pieces = g.len() + c.len();
                    assert_eq!(pieces, lengths.len() + usize::from(p.offset > 0));
                }
            }
        }
    }

    #[test]
    fn a_small_job_skips_a_busy_gpu_for_an_idle_cpu() {
        // Even where the GPU is much faster, a queued second of GPU work
        // sends a small job to the idle CPU.
        let m = model(500.0);
        let lengths = vec![4u64 << 20; 4];
        let fast = decide(&m, &shape(OpKind::Sha256, &lengths), &idle(1));
        assert_eq!(fast.plan, Plan::Gpu, "{fast:?}");
        let busy = Sides {
            gpu_queued_ns: 1e9,
            ..idle(1)
        };
        let d = decide(&m, &shape(OpKind::Sha256, &lengths), &busy);
        assert_eq!(d.plan, Plan::Cpu, "{d:?}");
    }

    #[test]
    fn reserving_cores_moves_work_to_the_gpu() {
        // GPU at 4 GB/s: slower than 8 cores, faster than one.
        let m = model(4.0);
        let lengths = vec![64u64 << 10; 16];
        let all = decide(&m, &shape(OpKind::Md5, &lengths), &idle(8));
        assert_eq!(all.plan, Plan::Cpu, "{all:?}");
        let one = decide(&m, &shape(OpKind::Md5, &lengths), &idle(1));
        assert_ne!(one.plan, Plan::Cpu, "{one:?}");
    }

    #[test]
    fn resident_data_goes_to_the_gpu_or_nowhere_else() {
        let m = model(0.1);
        let lengths = [512u64];
        let s = JobShape {
            mem: HostMemory::Device,
            ..shape(OpKind::AesCtr, &lengths)
        };
        assert_eq!(decide(&m, &s, &idle(8)).plan, Plan::Gpu);
        let no_gpu = Sides {
            gpu: false,
            ..idle(8)
        };
        assert_eq!(decide(&m, &s, &no_gpu).plan, Plan::Cpu);
    }

    #[test]
    fn empty_jobs_and_missing_gpu_go_to_the_cpu() {
        let m = model(500.0);
        assert_eq!(
            decide(&m, &shape(OpKind::Md5, &[]), &idle(8)).plan,
            Plan::Cpu
        );
        let no_gpu = Sides {
            gpu: false,
            ..idle(8)
        };
        let lengths = vec![1u64 << 30; 4];
        assert_eq!(
            decide(&m, &shape(OpKind::Md5, &lengths), &no_gpu).plan,
            Plan::Cpu
        );
    }

    #[test]
    fn crossover_is_where_the_gpu_starts_winning_per_memory_kind() {
        let m = model_with(1, 1.0, 50.0, 5.0);
        let at = |mem| match crossover(&m, OpKind::Sha256, 1, 1, mem) {
            Crossover::At(size) => size,
            other => panic!("expected a crossing, got {other:?}"),
        };
        let (pinned, pageable) = (at(HostMemory::Pinned), at(HostMemory::Pageable));
        // Pinned pieces under DIRECT_MIN are packed like pageable ones.
        assert!(pinned <= pageable, "{pinned} {pageable}");
        let c = OpCosts::of(&m, OpKind::Sha256);
        let t = |s: u64| {
            (
                cpu_time(&c, s, 1, s, 1),
                gpu_time(&c, s, 1, s, HostMemory::Pinned).expect("gpu"),
            )
        };
        let (c, g) = t(pinned);
        assert!(g < c);
        let (c, g) = t(pinned - 32);
        assert!(g >= c);
        assert_eq!(
            crossover(&model(0.01), OpKind::Sha256, 1, 8, HostMemory::Pageable),
            Crossover::GpuNeverFaster
        );
        let mut no_gpu = m.clone();
        no_gpu.ops.values_mut().for_each(|o| o.gpu = None);
        assert_eq!(
            crossover(&no_gpu, OpKind::Sha256, 1, 8, HostMemory::Pinned),
            Crossover::NoGpu
        );
    }

    /// `model_with` plus a link (so the plateau applies) and, for AES-GCM
    /// seal, a large pinned line of `ramp_ns` + bytes / `large_gbps`.
    fn with_large(ramp_ns: f64, large_gbps: f64) -> (CostModel, CostModel) {
        let mut base = model_with(16, 1.0, 30.0, 10.0);
        base.link = Some(super::super::model::LinkCost {
            fixed_ns: 5_000.0,
            ns_per_byte: 1.0 / 55.0,
        });
        let mut large = base.clone();
        let gpu = large
            .ops
            .get_mut("aes256gcm-seal")
            .and_then(|m| m.gpu.as_mut());
        gpu.expect("a GPU").pinned_large = Some(LinearCost {
            fixed_ns: ramp_ns,
            ns_per_byte: 1.0 / large_gbps,
            ns_per_segment: 0.0,
        });
        (base, large)
    }

    #[test]
    fn the_large_pinned_line_prices_only_large_dmad_jobs() {
        let (base, large) = with_large(2e6, 40.0);
        let (b, l) = (
            OpCosts::of(&base, OpKind::AesGcmSeal),
            OpCosts::of(&large, OpKind::AesGcmSeal),
        );
        let line = large.op(OpKind::AesGcmSeal).and_then(|m| m.gpu);
        let line = line.and_then(|g| g.pinned_large).expect("a line");
        let t = |c: &OpCosts, bytes: u64, n: usize, mem| {
            gpu_time(c, bytes, n, bytes / n as u64, mem).expect("gpu")
        };
        // Above CALIBRATED_JOB_BYTES, DMA'd: the line (slower than the
        // plateau here).
        for bytes in [CALIBRATED_JOB_BYTES + 4096, 64 << 20, 4 << 30] {
            let got = t(&l, bytes, 4, HostMemory::Pinned);
            assert_eq!(got, line.predict_ns(bytes, 4), "{bytes}");
            assert!(got > t(&b, bytes, 4, HostMemory::Pinned), "{bytes}");
        }
        // At and below it, packed pieces, pageable and resident data: as
        // without the line, bit for bit.
        let same = [
            (CALIBRATED_JOB_BYTES, 4, HostMemory::Pinned),
            (1 << 20, 4, HostMemory::Pinned),
            (64 << 20, 1024, HostMemory::Pinned),
            (64 << 20, 4, HostMemory::Pageable),
            (1 << 30, 4, HostMemory::Device),
        ];
        for (bytes, n, mem) in same {
            assert_eq!(
                t(&l, bytes, n, mem),
                t(&b, bytes, n, mem),
                "{bytes} {n} {mem:?}"
            );
        }
        // Other ops keep their prices.
        let ctr = |m: &CostModel| {
            let c = OpCosts::of(m, OpKind::AesCtr);
            t(&c, 1 << 30, 4, HostMemory::Pinned)
        };
        assert_eq!(ctr(&large), ctr(&base));
    }

    #[test]
    fn without_a_large_line_large_pinned_jobs_keep_the_plateau() {
        let (base, _) = with_large(0.0, 1.0);
        let c = OpCosts::of(&base, OpKind::AesGcmSeal);
        let pinned = base
            .gpu_line(OpKind::AesGcmSeal, GpuLine::Pinned)
            .expect("a line");
        let stages = |bytes| gpu_stage_ns(&pinned, None, bytes, 4, bytes / 4, false);
        let extra = ((1u64 << 30) - CALIBRATED_JOB_BYTES) as f64;
        // The link (55 GB/s) is slower than the kernel (100): its rate.
        let want = stages(CALIBRATED_JOB_BYTES) + (1.0 / 55.0) * extra;
        let got = gpu_time(&c, 1 << 30, 4, 1 << 28, HostMemory::Pinned).expect("gpu");
        assert_eq!(got, want);
        // Without a link, no plateau: the fitted line all the way.
        let mut no_link = base.clone();
        no_link.link = None;
        let c = OpCosts::of(&no_link, OpKind::AesGcmSeal);
        let got = gpu_time(&c, 1 << 30, 4, 1 << 28, HostMemory::Pinned).expect("gpu");
        assert_eq!(got, stages(1 << 30));
    }

    #[test]
    fn a_large_line_never_beats_the_plateau_or_a_thread() {
        // A line faster than the link (a noisy calibration): the plateau.
        let (base, fast) = with_large(0.0, 1000.0);
        let t = |m: &CostModel, op, n: usize| {
            let c = OpCosts::of(m, op);
            gpu_time(&c, 1 << 30, n, (1 << 30) / n as u64, HostMemory::Pinned).expect("gpu")
        };
        assert_eq!(
            t(&fast, OpKind::AesGcmSeal, 4),
            t(&base, OpKind::AesGcmSeal, 4)
        );
        // A serial hash runs a segment on one thread (33 ns a byte): one
        // 1 GiB segment takes that thread's time whatever the line says.
        let mut serial = fast.clone();
        let line = fast
            .op(OpKind::AesGcmSeal)
            .and_then(|m| m.gpu?.pinned_large);
        let gpu = serial.ops.get_mut("sha256").and_then(|m| m.gpu.as_mut());
        let gpu = gpu.expect("a GPU");
        gpu.thread_ns_per_byte = Some(33.0);
        gpu.pinned_large = line;
        assert!(t(&serial, OpKind::Sha256, 1) >= 33.0 * (1u64 << 30) as f64);
    }

    #[test]
    fn a_ramp_moves_a_large_pinned_job_off_the_gpu() {
        // GPU plateau (55 GB/s) ahead of 16 cores at 4 GB/s each cutting
        // GCM segments (~28 GB/s); a 10 ms ramp puts 4 x 64 MiB at ~17
        // GB/s, behind the CPU.
        let lengths = vec![64u64 << 20; 4];
        let (mut base, mut slow) = with_large(10e6, 50.0);
        for m in [&mut base, &mut slow] {
            for op in m.ops.values_mut() {
                op.cpu.one_thread.ns_per_byte = 0.25;
            }
        }
        let job = shape(OpKind::AesGcmSeal, &lengths);
        let d = decide(&base, &job, &idle(16));
        // The GPU ahead: alone, or taking most of a split.
        assert_ne!(d.plan, Plan::Cpu, "{d:?}");
        assert!(d.gpu_finish_ns.expect("gpu") < d.cpu_finish_ns, "{d:?}");
        let d = decide(&slow, &job, &idle(16));
        assert_ne!(d.plan, Plan::Gpu, "{d:?}");
        assert!(d.gpu_finish_ns.expect("gpu") > d.cpu_finish_ns, "{d:?}");
    }

    #[test]
    fn a_large_line_survives_the_model_file() {
        let (base, large) = with_large(1.9e6, 49.0);
        let dir = std::env::temp_dir().join(format!("gvault-large-{}", std::process::id()));
        let path = dir.join("cost-model.json");
        super::super::file::write(&path, &large).expect("writes");
        let back = super::super::file::read(&path, &large.identity).expect("reads");
        assert_eq!(back, large);
        // Absent, the field is not written, and such files still load.
        let text = serde_json::to_string(&base).expect("serializes");
        assert!(!text.contains("pinned_large"), "{text}");
        let old: CostModel = serde_json::from_str(&text).expect("parses");
        assert_eq!(old, base);
        // A negative ramp is refused.
        let mut bad = large.clone();
        let gpu = bad
            .ops
            .get_mut("aes256gcm-seal")
            .and_then(|m| m.gpu.as_mut());
        gpu.expect("a GPU")
            .pinned_large
            .as_mut()
            .expect("a line")
            .fixed_ns = -1.0;
        assert!(bad.validate().is_err());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
