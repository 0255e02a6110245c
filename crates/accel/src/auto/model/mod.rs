//! The cost model: per operation and backend, predicted time = fixed cost +
//! bytes × rate + segments × rate. The host link is modelled apart from the
//! GPU kernel, so that device-resident data and host data get different
//! answers; the CPU side is modelled per thread with a measured speed-up, so
//! that reserving cores changes the answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::job::OpKind;

/// Bumped whenever the file's meaning changes; other versions are ignored.
/// 2: the GPU's end-to-end cost from page-locked and from pageable host
/// memory apart (1 had one host figure, measured on pageable memory).
/// 3: GPU lines are stage rates (fixed + the slowest of bytes, segments and
/// the longest segment's thread), pinned jobs of small pieces have their own
/// (packed) line, and serial hashes a per-thread rate.
pub const FORMAT_VERSION: u32 = 3;

/// Page-locked pieces at least this long are DMA'd straight from the
/// caller's memory; shorter ones are packed into pinned slots by a CPU copy,
/// like pageable data (mirrors `DIRECT_MIN` in gpu/stage.rs and gpu/ctr.rs).
pub(crate) const DIRECT_MIN: u64 = 256 << 10;

/// Ops the GPU runs one thread per segment (sequential hashes): a job
/// takes at least its longest segment at one thread's rate. The CRCs are
/// not: the GPU backend cuts their segments into pieces and combines the
/// pieces' CRCs (gpu/crc_cut.rs).
pub(crate) fn gpu_serial(op: OpKind) -> bool {
    matches!(op, OpKind::Sha256 | OpKind::Md5)
}

/// fixed + bytes × ns_per_byte + segments × ns_per_segment, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinearCost {
    pub fixed_ns: f64,
    pub ns_per_byte: f64,
    pub ns_per_segment: f64,
}

impl LinearCost {
    pub fn predict_ns(&self, bytes: u64, segments: usize) -> f64 {
        self.fixed_ns + self.ns_per_byte * bytes as f64 + self.ns_per_segment * segments as f64
    }

    fn is_valid(&self) -> bool {
        [self.fixed_ns, self.ns_per_byte, self.ns_per_segment]
            .iter()
            .all(|v| v.is_finite() && *v >= 0.0)
    }
}

/// One op on the CPU: its single-thread cost, and the speed-up measured
/// with `threads` threads on work that can use them all.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuCost {
    pub one_thread: LinearCost,
    pub threads: usize,
    pub speedup: f64,
    /// AES-GCM only: what a cut segment costs a thread, as a multiple of
    /// `one_thread`'s per-byte rate, measured on all threads cutting few
    /// large segments (`bench calibrate`); absent, `GCM_CUT_COST`. The H100
    /// host's 2.3-4.0 (seal, open) sat far from any one constant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_cost: Option<f64>,
    /// Speed-up on many small segments ([`SMALL_SPEEDUP_UNITS_PER_THREAD`]
    /// a thread), where the pool balances its threads; `speedup` is taken
    /// on [`SPEEDUP_UNITS_PER_THREAD`] large ones, where one slow core holds
    /// the whole job up. On the H100 host SHA-256 calibrated 9.5-12.7 on
    /// 64 x 792 KiB while 16384 x 4 KiB ran at 13.7x the line, so the CPU
    /// was priced 19-21% slow there and auto sent the job to a GPU that
    /// lost. Absent (older files): `speedup` throughout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_speedup: Option<f64>,
}

/// Segments a thread of the shape `CpuCost::speedup` is measured on.
pub(crate) const SPEEDUP_UNITS_PER_THREAD: usize = 4;
/// Segments a thread of the shape `CpuCost::small_speedup` is measured on.
pub(crate) const SMALL_SPEEDUP_UNITS_PER_THREAD: usize = 1024;

impl CpuCost {
    /// Speed-up with `t` threads: a roofline, t× until the measured
    /// all-thread speed-up caps it (memory bandwidth, shared clocks). A
    /// straight line from 1× to the measured figure priced 4 threads at
    /// 1.9x for AES-GCM on the H100 host (speed-up 5.7 on 16): 4 x 16 MiB
    /// predicted at 12 GB/s against 20.5 measured, so auto sent such jobs
    /// to a pageable GPU path that ran at 6-13.
    pub fn speedup_at(&self, t: usize) -> f64 {
        if self.threads <= 1 {
            return 1.0;
        }
        (t.max(1) as f64).min(self.speedup.max(1.0))
    }

