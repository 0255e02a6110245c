//! Learning and exploring, deterministic: the pure decision fed synthetic
//! observations (a simulated host whose true times are the model's times
//! a fixed factor, optionally with seeded noise), and the auto backend
//! with stand-in GPUs for the wiring (no timing asserted).

use super::explore::{EXPLORE_EVERY, MIN_OBSERVATIONS};
use super::*;
use crate::auto::decide::{decide_corrected, decide_stats, OpCosts};
use crate::auto::model::CostModel;

const OP: OpKind = OpKind::Blake3;
const MIB: u64 = 1 << 20;

/// CPU: 1 GB/s a core, 8 cores at full speed-up; GPU: 20 µs and
/// `gpu_gbps` from host memory, pinned and pageable alike (and resident).
fn model(gpu_gbps: f64) -> CostModel {
    crate::auto::test_models::model_with(8, 1.0, gpu_gbps, gpu_gbps, gpu_gbps)
}

fn idle() -> Sides {
    Sides {
        cpu_threads: 8,
        cores: 8,
        gpu: true,
        cpu_queued_ns: 0.0,
        gpu_queued_ns: 0.0,
    }
}

/// 4 x 16 MiB, pageable (never split): CPU and GPU only.
const LENGTHS: [u64; 4] = [16 * MIB; 4];

/// A host the model is `cpu` and `gpu` times wrong about (true time ÷
/// predicted), with noise of up to `noise` either way, seeded.
struct Sim {
    costs: OpCosts,
    stats: JobStats,
    sides: Sides,
    learner: Learner,
    truth_cpu: f64,
    truth_gpu: f64,
    noise: f64,
    seed: u64,
    /// The model's own decision and predictions.
    raw: Decision,
}

struct Step {
    plan: Plan,
    explored: bool,
}

impl Sim {
    fn new(gpu_gbps: f64, learn: bool) -> Sim {
        let costs = OpCosts::of(&model(gpu_gbps), OP);
        let stats = JobStats::of_lengths(&LENGTHS, HostMemory::Pageable);
        let raw = decide_stats(&costs, &stats, &idle(), || LENGTHS.iter().copied());
        Sim {
            costs,
            stats,
            sides: idle(),
            learner: Learner::new(learn),
            truth_cpu: 1.0,
            truth_gpu: 1.0,
            noise: 0.0,
            seed: 0x9e37_79b9_7f4a_7c15,
            raw,
        }
    }

    /// The model's GPU time ÷ its CPU time.
    fn predicted_ratio(&self) -> f64 {
        self.raw.gpu_finish_ns.unwrap() / self.raw.cpu_finish_ns
    }

    /// Makes the GPU really take `ratio` times the CPU's (true) time.
    fn gpu_really(mut self, ratio: f64) -> Sim {
        self.truth_gpu = ratio * self.truth_cpu / self.predicted_ratio();
        self
    }

    fn jitter(&mut self) -> f64 {
        // xorshift64: a fixed sequence in [1 - noise, 1 + noise].
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let u = (self.seed >> 11) as f64 / (1u64 << 53) as f64;
        1.0 + self.noise * (2.0 * u - 1.0)
    }

    /// Decides one job as the auto backend does, runs it on the simulated
    /// host and records what it took.
    fn step(&mut self) -> Step {
        let key = JobKey::of(OP, &self.stats).unwrap();
        let fix = self.learner.corrections(Some(key));
        let d = decide_corrected(&self.costs, &self.stats, &self.sides, &fix, || {
            LENGTHS.iter().copied()
        });
        let explored = self.learner.explore(&d, &self.sides, key);
        let plan = explored.unwrap_or(d.plan);
        let (side, predicted, truth) = match plan {
            Plan::Cpu => (Side::Cpu, self.raw.cpu_finish_ns, self.truth_cpu),
            Plan::Gpu => (Side::Gpu, self.raw.gpu_finish_ns.unwrap(), self.truth_gpu),
            Plan::Split(_) => panic!("pageable jobs are not split"),
        };
        let took = predicted * truth * self.jitter();
        self.learner.observe(key, side, Run::Whole, predicted, took);
        Step {
            plan,
            explored: explored.is_some(),
        }
    }

