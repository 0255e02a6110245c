//! The one trait every backend implements: CPU, GPU, the dispatcher that
//! chooses between them, and (later) the client of the shared service.

use crate::error::{BackendError, SegmentErrorKind};
use crate::job::{Job, SegmentResult, MAX_SEGMENT_LEN};

pub trait Backend: Send + Sync {
    /// A short name for logs and benchmark columns ("cpu", "gpu", "auto").
    fn name(&self) -> &'static str;

    /// Runs a job. `Err` means the job could not run at all; otherwise there
    /// is one result per segment, in order.
    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError>;
}

/// Checks that every backend applies before touching data, so that all of
/// them reject the same segments with the same errors. Returns, per segment,
/// `Some(error)` for a segment that must not be processed.
pub fn precheck(job: &Job<'_>) -> Vec<Option<SegmentErrorKind>> {
    let too_large = |len: usize| {
        (len as u64 > MAX_SEGMENT_LEN).then_some(SegmentErrorKind::TooLarge {
            len: len as u64,
            max: MAX_SEGMENT_LEN,
        })
    };
    match job {
        Job::Seal { segments, .. } => segments.iter().map(|s| too_large(s.data.len())).collect(),
        Job::Open { segments, .. } => segments.iter().map(|s| too_large(s.data.len())).collect(),
        Job::Ctr { cipher, segments } => segments
            .iter()
            .map(|s| {
                if s.iv.len() != cipher.iv_len() {
                    Some(SegmentErrorKind::IvLength {
                        expected: cipher.iv_len(),
                        got: s.iv.len(),
                    })
                } else {
                    too_large(s.data.len())
                }
            })
            .collect(),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => {
            segments.iter().map(|s| too_large(s.len())).collect()
        }
        Job::RsaPrivate { key, segments } => segments
            .iter()
            .map(|s| {
                (s.len() != key.size()).then_some(SegmentErrorKind::InputLength {
                    expected: key.size(),
                    got: s.len(),
                })
            })
            .collect(),
    }
}