    /// Speed-up of `units` pieces of work on `threads` threads: the
    /// roofline of [`Self::speedup_at`] on the busy threads, its cap moving
    /// from `speedup` (4 pieces a thread or fewer) to `small_speedup` (1024
    /// or more) with log2 of the pieces a thread, between the two shapes
    /// calibration measured.
    pub fn speedup_for(&self, threads: usize, units: usize) -> f64 {
        let busy = threads.min(units.max(1));
        let Some(small) = self.small_speedup else {
            return self.speedup_at(busy);
        };
        if self.threads <= 1 {
            return 1.0;
        }
        let per_thread = (units.max(1) as f64 / threads.max(1) as f64).max(1.0);
        let (lo, hi) = (
            (SPEEDUP_UNITS_PER_THREAD as f64).log2(),
            (SMALL_SPEEDUP_UNITS_PER_THREAD as f64).log2(),
        );
        let w = ((per_thread.log2() - lo) / (hi - lo)).clamp(0.0, 1.0);
        let cap = self.speedup.max(1.0) * (1.0 - w) + small.max(1.0) * w;
        (busy.max(1) as f64).min(cap)
    }

    /// Time with `threads` threads for `units` independent pieces of work
    /// (segments, or pieces of cuttable segments), the largest of which is
    /// `largest_unit` bytes: no thread count finishes before that one does.
    pub fn predict_ns(
        &self,
        bytes: u64,
        segments: usize,
        units: usize,
        largest_unit: u64,
        threads: usize,
    ) -> f64 {
        // Only min(threads, units) threads are busy, each at the efficiency
        // measured with all of them (memory bandwidth and clocks are
        // shared): 4 segments on 16 cores run at speedup_at(4), not 4x.
        let par = self.speedup_for(threads, units);
        let c = &self.one_thread;
        let spread = (c.ns_per_byte * bytes as f64 + c.ns_per_segment * segments as f64) / par;
        let longest = c.ns_per_byte * largest_unit.min(bytes) as f64 + c.ns_per_segment;
        c.fixed_ns + spread.max(if segments > 0 { longest } else { 0.0 })
    }
}

impl CpuCost {
    /// Time with `threads` threads for a job whose segments are cut into
    /// `units` pieces (the largest `largest_unit` bytes) on a path that
    /// costs `cost` times the fitted per-byte rate on one thread (cut
    /// AES-GCM: CTR and GHASH as two passes). The extra work is computed in
    /// cache, so it scales with busy threads; the measured all-thread
    /// speed-up still caps the whole (memory bandwidth).
    pub fn predict_cut_ns(
        &self,
        bytes: u64,
        segments: usize,
        units: usize,
        largest_unit: u64,
        threads: usize,
        cost: f64,
    ) -> f64 {
        let capped = self.predict_ns(bytes, segments, units, largest_unit, threads);
        let c = &self.one_thread;
        let busy = threads.min(units.max(1)).max(1) as f64;
        let spread =
            (c.ns_per_byte * cost * bytes as f64 + c.ns_per_segment * segments as f64) / busy;
        let longest = c.ns_per_byte * cost * largest_unit.min(bytes) as f64 + c.ns_per_segment;
        let computed = c.fixed_ns + spread.max(if segments > 0 { longest } else { 0.0 });
        capped.max(computed)
    }
}

