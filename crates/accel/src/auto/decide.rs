//! The choice, as pure functions of a cost model, a job's shape and the work
//! already queued: CPU, GPU, or a split with both finishing together.

use super::model::CostModel;
use crate::cpu::DEFAULT_SPLIT_BYTES;
use crate::job::{OpKind, MAX_SEGMENT_LEN};

/// Jobs below this many bytes are never split: a thread start and a second
/// fixed cost would eat the gain.
pub const MIN_SPLIT_BYTES: u64 = 1 << 20;
/// What a split costs beyond its two parts (starting the GPU thread).
pub const SPLIT_OVERHEAD_NS: f64 = 30_000.0;
/// A split must beat the better single backend by this fraction.
pub const SPLIT_MARGIN: f64 = 0.05;
/// Segments are cut inside only at multiples of this (an AES block; two
/// blocks of the 64-bit ciphers), with the counter advanced to match.
pub const CUT_ALIGN: u64 = 16;

/// What the decision needs to know about a job.
#[derive(Clone, Copy, Debug)]
pub struct JobShape<'a> {
    pub op: OpKind,
    /// Length of every segment, in order.
    pub lengths: &'a [u64],
    /// Some segment lives in device memory (only the GPU can read it).
    pub resident: bool,
}

/// The two sides as they stand now.
#[derive(Clone, Copy, Debug)]
pub struct Sides {
    /// Threads the CPU side may use.
    pub cpu_threads: usize,
    /// The GPU is present and has not refused this op.
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
}

/// Ops whose segments the auto backend may cut inside: CTR modes, which
/// carry no state across blocks.
pub fn cuttable(op: OpKind) -> bool {
    matches!(op, OpKind::AesCtr | OpKind::TeaCtr | OpKind::BlowfishCtr)
}

/// Independent pieces the CPU backend makes of these segments: it cuts
/// large segments of CTR, BLAKE3 and CRC jobs across cores.
fn cpu_units(op: OpKind, lengths: impl Iterator<Item = u64>, threads: usize) -> usize {
    let cuts_inside = threads > 1
        && matches!(
            op,
            OpKind::AesCtr
                | OpKind::TeaCtr
                | OpKind::BlowfishCtr
                | OpKind::Blake3
                | OpKind::Blake3Keyed
                | OpKind::Crc32
                | OpKind::Crc32c
        );
    lengths
        .map(|len| {
            if cuts_inside {
                len.div_ceil(DEFAULT_SPLIT_BYTES as u64).max(1) as usize
            } else {
                1
            }
        })
        .sum()
}

/// The lengths of the two parts of a split.
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

fn cpu_time(model: &CostModel, op: OpKind, lengths: &[u64], threads: usize) -> f64 {
    if lengths.is_empty() {
        return 0.0;
    }
    let bytes = lengths.iter().sum();
    let units = cpu_units(op, lengths.iter().copied(), threads);
    model.cpu_ns(op, bytes, lengths.len(), units, threads)
}

fn gpu_time(model: &CostModel, op: OpKind, lengths: &[u64], resident: bool) -> Option<f64> {
    if lengths.is_empty() {
        return Some(0.0);
    }
    model.gpu_ns(op, lengths.iter().sum(), lengths.len(), resident)
}

/// Predicted finish of a split: both parts run at once.
fn split_finish(model: &CostModel, shape: &JobShape<'_>, sides: &Sides, at: SplitPoint) -> f64 {
    let (g, c) = parts(shape.lengths, at);
    let gpu = gpu_time(model, shape.op, &g, false).unwrap_or(f64::INFINITY);
    let cpu = cpu_time(model, shape.op, &c, sides.cpu_threads);
    (sides.gpu_queued_ns + gpu).max(sides.cpu_queued_ns + cpu) + SPLIT_OVERHEAD_NS
}

/// Cut points around byte `target` of the concatenated segments.
fn candidates(shape: &JobShape<'_>, target: u64) -> Vec<SplitPoint> {
    let mut out = Vec::new();
    let mut before = 0u64;
    for (i, &len) in shape.lengths.iter().enumerate() {
        if target < before + len || i + 1 == shape.lengths.len() {
            out.push(SplitPoint {
                segment: i,
                offset: 0,
            });
            out.push(SplitPoint {
                segment: i + 1,
                offset: 0,
            });
            let inside = (target.saturating_sub(before) / CUT_ALIGN) * CUT_ALIGN;
            if cuttable(shape.op) && inside > 0 && inside < len && len <= MAX_SEGMENT_LEN {
                out.push(SplitPoint {
                    segment: i,
                    offset: inside,
                });
            }
            break;
        }
        before += len;
    }
    // A split gives both sides something.
    let n = shape.lengths.len();
    out.retain(|p| (p.segment > 0 || p.offset > 0) && p.segment < n);
    out
}