    fn run(&mut self, jobs: usize) -> Vec<Step> {
        (0..jobs).map(|_| self.step()).collect()
    }
}

/// The plans of the jobs the model chose (not explored).
fn chosen(steps: &[Step]) -> Vec<Plan> {
    steps
        .iter()
        .filter(|s| !s.explored)
        .map(|s| s.plan)
        .collect()
}

fn explored(steps: &[Step]) -> usize {
    steps.iter().filter(|s| s.explored).count()
}

/// At most one near-tie job in `EXPLORE_EVERY`.
fn within_bound(steps: &[Step]) -> bool {
    explored(steps) <= steps.len() / EXPLORE_EVERY as usize
}

#[test]
fn a_gpu_predicted_faster_but_really_slower_is_left_for_the_cpu() {
    // The model has the GPU 15% ahead; the CPU is really 40% faster.
    let mut sim = Sim::new(9.4, true).gpu_really(1.4);
    let r = sim.predicted_ratio();
    assert!((0.8..0.9).contains(&r), "{r}");
    assert_eq!(sim.raw.plan, Plan::Gpu);
    let steps = sim.run(400);
    let plans = chosen(&steps);
    // A warm-up run and one counted run of the GPU are enough.
    let switch = plans.iter().position(|p| *p == Plan::Cpu).unwrap();
    assert!(switch <= 2, "switched at job {switch}");
    assert!(plans[switch..].iter().all(|p| *p == Plan::Cpu));
    // The GPU is explored a little more while within the band.
    assert!(explored(&steps) <= MIN_OBSERVATIONS as usize);
    assert!(within_bound(&steps));
    let key = JobKey::of(OP, &sim.stats).unwrap();
    let gpu = sim.learner.estimate(key, Side::Gpu, Run::Whole).factor();
    assert!(gpu > 1.2, "{gpu}");
}

#[test]
fn exploring_finds_a_gpu_the_model_prices_a_little_slow() {
    // The model has the GPU 5% behind; it is really twice as fast.
    let model_alone = Sim::new(7.6, false).gpu_really(0.5).run(400);
    assert!(chosen(&model_alone).iter().all(|p| *p == Plan::Cpu));
    assert_eq!(explored(&model_alone), 0);

    let mut sim = Sim::new(7.6, true).gpu_really(0.5);
    let r = sim.predicted_ratio();
    assert!((1.0..1.1).contains(&r), "{r}");
    let steps = sim.run(400);
    let plans = chosen(&steps);
    let switch = plans.iter().position(|p| *p == Plan::Gpu).unwrap();
    // The 16th near tie explores (warm-up), the 32nd counts and moves it.
    assert!(
        switch <= 2 * EXPLORE_EVERY as usize,
        "switched at job {switch}"
    );
    assert!(plans[switch..].iter().all(|p| *p == Plan::Gpu));
    assert_eq!(explored(&steps), 2);
    assert!(within_bound(&steps));
}

#[test]
fn a_correct_model_keeps_its_decisions_and_explores_within_the_bound() {
    // Near ties on either side of the cross-over, the model right to 3%.
    for (gpu_gbps, plan) in [(7.6, Plan::Cpu), (9.4, Plan::Gpu)] {
        let mut sim = Sim::new(gpu_gbps, true);
        sim.noise = 0.03;
        assert_eq!(sim.raw.plan, plan);
        let steps = sim.run(2000);
        assert!(chosen(&steps).iter().all(|p| *p == plan), "{plan:?}");
        // The other side: a warm-up and `MIN_OBSERVATIONS` counted runs.
        assert_eq!(explored(&steps), 1 + MIN_OBSERVATIONS as usize, "{plan:?}");
        assert!(steps.iter().filter(|s| s.explored).all(|s| s.plan != plan));
        assert!(within_bound(&steps[..4 * EXPLORE_EVERY as usize]));
    }
}