/// One op on the GPU. `kernel` is device-resident data (no byte crosses the
/// link); `pinned` and `pageable` are measured end-to-end costs from host
/// memory that is page-locked (DMA straight from it) or not (staged through
/// pinned slots by a CPU copy), when calibration measured them. Without a
/// figure, pinned is kernel ⊕ link, and pageable is pinned.
///
/// Each line is read as a pipeline of overlapping stages (see
/// [`gpu_stage_ns`]): fixed + max(bytes × ns_per_byte, segments ×
/// ns_per_segment, longest segment × `thread_ns_per_byte`). On the H100
/// host the additive form could not fit both 4 KiB x 16384 and 512 B x
/// 131072 (SHA-256 pageable: 13.4 GB/s at 4 KiB and 64 KiB alike, 2.4 at
/// 512 B; per-segment host work overlaps the copies until it is the
/// slowest stage).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuCost {
    pub kernel: LinearCost,
    pub pinned: Option<LinearCost>,
    pub pageable: Option<LinearCost>,
    /// Page-locked jobs whose pieces average under [`DIRECT_MIN`]: packed
    /// by a CPU copy, not DMA'd. Without a figure, the pageable line.
    #[serde(default)]
    pub pinned_packed: Option<LinearCost>,
    /// One GPU thread's rate on one segment, for [`gpu_serial`] ops: no
    /// job finishes before its longest segment does.
    #[serde(default)]
    pub thread_ns_per_byte: Option<f64>,
    /// DMA'd page-locked jobs larger than any calibration prices with the
    /// stage lines (`CALIBRATED_JOB_BYTES`): fixed (the pipeline's ramp:
    /// the first copy in and the last copy out, which nothing overlaps) +
    /// bytes × the steady rate, measured on two such jobs. On the H100
    /// host GCM ran 4 x 64 MiB at 37 GB/s and 4 x 1 GiB at 48 (~2 ms +
    /// bytes / 49 GB/s), where the plateau extrapolation priced 51 and 55.
    /// Absent (shipped defaults, older files, quick calibrations), the
    /// plateau extrapolation. Optional and skipped when absent, so files
    /// without it still parse: `FORMAT_VERSION` is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_large: Option<LinearCost>,
    /// Pageable jobs larger than any stage-line calibration (past
    /// `CALIBRATED_PAGEABLE_BYTES`): fixed (the staging pipeline's ramp) +
    /// bytes x the steady rate, measured on two such jobs. The stage lines
    /// are fitted on 64 MiB jobs, and the pipeline runs faster on larger
    /// ones: on the H200 host SHA-256 64 KiB x 4096 pageable (256 MiB) ran
    /// at 27.1 GB/s where the line priced 13.8 (and fused chunking 16 MiB
    /// x 16 at 25.7 against 17.2), so auto kept both on a slower CPU.
    /// Absent (shipped defaults, older files, quick calibrations), the
    /// stage line. Optional: `FORMAT_VERSION` is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pageable_large: Option<LinearCost>,
}

/// Time of `op` on its GPU line `kind`. The pageable and packed lines of
/// ops the GPU runs in parallel (everything but the serial hashes) pay
/// their byte and segment stages one after the other: both are the host
/// thread's packing work (a copy into the staging slots, then each
/// segment's bookkeeping), which the kernel's speed hides from neither.
/// On the H100 host the sum priced GCM and BLAKE3 at
/// 4 KiB x 16384 within 0.96-1.11 of the measured time, where the slower
/// stage alone priced them at 0.51-0.67: auto then sent page-locked
/// BLAKE3 4 KiB jobs to a GPU 1.7x slower than priced (0.80x of the CPU).
/// The serial hashes' byte stage is the kernel's saturated rate, which
/// does overlap the packing: there the sum overpriced SHA-256 by 1.4-1.5x.
pub(crate) fn gpu_line_ns(
    op: OpKind,
    kind: GpuLine,
    line: &LinearCost,
    thread_ns_per_byte: Option<f64>,
    bytes: u64,
    segments: usize,
    largest: u64,
) -> f64 {
    let packed = matches!(kind, GpuLine::Pageable | GpuLine::PinnedPacked);
    let add = packed && !gpu_serial(op);
    gpu_stage_ns(line, thread_ns_per_byte, bytes, segments, largest, add)
}

/// A GPU line's time as stages: fixed + the slowest of the byte, segment
/// and thread stages (they overlap), the byte and segment stages summed
/// first where `add` (see [`gpu_line_ns`]).
pub(crate) fn gpu_stage_ns(
    line: &LinearCost,
    thread_ns_per_byte: Option<f64>,
    bytes: u64,
    segments: usize,
    largest: u64,
    add: bool,
) -> f64 {
    let thread = thread_ns_per_byte.unwrap_or(0.0) * largest.min(bytes) as f64;
    let (per_byte, per_segment) = (
        line.ns_per_byte * bytes as f64,
        line.ns_per_segment * segments as f64,
    );
    let host = if add {
        per_byte + per_segment
    } else {
        per_byte.max(per_segment)
    };
    line.fixed_ns + host.max(thread)
}