/// Chooses CPU, GPU or a split for one job, by predicted finish time.
pub fn decide(model: &CostModel, shape: &JobShape<'_>, sides: &Sides) -> Decision {
    let op = shape.op;
    let cpu_finish = sides.cpu_queued_ns + cpu_time(model, op, shape.lengths, sides.cpu_threads);
    let gpu_finish = if sides.gpu {
        gpu_time(model, op, shape.lengths, shape.resident).map(|t| sides.gpu_queued_ns + t)
    } else {
        None
    };
    let single = |plan, finish| Decision {
        plan,
        cpu_finish_ns: cpu_finish,
        gpu_finish_ns: gpu_finish,
        plan_finish_ns: finish,
    };
    let Some(gpu_finish) = gpu_finish else {
        return single(Plan::Cpu, cpu_finish);
    };
    if shape.resident {
        // Only the GPU can read device memory.
        return single(Plan::Gpu, gpu_finish);
    }
    let best = if gpu_finish < cpu_finish {
        single(Plan::Gpu, gpu_finish)
    } else {
        single(Plan::Cpu, cpu_finish)
    };
    let bytes: u64 = shape.lengths.iter().sum();
    if bytes < MIN_SPLIT_BYTES || (shape.lengths.len() < 2 && !cuttable(op)) {
        return best;
    }
    // Both sides linear in the GPU's share f of the bytes:
    //   Qg + Fg + f·Vg = Qc + Fc + (1 − f)·Vc.
    let fixed_g = gpu_time(model, op, &[0], false).unwrap_or(0.0);
    let fixed_c = cpu_time(model, op, &[0], sides.cpu_threads);
    let var_g = (gpu_finish - sides.gpu_queued_ns - fixed_g).max(0.0);
    let var_c = (cpu_finish - sides.cpu_queued_ns - fixed_c).max(0.0);
    if var_g + var_c <= 0.0 {
        return best;
    }
    let f = ((sides.cpu_queued_ns + fixed_c + var_c - sides.gpu_queued_ns - fixed_g)
        / (var_g + var_c))
        .clamp(0.0, 1.0);
    let target = (f * bytes as f64) as u64;
    let split = candidates(shape, target)
        .into_iter()
        .map(|p| (p, split_finish(model, shape, sides, p)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match split {
        Some((p, finish)) if finish < best.plan_finish_ns * (1.0 - SPLIT_MARGIN) => Decision {
            plan: Plan::Split(p),
            plan_finish_ns: finish,
            ..best
        },
        _ => best,
    }
}

/// Crossing point of CPU and GPU for one op, jobs of `segments` segments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Crossover {
    NoGpu,
    GpuNeverFaster,
    GpuAlwaysFaster,
    /// The GPU is faster from this segment size up.
    At(u64),
}

/// Smallest segment size (512 B to 1 GiB) at which the GPU's predicted
/// time beats the CPU's, for idle backends and host data.
pub fn crossover(model: &CostModel, op: OpKind, segments: usize, cpu_threads: usize) -> Crossover {
    if model.op(op).and_then(|m| m.gpu).is_none() {
        return Crossover::NoGpu;
    }
    let gpu_wins = |size: u64| {
        let lengths = vec![size; segments.max(1)];
        let cpu = cpu_time(model, op, &lengths, cpu_threads);
        gpu_time(model, op, &lengths, false).is_some_and(|g| g < cpu)
    };
    let (lo, hi) = (512u64, 1u64 << 30);
    if gpu_wins(lo) {
        return Crossover::GpuAlwaysFaster;
    }
    if !gpu_wins(hi) {
        return Crossover::GpuNeverFaster;
    }
    // Bisection: the difference is linear in size, so it crosses once.
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

    /// CPU: 1 GB/s a core, 8 cores at 8×, 2 µs to start; GPU: 20 µs fixed and
    /// `gpu_gbps` through the link, 100 GB/s resident.
    fn model(gpu_gbps: f64) -> CostModel {
        let ops = OpKind::ALL
            .iter()
            .map(|op| {
                let m = OpModel {
                    cpu: CpuCost {
                        one_thread: LinearCost {
                            fixed_ns: 2_000.0,
                            ns_per_byte: 1.0,
                            ns_per_segment: 100.0,
                        },
                        threads: 8,
                        speedup: 8.0,
                    },
                    gpu: Some(GpuCost {
                        kernel: LinearCost {
                            fixed_ns: 20_000.0,
                            ns_per_byte: 0.01,
                            ns_per_segment: 10.0,
                        },
                        host: Some(LinearCost {
                            fixed_ns: 20_000.0,
                            ns_per_byte: 1.0 / gpu_gbps,
                            ns_per_segment: 10.0,
                        }),
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

    fn idle(cpu_threads: usize) -> Sides {
        Sides {
            cpu_threads,
            gpu: true,
            cpu_queued_ns: 0.0,
            gpu_queued_ns: 0.0,
        }
    }

    fn shape(op: OpKind, lengths: &[u64]) -> JobShape<'_> {
        JobShape {
            op,
            lengths,
            resident: false,
        }
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
        // GPU at 50 GB/s vs 8 GB/s of CPU: a split would give the CPU ~14%
        // and gain less than the margin only for some shapes; with the CPU
        // reserved down to one thread the GPU alone must win.
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
        // One huge digest segment is not cut.
        let d = decide(&m, &shape(OpKind::Sha256, &lengths), &idle(8));
        assert!(!matches!(d.plan, Plan::Split(_)), "{d:?}");
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
            resident: true,
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
    fn crossover_is_where_the_gpu_starts_winning() {
        let m = model(50.0);
        let Crossover::At(size) = crossover(&m, OpKind::Sha256, 1, 1) else {
            panic!("expected a crossing")
        };
        let t = |s: u64| {
            (
                cpu_time(&m, OpKind::Sha256, &[s], 1),
                gpu_time(&m, OpKind::Sha256, &[s], false).expect("gpu"),
            )
        };
        let (c, g) = t(size);
        assert!(g < c);
        let (c, g) = t(size - 32);
        assert!(g >= c);
        assert_eq!(
            crossover(&model(0.01), OpKind::Sha256, 1, 8),
            Crossover::GpuNeverFaster
        );
        let mut no_gpu = m.clone();
        no_gpu.ops.values_mut().for_each(|o| o.gpu = None);
        assert_eq!(crossover(&no_gpu, OpKind::Sha256, 1, 8), Crossover::NoGpu);
    }
}
