//! What the auto backend reads off a job before deciding: totals (from the
//! CPU backend's survey), segment lengths for placing a split, and whether the host data is
//! page-locked (sampled, since the check is a driver call per segment).

use super::decide::JobStats;
use super::model::HostMemory;
use crate::cpu::Survey;
use crate::job::{DataMut, Job};

/// Segments checked for page-locked memory: the first, the last and evenly
/// spaced ones between. A job counts as pinned when all of them are (a
/// wrong guess costs time, never correctness: the GPU backend checks every
/// segment itself).
const PINNED_SAMPLES: usize = 16;

/// The decision's view of a job's survey (the CPU backend's one pass over
/// it): `mem` is `Device` when any segment is in device memory, else
/// `Pageable` until [`host_is_pinned`] says otherwise.
pub(crate) fn stats(survey: &Survey) -> JobStats {
    JobStats {
        bytes: survey.bytes,
        segments: survey.segments,
        largest: survey.largest,
        mem: if survey.device {
            HostMemory::Device
        } else {
            HostMemory::Pageable
        },
    }
}

/// Every segment's length, in order.
pub(crate) fn lengths<'j>(job: &'j Job<'_>) -> Box<dyn Iterator<Item = u64> + 'j> {
    match job {
        Job::Seal { segments, .. } => Box::new(segments.iter().map(|s| s.data.len() as u64)),
        Job::Open { segments, .. } => Box::new(segments.iter().map(|s| s.data.len() as u64)),
        Job::Ctr { segments, .. } => Box::new(segments.iter().map(|s| s.data.len() as u64)),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => Box::new(segments.iter().map(|s| s.len() as u64)),
        Job::RsaPrivate { segments, .. } => Box::new(segments.iter().map(|s| s.len() as u64)),
        Job::RsaPrivateKeys { items } => Box::new(items.iter().map(|i| i.input.len() as u64)),
    }
}

/// The host bytes of segment `i`, if it is in host memory.
fn host_bytes<'j>(job: &'j Job<'_>, i: usize) -> Option<&'j [u8]> {
    let host_mut = |d: &'j DataMut<'_>| match d {
        DataMut::Host(b) => Some(&b[..]),
        DataMut::Device(_) => None,
    };
    match job {
        Job::Seal { segments, .. } => host_mut(&segments.get(i)?.data),
        Job::Open { segments, .. } => host_mut(&segments.get(i)?.data),
        Job::Ctr { segments, .. } => host_mut(&segments.get(i)?.data),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => segments.get(i)?.host(),
        Job::RsaPrivate { segments, .. } => segments.get(i).copied(),
        Job::RsaPrivateKeys { items } => items.get(i).map(|x| x.input),
    }
}

/// Whether the sampled non-empty host segments of `job` are all page-locked
/// by `is_locked` (false when none is sampled).
pub(crate) fn host_is_pinned(job: &Job<'_>, is_locked: fn(&[u8]) -> bool) -> bool {
    let n = job.len();
    if n == 0 {
        return false;
    }
    let picks = n.min(PINNED_SAMPLES);
    let mut seen = false;
    for k in 0..picks {
        let i = if picks == 1 {
            0
        } else {
            k * (n - 1) / (picks - 1)
        };
        match host_bytes(job, i) {
            Some([]) => {}
            Some(b) if is_locked(b) => seen = true,
            _ => return false,
        }
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Data, DigestAlgo};

    #[test]
    fn stats_and_lengths_read_the_job() {
        let a = vec![1u8; 10];
        let b = vec![2u8; 300];
        let job = Job::Digest {
            algo: DigestAlgo::Sha256,
            segments: vec![Data::from(&a), Data::from(&b), Data::from(&a)],
        };
        let s = stats(&Survey::of(&job));
        assert_eq!((s.bytes, s.segments, s.largest), (320, 3, 300));
        assert_eq!(s.mem, HostMemory::Pageable);
        assert_eq!(lengths(&job).collect::<Vec<_>>(), vec![10, 300, 10]);
    }

    #[test]
    fn pinned_means_every_sampled_segment() {
        let bufs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 64]).collect();
        let job = Job::Digest {
            algo: DigestAlgo::Md5,
            segments: bufs.iter().map(Data::from).collect(),
        };
        assert!(host_is_pinned(&job, |_| true));
        assert!(!host_is_pinned(&job, |_| false));
        // Segment 39 (always sampled, the last) is not locked.
        assert!(!host_is_pinned(&job, |b| b[0] != 39));
        let empty = Job::Digest {
            algo: DigestAlgo::Md5,
            segments: vec![],
        };
        assert!(!host_is_pinned(&empty, |_| true));
    }
}