#[test]
fn far_from_a_cross_over_nothing_is_explored() {
    // GPU predicted twice as fast, then twice as slow: no job explores,
    // even where the model is wrong (learning from the side that runs
    // corrects it then: the GPU, 3x slower than predicted, is left).
    for (gpu_gbps, truth, plan) in [(16.0, 1.0, Plan::Gpu), (4.0, 1.0, Plan::Cpu)] {
        let mut sim = Sim::new(gpu_gbps, true);
        sim.truth_gpu = truth;
        sim.noise = 0.2;
        assert!(!near_tie(&sim.raw));
        let steps = sim.run(500);
        assert_eq!(explored(&steps), 0);
        assert!(chosen(&steps).iter().all(|p| *p == plan));
    }
    let mut sim = Sim::new(16.0, true);
    sim.truth_gpu = 3.0;
    let steps = sim.run(100);
    assert_eq!(steps[0].plan, Plan::Gpu);
    assert!(chosen(&steps)
        .iter()
        .rev()
        .take(50)
        .all(|p| *p == Plan::Cpu));
}

#[test]
fn learning_off_decides_as_the_model_alone() {
    for gpu_gbps in [4.0, 7.6, 9.4, 16.0] {
        let mut sim = Sim::new(gpu_gbps, false).gpu_really(0.3);
        let steps = sim.run(100);
        assert!(steps.iter().all(|s| s.plan == sim.raw.plan && !s.explored));
        let key = JobKey::of(OP, &sim.stats).unwrap();
        assert_eq!(sim.learner.corrections(Some(key)), Corrections::NONE);
        assert!(sim.learner.learned().is_empty());
    }
}

#[test]
fn no_observations_are_no_corrections() {
    let learner = Learner::new(true);
    let stats = JobStats::of_lengths(&LENGTHS, HostMemory::Pinned);
    assert_eq!(
        learner.corrections(JobKey::of(OP, &stats)),
        Corrections::NONE
    );
    // A key observed leaves the others alone.
    let other = JobStats::of_lengths(&[4096; 64], HostMemory::Pinned);
    let key = JobKey::of(OP, &other).unwrap();
    learner.observe(key, Side::Gpu, Run::Whole, 1e6, 2e6);
    learner.observe(key, Side::Gpu, Run::Whole, 1e6, 2e6);
    assert_eq!(
        learner.corrections(JobKey::of(OP, &stats)),
        Corrections::NONE
    );
    assert!(learner.corrections(Some(key)).gpu > 1.0);
    assert_eq!(learner.corrections(None), Corrections::NONE);
}

#[test]
fn the_estimate_drops_the_warm_up_and_bounds_each_observation() {
    let e = Estimate::default().updated(100.0);
    assert_eq!((e.observations(), e.factor()), (0, 1.0));
    // One counted job moves the factor half way (in log) to it.
    let e = e.updated(2.0);
    assert_eq!(e.observations(), 1);
    assert!((e.factor() - 2f64.sqrt()).abs() < 1e-6, "{}", e.factor());
    // Many far-off jobs never take it past 4x.
    let mut slow = e;
    for _ in 0..100 {
        slow = slow.updated(1000.0);
    }
    assert!((slow.factor() - 4.0).abs() < 1e-3, "{}", slow.factor());
    // A settled estimate moves by at most ln 2 / SPAN on one outlier.
    let mut settled = Estimate::default();
    for _ in 0..20 {
        settled = settled.updated(1.0);
    }
    let jumped = settled.updated(50.0).factor();
    assert!(jumped <= (std::f64::consts::LN_2 / f64::from(SPAN)).exp() + 1e-6);
    assert!(jumped > 1.0);
    // Nonsense is counted, not learned.
    let e = settled.updated(f64::NAN).updated(0.0);
    assert_eq!(e.factor(), settled.factor());
    assert_eq!(Estimate::from_bits(e.to_bits()), e);
}