/// Where a job's data lives, as far as the GPU's cost is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum HostMemory {
    /// In device memory: no byte crosses the link.
    Device,
    /// Page-locked host memory (the link's DMA engines read it directly).
    Pinned,
    /// Ordinary host memory.
    Pageable,
}

/// Which of an op's GPU lines prices a job: its memory, and for pinned
/// memory whether its pieces are DMA'd or packed.
pub(crate) fn gpu_line_kind(mem: HostMemory, bytes: u64, segments: usize) -> GpuLine {
    match mem {
        HostMemory::Device => GpuLine::Kernel,
        HostMemory::Pageable => GpuLine::Pageable,
        HostMemory::Pinned if bytes < DIRECT_MIN * segments.max(1) as u64 => GpuLine::PinnedPacked,
        HostMemory::Pinned => GpuLine::Pinned,
    }
}

/// An op's GPU cost lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GpuLine {
    Kernel,
    Pinned,
    PinnedPacked,
    Pageable,
}

impl GpuLine {
    pub const ALL: [GpuLine; 4] = [
        GpuLine::Kernel,
        GpuLine::Pinned,
        GpuLine::PinnedPacked,
        GpuLine::Pageable,
    ];
}

impl HostMemory {
    pub const HOST: [HostMemory; 2] = [HostMemory::Pinned, HostMemory::Pageable];

    pub fn name(self) -> &'static str {
        match self {
            HostMemory::Device => "device",
            HostMemory::Pinned => "pinned",
            HostMemory::Pageable => "pageable",
        }
    }
}

/// The host↔device link, one direction, pinned memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkCost {
    pub fixed_ns: f64,
    pub ns_per_byte: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpModel {
    pub cpu: CpuCost,
    pub gpu: Option<GpuCost>,
}

/// What a model was measured on; a file measured elsewhere is stale.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub gvault_version: String,
    pub cpu_cores: usize,
    pub gpu_name: Option<String>,
    pub driver_version: Option<i32>,
}

impl Identity {
    /// Why a model measured on `self` does not describe `current`, if it does not.
    pub fn mismatch(&self, current: &Identity) -> Option<String> {
        self.host_mismatch(current)
            .or_else(|| self.gpu_mismatch(current))
    }

    /// As [`Identity::mismatch`], for the parts known before the GPU is
    /// opened (the auto backend opens it only when a job needs it).
    pub fn host_mismatch(&self, current: &Identity) -> Option<String> {
        if self.gvault_version != current.gvault_version {
            return Some(format!(
                "measured by gvault {}, this is {}",
                self.gvault_version, current.gvault_version
            ));
        }
        if self.cpu_cores != current.cpu_cores {
            return Some(format!(
                "measured on {} cores, this machine has {}",
                self.cpu_cores, current.cpu_cores
            ));
        }
        None
    }

    /// The GPU and driver parts of [`Identity::mismatch`].
    pub fn gpu_mismatch(&self, current: &Identity) -> Option<String> {
        if self.gpu_name != current.gpu_name {
            return Some(format!(
                "measured with GPU {}, now {}",
                self.gpu_name.as_deref().unwrap_or("none"),
                current.gpu_name.as_deref().unwrap_or("none")
            ));
        }
        if self.driver_version != current.driver_version {
            return Some(format!(
                "measured with driver {:?}, now {:?}",
                self.driver_version, current.driver_version
            ));
        }
        None
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    pub format_version: u32,
    pub identity: Identity,
    pub link: Option<LinkCost>,
    /// Keyed by [`OpKind::name`].
    pub ops: BTreeMap<String, OpModel>,
}

impl CostModel {
    pub fn op(&self, op: OpKind) -> Option<&OpModel> {
        self.ops.get(op.name())
    }

    /// The GPU's cost line for `op` on data in `mem` (pinned: DMA'd
    /// pieces), or `None` where the model has no GPU figures for `op`.
    pub(crate) fn gpu_cost(&self, op: OpKind, mem: HostMemory) -> Option<LinearCost> {
        self.gpu_line(
            op,
            match mem {
                HostMemory::Device => GpuLine::Kernel,
                HostMemory::Pinned => GpuLine::Pinned,
                HostMemory::Pageable => GpuLine::Pageable,
            },
        )
    }

