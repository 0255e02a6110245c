//! The forced-split sweep (`gvault bench primitive --split-sweep`): the
//! auto backend with its plan forced
//! to each segment boundary, timed in turn with the other columns, so that
//! the split the dispatcher picks can be compared with every split it
//! could have picked (is a 1.2x miss the planner's or the host's?).

use super::backend::AutoBackend;
use super::decide::{Plan, SplitPoint};
use crate::backend::Backend;
use crate::error::BackendError;
use crate::job::{Job, OpKind, SegmentResult};

/// The auto backend running every job as a split with the first
/// `gpu_segments` segments on the GPU and the rest on the CPU.
pub struct ForcedSplit<'a> {
    pub auto: &'a AutoBackend,
    pub gpu_segments: usize,
}

impl Backend for ForcedSplit<'_> {
    fn name(&self) -> &'static str {
        "auto-forced-split"
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        let plan = Plan::Split(SplitPoint {
            segment: self.gpu_segments,
            offset: 0,
        });
        self.auto.run_plan(job, plan)
    }
}

/// Column name of the split with `g` of `n` segments on the GPU.
pub fn column(g: usize, n: usize) -> String {
    format!("split-{g}/{n}")
}

/// How the auto backend's own plan reads in the sweep's output.
pub fn describe(plan: Plan, segments: usize) -> String {
    match plan {
        Plan::Cpu => "cpu".into(),
        Plan::Gpu => "gpu".into(),
        Plan::Split(at) if at.offset == 0 => column(at.segment, segments),
        Plan::Split(at) => format!("split at segment {} + {} B", at.segment, at.offset),
    }
}

/// The auto backend, remembering the plan it chose for the last job (the
/// extra decision costs a survey of the job: microseconds on the large
/// jobs a sweep is for).
pub struct Observed<'a> {
    pub auto: &'a AutoBackend,
    /// The op whose plan is recorded (an open's column also re-seals its
    /// buffers, untimed, through this backend).
    pub op: OpKind,
    pub last: std::sync::Mutex<Option<Plan>>,
}

impl Backend for Observed<'_> {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        if job.op() == self.op {
            let plan = self.auto.decide(job).plan;
            *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(plan);
        }
        self.auto.run(job)
    }
}

/// Median nanoseconds of one `auto.decide` on a GCM job (`op` seal or
/// open) over `bufs`: what choosing costs before any work, which the auto
/// column pays on every job and cpu-all does not.
pub fn decide_ns<B: AsMut<[u8]>>(auto: &AutoBackend, op: OpKind, bufs: &mut [B]) -> f64 {
    use crate::job::{DataMut, OpenSegment, SealSegment};
    use crate::types::{Aes256Key, Nonce96, Tag};
    let key = Aes256Key::from_bytes([7; 32]);
    let mut times: Vec<f64> = (0..101)
        .map(|_| {
            let job = if op == OpKind::AesGcmOpen {
                Job::Open {
                    key: &key,
                    segments: bufs
                        .iter_mut()
                        .map(|b| OpenSegment {
                            nonce: Nonce96::from_parts(1, 0),
                            aad: b"",
                            tag: Tag::from_bytes([0; 16]),
                            data: DataMut::Host(b.as_mut()),
                        })
                        .collect(),
                }
            } else {
                Job::Seal {
                    key: &key,
                    segments: bufs
                        .iter_mut()
                        .map(|b| SealSegment {
                            nonce: Nonce96::from_parts(1, 0),
                            aad: b"",
                            data: DataMut::Host(b.as_mut()),
                        })
                        .collect(),
                }
            };
            let start = std::time::Instant::now();
            std::hint::black_box(auto.decide(&job));
            start.elapsed().as_nanos() as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