#[test]
fn keys_separate_shapes_memories_and_sides() {
    let class = |size: u64, n: usize| {
        ShapeClass::of(
            OpKind::Sha256,
            &JobStats::of_lengths(&vec![size; n], HostMemory::Pageable),
        )
    };
    // One total (256 MiB), two shapes, two keys.
    assert_ne!(class(64 << 10, 4096), class(16 * MIB, 16));
    assert_eq!(class(64 << 10, 4096), class(100 << 10, 5000));
    assert_eq!(
        class(512, 1),
        ShapeClass {
            segment: 0,
            count: 0
        }
    );
    assert_eq!(
        class(1 << 30, 1 << 20).segment as usize,
        SEGMENT_CLASSES - 1
    );
    assert_eq!(class(1, 1 << 20).count as usize, COUNT_CLASSES - 1);
    // Every cell index is in the table, and distinct.
    let mut seen = std::collections::HashSet::new();
    for op in OpKind::ALL {
        for mem in MEMORIES {
            for segment in 0..SEGMENT_CLASSES as u8 {
                for count in 0..COUNT_CLASSES as u8 {
                    let key = JobKey {
                        op,
                        mem,
                        class: ShapeClass { segment, count },
                    };
                    for run in [Run::Whole, Run::Part] {
                        assert!(seen.insert(key.cell(Side::Gpu, run)));
                        let cpu = key.cell(Side::Cpu, run);
                        assert!(cpu < CELLS);
                        if mem == MEMORIES[0] {
                            assert!(seen.insert(cpu));
                        }
                    }
                }
            }
        }
    }
    // The GPU learns per memory; the CPU once for both.
    let learner = Learner::new(true);
    let pinned = JobKey::of(OP, &JobStats::of_lengths(&LENGTHS, HostMemory::Pinned)).unwrap();
    let pageable = JobKey::of(OP, &JobStats::of_lengths(&LENGTHS, HostMemory::Pageable)).unwrap();
    for side in [Side::Cpu, Side::Gpu] {
        for _ in 0..3 {
            learner.observe(pinned, side, Run::Whole, 1e6, 2e6);
        }
    }
    let c = learner.corrections(Some(pageable));
    assert!(c.cpu > 1.0 && c.gpu == 1.0, "{c:?}");
    // Split parts not yet observed take the whole job's factor.
    assert_eq!(c.cpu_part, c.cpu);
    assert!(JobKey::of(OP, &JobStats::of_lengths(&LENGTHS, HostMemory::Device)).is_none());
    let learned = learner.learned();
    assert_eq!(learned.len(), 2);
    assert!(learned.iter().all(|f| f.observations == 2 && !f.split_part));
    assert_eq!(learned[0].memory, "host");
    assert_eq!(learned[1].memory, "pinned");
    assert_eq!(learned[0].segment_bytes_from, 16 * MIB);
    assert_eq!(learned[0].segments_from, 4);
}

#[test]
fn split_points_follow_the_parts_factors() {
    // Pinned 16 x 16 MiB, the GPU as fast as the CPU: split about evenly.
    let costs = OpCosts::of(&model(8.0), OP);
    let lengths = [16 * MIB; 16];
    let stats = JobStats::of_lengths(&lengths, HostMemory::Pinned);
    let gpu_segments = |fix: Corrections| {
        let d = decide_corrected(&costs, &stats, &idle(), &fix, || lengths.iter().copied());
        match d.plan {
            Plan::Split(p) => p.segment,
            other => panic!("{other:?}"),
        }
    };
    let even = gpu_segments(Corrections::NONE);
    let slow_gpu = gpu_segments(Corrections {
        gpu_part: 1.5,
        ..Corrections::NONE
    });
    let slow_cpu = gpu_segments(Corrections {
        cpu_part: 1.5,
        ..Corrections::NONE
    });
    assert!(
        slow_gpu < even && even < slow_cpu,
        "{slow_gpu} {even} {slow_cpu}"
    );
    // Parts that run far slower together than apart: no split.
    let d = decide_corrected(
        &costs,
        &stats,
        &idle(),
        &Corrections {
            gpu_part: 2.0,
            cpu_part: 2.0,
            ..Corrections::NONE
        },
        || lengths.iter().copied(),
    );
    assert!(!matches!(d.plan, Plan::Split(_)), "{d:?}");
}

mod backend {
    //! The auto backend's wiring, with a one-thread CPU backend for a GPU.