    /// One of `op`'s GPU lines, filled in where calibration left it out.
    pub(crate) fn gpu_line(&self, op: OpKind, kind: GpuLine) -> Option<LinearCost> {
        let g = self.op(op)?.gpu?;
        let pinned = || {
            g.pinned.or_else(|| {
                // Copies in, kernels and copies out overlap (pipelined), so
                // the slower of link and kernel sets the per-byte rate.
                let link = self.link?;
                let k = g.kernel;
                Some(LinearCost {
                    fixed_ns: k.fixed_ns + link.fixed_ns,
                    ns_per_byte: k.ns_per_byte.max(link.ns_per_byte),
                    ns_per_segment: k.ns_per_segment,
                })
            })
        };
        let pageable = || g.pageable.or_else(pinned);
        match kind {
            GpuLine::Kernel => Some(g.kernel),
            GpuLine::Pinned => pinned(),
            GpuLine::PinnedPacked => g.pinned_packed.or_else(pageable),
            GpuLine::Pageable => pageable(),
        }
    }

    /// GPU time of `segments` segments of `bytes` in all, the longest
    /// `largest`, or `None` where the model has no GPU figures for `op`.
    #[cfg(test)]
    pub(crate) fn gpu_ns(
        &self,
        op: OpKind,
        bytes: u64,
        segments: usize,
        largest: u64,
        mem: HostMemory,
    ) -> Option<f64> {
        let kind = gpu_line_kind(mem, bytes, segments);
        let line = self.gpu_line(op, kind)?;
        let thread = self.op(op)?.gpu?.thread_ns_per_byte;
        Some(gpu_line_ns(
            op, kind, &line, thread, bytes, segments, largest,
        ))
    }

    /// Checks a model read from a file: known version and ops, sane numbers.
    pub fn validate(&self) -> Result<(), String> {
        if self.format_version != FORMAT_VERSION {
            return Err(format!(
                "format version {} (this gvault reads {FORMAT_VERSION})",
                self.format_version
            ));
        }
        if let Some(l) = self.link {
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            if !ok(l.fixed_ns) || !ok(l.ns_per_byte) {
                return Err("link cost is negative or not a number".into());
            }
        }
        for (name, m) in &self.ops {
            if OpKind::from_name(name).is_none() {
                return Err(format!("unknown op {name:?}"));
            }
            let cpu_ok = m.cpu.one_thread.is_valid()
                && m.cpu.threads >= 1
                && m.cpu.speedup.is_finite()
                && m.cpu.speedup > 0.0
                && m.cpu.cut_cost.is_none_or(|c| c.is_finite() && c >= 1.0)
                && m.cpu.small_speedup.is_none_or(|s| s.is_finite() && s > 0.0);
            let gpu_ok = m.gpu.is_none_or(|g| {
                g.kernel.is_valid()
                    && g.pinned.is_none_or(|h| h.is_valid())
                    && g.pageable.is_none_or(|h| h.is_valid())
                    && g.pinned_packed.is_none_or(|h| h.is_valid())
                    && g.pinned_large.is_none_or(|h| h.is_valid())
                    && g.pageable_large.is_none_or(|h| h.is_valid())
                    && g.thread_ns_per_byte
                        .is_none_or(|t| t.is_finite() && t >= 0.0)
            });
            if !cpu_ok || !gpu_ok {
                return Err(format!("{name}: a cost is negative or not a number"));
            }
        }
        Ok(())
    }

    /// Fills ops missing from `self` from `defaults` (a file written before
    /// an op existed, or a quick calibration of a subset).
    pub(crate) fn fill_from(&mut self, defaults: &CostModel) {
        for (name, m) in &defaults.ops {
            self.ops.entry(name.clone()).or_insert(*m);
        }
        if self.link.is_none() && self.identity.gpu_name.is_some() {
            self.link = defaults.link;
        }
    }
}

mod fit;

pub(crate) use fit::{fit_linear, fit_ramp, fit_stages, StageSample};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_lines_of_parallel_ops_add_their_host_stages() {
        let line = LinearCost {
            fixed_ns: 100.0,
            ns_per_byte: 0.5,
            ns_per_segment: 1000.0,
        };
        let (bytes, n) = (4096u64 * 8, 8usize);
        let sum = 100.0 + 0.5 * bytes as f64 + 1000.0 * n as f64;
        let max = 100.0 + (0.5 * bytes as f64).max(1000.0 * n as f64);
        let ns = |op, kind| gpu_line_ns(op, kind, &line, None, bytes, n, 4096);
        for kind in [GpuLine::Pageable, GpuLine::PinnedPacked] {
            assert_eq!(ns(OpKind::Blake3, kind), sum);
            assert_eq!(ns(OpKind::AesGcmSeal, kind), sum);
            assert_eq!(ns(OpKind::Sha256, kind), max, "serial hashes overlap");
        }
        for kind in [GpuLine::Pinned, GpuLine::Kernel] {
            assert_eq!(
                ns(OpKind::Blake3, kind),
                max,
                "DMA'd or resident: stages overlap"
            );
        }
        // A serial hash's thread stage still bounds the sum from below.
        let slow = gpu_line_ns(
            OpKind::Blake3,
            GpuLine::Pageable,
            &line,
            Some(100.0),
            bytes,
            n,
            4096,
        );
        assert_eq!(slow, 100.0 + 100.0 * 4096.0);
    }

    #[test]
    fn small_pinned_pieces_are_priced_as_packed() {
        assert_eq!(
            gpu_line_kind(HostMemory::Pinned, 64 << 20, 1024),
            GpuLine::PinnedPacked
        );
        assert_eq!(
            gpu_line_kind(HostMemory::Pinned, 64 << 20, 64),
            GpuLine::Pinned
        );
        assert_eq!(
            gpu_line_kind(HostMemory::Pageable, 64 << 20, 64),
            GpuLine::Pageable
        );
    }

    #[test]
    fn speedup_scales_with_threads() {
        let c = CpuCost {
            one_thread: LinearCost::default(),
            threads: 16,
            speedup: 14.5,
            cut_cost: None,
            small_speedup: None,
        };
        assert_eq!(c.speedup_at(1), 1.0);
        assert!((c.speedup_at(16) - 14.5).abs() < 1e-9);
        assert!(c.speedup_at(8) > 1.0 && c.speedup_at(8) < 14.5);
    }

    /// 1 ns a byte on one thread, 16 threads.
    fn byte_per_ns(speedup: f64, small_speedup: Option<f64>) -> CpuCost {
        CpuCost {
            one_thread: LinearCost {
                fixed_ns: 0.0,
                ns_per_byte: 1.0,
                ns_per_segment: 0.0,
            },
            threads: 16,
            speedup,
            cut_cost: None,
            small_speedup,
        }
    }

    #[test]
    fn few_units_run_at_the_busy_threads_speedup() {
        let c = byte_per_ns(7.0, None);
        // 4 segments of 1 MB on 16 threads: 4 busy threads, under the
        // all-thread cap (7x), so 4x; 12 segments are capped at 7x.
        let t = c.predict_ns(4_000_000, 4, 4, 1_000_000, 16);
        assert!((t - 1_000_000.0).abs() < 1.0, "{t}");
        let t = c.predict_ns(12_000_000, 12, 12, 1_000_000, 16);
        assert!((t - 12_000_000.0 / 7.0).abs() < 1.0, "{t}");
        assert_eq!(c.speedup_at(1), 1.0);
        assert_eq!(c.speedup_at(16), 7.0);
    }

    #[test]
    fn many_small_segments_run_at_their_own_speedup() {
        let c = byte_per_ns(10.0, Some(14.0));
        // The calibration shapes get their own figures...
        assert_eq!(c.speedup_for(16, 16 * SPEEDUP_UNITS_PER_THREAD), 10.0);
        assert_eq!(c.speedup_for(16, 16 * SMALL_SPEEDUP_UNITS_PER_THREAD), 14.0);
        assert_eq!(c.speedup_for(16, 1 << 20), 14.0);
        // ...in between, log-linear and rising; few units stay on the
        // busy-thread roofline, and fewer threads cap it.
        let mid = c.speedup_for(16, 16 * 64);
        assert!((mid - 12.0).abs() < 1e-9, "{mid}");
        assert_eq!(c.speedup_for(16, 4), 4.0);
        assert_eq!(c.speedup_for(8, 1 << 20), 8.0);
        let t = c.predict_ns(64 << 20, 16384, 16384, 4096, 16);
        assert!((t - (64u64 << 20) as f64 / 14.0).abs() < 1.0, "{t}");
        // Without the figure (older files): `speedup` throughout.
        let old = CpuCost {
            small_speedup: None,
            ..c
        };
        assert_eq!(old.speedup_for(16, 1 << 20), 10.0);
    }
}