    use super::*;
    use crate::auto::{AutoBackend, ModelSource};
    use crate::backend::Backend;
    use crate::cpu::CpuBackend;
    use crate::job::{Data, DigestAlgo, Job};

    fn stand_in(gpu_gbps: f64, learn: bool) -> AutoBackend {
        AutoBackend::from_parts(
            CpuBackend::with_threads(2),
            Some(Box::new(CpuBackend::with_threads(1))),
            model(gpu_gbps),
            ModelSource::Defaults {
                reason: "test".into(),
            },
        )
        .with_learning(learn)
    }

    fn digest(data: &[u8]) -> Job<'_> {
        Job::Digest {
            algo: DigestAlgo::Sha256,
            segments: vec![Data::from(data)],
        }
    }

    #[test]
    fn jobs_that_ran_alone_are_learned_from() {
        // The GPU 1000x slower: every job on the CPU, whatever is learned.
        let data = vec![7u8; 1 << 20];
        let auto = stand_in(0.001, true);
        for _ in 0..5 {
            auto.run(&mut digest(&data)).unwrap();
        }
        let learned = auto.learned();
        assert_eq!(learned.len(), 1, "{learned:?}");
        let f = learned[0];
        assert_eq!((f.op, f.side, f.memory), (OpKind::Sha256, "cpu", "host"));
        assert_eq!(f.observations, 4, "all but the warm-up");
        assert!((0.25..=4.0).contains(&f.factor), "{}", f.factor);
        assert_eq!(auto.placements().explored_jobs, 0);
        assert_eq!(auto.placements().cpu_jobs, 5);

        let off = stand_in(0.001, false);
        for _ in 0..5 {
            off.run(&mut digest(&data)).unwrap();
        }
        assert!(!off.learning());
        assert!(off.learned().is_empty());
    }

    #[test]
    fn near_ties_are_explored_at_most_one_in_sixteen() {
        // Model: the GPU 7% behind on 1 MiB digests (the real one-thread
        // stand-in may be anything): what is learned may end the tie, so
        // only the bound and the accounting are asserted.
        let auto = stand_in(0.95, true);
        let data = vec![3u8; 1 << 20];
        let d = auto.decide(&digest(&data));
        assert_eq!(d.plan, Plan::Cpu);
        assert!(near_tie(&d), "{d:?}");
        let jobs = 64;
        for _ in 0..jobs {
            auto.run(&mut digest(&data)).unwrap();
        }
        let p = auto.placements();
        assert!(p.explored_jobs <= jobs / EXPLORE_EVERY, "{p:?}");
        assert_eq!(p.cpu_jobs + p.gpu_jobs + p.split_jobs, jobs);
        for f in auto.learned() {
            assert!((0.25..=4.0).contains(&f.factor), "{f:?}");
        }
    }
}

#[test]
fn rsa_key_sizes_learn_apart() {
    let class = |op: OpKind, size: u64, n: usize| {
        ShapeClass::of(
            op,
            &JobStats::of_lengths(&vec![size; n], HostMemory::Pageable),
        )
    };
    let rsa = |bytes| class(OpKind::RsaPrivate, bytes, 64);
    // 1024, 2048 and 4096-bit messages: three classes (in 4x classes from
    // 1 KiB, as other ops are, they were one).
    assert_eq!(
        [rsa(128).segment, rsa(256).segment, rsa(512).segment],
        [0, 1, 2]
    );
    assert_eq!(
        class(OpKind::Sha256, 128, 64),
        class(OpKind::Sha256, 512, 64)
    );
    assert_eq!(rsa(256).count, class(OpKind::Sha256, 256, 64).count);
    for (bytes, k) in [(128, 0u8), (256, 1), (512, 2)] {
        let c = ShapeClass {
            segment: k,
            count: 0,
        };
        assert_eq!(c.segment_bytes_from(OpKind::RsaPrivate), bytes);
    }
    // Observations of one size leave another's factor alone.
    let key = |bytes| {
        JobKey::of(
            OpKind::RsaPrivate,
            &JobStats::of_lengths(&vec![bytes; 64], HostMemory::Pageable),
        )
    };
    assert_ne!(key(128), key(512));
}
