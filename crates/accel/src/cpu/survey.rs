//! The one serial pass over a job's segments before the parallel work: the
//! checks every backend applies (the rules of `backend::precheck`, which a
//! test holds this to) and the totals the auto backend decides with. The
//! auto backend surveys a job once and hands the survey on, so deciding
//! adds no pass of its own (on 512 B x 131072 jobs a pass costs ~5 ns a
//! segment: ~10% of the CPU's work on a 16-core host).

use rayon::prelude::*;

use crate::error::SegmentErrorKind;
use crate::job::{Data, DataMut, Job, MAX_SEGMENT_LEN};

/// A job's totals and rejected segments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Survey {
    pub bytes: u64,
    pub segments: usize,
    /// Length of the longest segment.
    pub largest: u64,
    /// Whether some segment lives in device memory.
    pub device: bool,
    /// Segments that must not be processed, by ascending index (most jobs
    /// have none, so nothing is allocated per segment).
    rejected: Vec<(usize, SegmentErrorKind)>,
}

/// Surveys `items` by `see`, in order or on the pool.
fn walk<T: Sync>(items: &[T], parallel: bool, see: impl Fn(&T) -> Seen + Sync) -> Survey {
    // A loop per run of segments: a fold moving the survey through every
    // step ran at 4x the time.
    let run = |first: usize, run: &[T]| {
        let mut s = Survey::default();
        for (j, item) in run.iter().enumerate() {
            let (len, device, bad) = see(item);
            s.add(first + j, len, device, bad);
        }
        s
    };
    if !parallel {
        return run(0, items);
    }
    items
        .par_chunks(PARALLEL_CHUNK)
        .enumerate()
        .map(|(k, chunk)| run(k * PARALLEL_CHUNK, chunk))
        .reduce(Survey::default, Survey::then)
}

fn too_large(len: u64) -> Option<SegmentErrorKind> {
    (len > MAX_SEGMENT_LEN).then_some(SegmentErrorKind::TooLarge {
        len,
        max: MAX_SEGMENT_LEN,
    })
}

fn on_device_mut(d: &DataMut<'_>) -> bool {
    matches!(d, DataMut::Device(_))
}

fn on_device(d: &Data<'_>) -> bool {
    matches!(d, Data::Device(_))
}

/// What the survey reads off one segment: its length, whether it is in
/// device memory, and why it must not be processed (if it must not).
type Seen = (u64, bool, Option<SegmentErrorKind>);

/// Jobs of at least this many segments are surveyed on the pool: a serial
/// pass (~4 ns a segment) was ~8% of a 512 B x 131072 seal on 16 cores.
/// At 16384 segments waking the pool costs more than it saves (H100 host,
/// five runs each; bench/JOURNAL.md): auto's GPU runs of SHA-256 4 KiB x 16384
/// from page-locked memory reached 0.94-0.96 of the forced GPU with the
/// pool's survey and 0.97-0.99 with a serial one, while the CPU's own
/// 4 KiB x 16384 cells did not move (SHA-256 17.2 against 17.1 GB/s,
/// BLAKE3 35.1 against 34.4); at 512 B x 131072 the serial survey cost the
/// CPU 8% (SHA-256 12.0 against 11.1, BLAKE3 10.5 against 9.7).
const PARALLEL_MIN_SEGMENTS: usize = 32 << 10;
/// `PARALLEL_MIN_SEGMENTS`, or `GVAULT_SURVEY_PARALLEL_MIN` where set: a
/// measuring knob (does waking the pool for the survey cost a GPU-bound
/// job more than the pass it saves?), read once.
fn parallel_min_segments() -> usize {
    crate::tuning::tuning()
        .survey_parallel_min
        .unwrap_or(PARALLEL_MIN_SEGMENTS)
}

/// Segments per parallel task: enough to amortise a task's cost.
const PARALLEL_CHUNK: usize = 4 << 10;

impl Survey {
    /// Surveys `job` in one pass on the calling thread.
    pub fn of(job: &Job<'_>) -> Survey {
        Self::walk(job, false)
    }

    /// As [`Survey::of`], spread over the current rayon pool when the job
    /// has many segments.
    pub fn of_parallel(job: &Job<'_>) -> Survey {
        Self::walk(job, job.len() >= parallel_min_segments())
    }

    fn walk(job: &Job<'_>, parallel: bool) -> Survey {
        let mut s = match job {
            Job::Seal { segments, .. } => walk(segments, parallel, |seg| {
                let len = seg.data.len() as u64;
                (len, on_device_mut(&seg.data), too_large(len))
            }),
            Job::Open { segments, .. } => walk(segments, parallel, |seg| {
                let len = seg.data.len() as u64;
                (len, on_device_mut(&seg.data), too_large(len))
            }),
            Job::Ctr { cipher, segments } => {
                let want = cipher.iv_len();
                walk(segments, parallel, |seg| {
                    let len = seg.data.len() as u64;
                    let bad = if seg.iv.len() != want {
                        Some(SegmentErrorKind::IvLength {
                            expected: want,
                            got: seg.iv.len(),
                        })
                    } else {
                        too_large(len)
                    };
                    (len, on_device_mut(&seg.data), bad)
                })
            }
            Job::Digest { segments, .. }
            | Job::Chunk { segments, .. }
            | Job::ChunkDigest { segments, .. } => walk(segments, parallel, |seg| {
                let len = seg.len() as u64;
                (len, on_device(seg), too_large(len))
            }),
            Job::RsaPrivate { key, segments } => walk(segments, parallel, |seg| {
                let bad = crate::backend::rsa_input_error(key, seg);
                (seg.len() as u64, false, bad)
            }),
            Job::RsaPrivateKeys { items } => walk(items, parallel, |it| {
                let bad = crate::backend::rsa_input_error(it.key, it.input);
                (it.input.len() as u64, false, bad)
            }),
        };
        s.segments = job.len();
        s
    }

    /// `self` followed by `next` (a later run of segments).
    fn then(mut self, mut next: Survey) -> Survey {
        self.bytes += next.bytes;
        self.largest = self.largest.max(next.largest);
        self.device |= next.device;
        self.rejected.append(&mut next.rejected);
        self
    }

    #[inline]
    fn add(&mut self, i: usize, len: u64, device: bool, bad: Option<SegmentErrorKind>) {
        self.bytes += len;
        self.largest = self.largest.max(len);
        self.device |= device;
        if let Some(kind) = bad {
            self.rejected.push((i, kind));
        }
    }

    /// Why segment `i` must not be processed, if it must not.
    pub fn rejected(&self, i: usize) -> Option<SegmentErrorKind> {
        if self.rejected.is_empty() {
            return None;
        }
        self.rejected
            .binary_search_by_key(&i, |(j, _)| *j)
            .ok()
            .map(|k| self.rejected[k].1.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::precheck;
    use crate::job::{CtrCipher, CtrSegment, DeviceSlice, DigestAlgo, SealSegment};
    use crate::types::{Aes256Key, CtrIv, Iv128, Iv64, Nonce96, TeaKey};

    fn rejections(s: &Survey) -> Vec<Option<SegmentErrorKind>> {
        (0..s.segments).map(|i| s.rejected(i)).collect()
    }

    #[test]
    fn ctr_rejections_and_totals_match_precheck() {
        let (aes, tea) = (Aes256Key::from_bytes([1; 32]), TeaKey::from_bytes([2; 16]));
        let mut bufs: Vec<Vec<u8>> = (0..6).map(|i| vec![0u8; 10 + i * 7]).collect();
        let ivs = [
            CtrIv::B128(Iv128::from_bytes([0; 16])),
            CtrIv::B64(Iv64::from_bytes([0; 8])),
            CtrIv::B128(Iv128::from_bytes([1; 16])),
            CtrIv::B64(Iv64::from_bytes([3; 8])),
            CtrIv::B128(Iv128::from_bytes([2; 16])),
            CtrIv::B128(Iv128::from_bytes([2; 16])),
        ];
        for cipher in [CtrCipher::Aes256(&aes), CtrCipher::Tea(&tea)] {
            let job = Job::Ctr {
                cipher,
                segments: bufs
                    .iter_mut()
                    .zip(ivs)
                    .map(|(b, iv)| CtrSegment {
                        iv,
                        data: DataMut::Host(b),
                    })
                    .collect(),
            };
            let s = Survey::of(&job);
            assert_eq!(rejections(&s), precheck(&job));
            assert!(rejections(&s).iter().any(Option::is_some));
            assert_eq!((s.bytes, s.segments, s.largest), (job.bytes(), 6, 45));
            assert!(!s.device);
        }
    }

    #[test]
    fn a_survey_on_the_pool_equals_one_in_order() {
        let aes = Aes256Key::from_bytes([1; 32]);
        let n = PARALLEL_MIN_SEGMENTS * 3 + 17;
        let mut bufs: Vec<Vec<u8>> = (0..n).map(|i| vec![0u8; i % 97]).collect();
        let job = Job::Ctr {
            cipher: CtrCipher::Aes256(&aes),
            segments: bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| CtrSegment {
                    // A wrong IV width here and there, in several tasks.
                    iv: if i % 5003 == 7 {
                        CtrIv::B64(Iv64::from_bytes([0; 8]))
                    } else {
                        CtrIv::B128(Iv128::from_bytes([0; 16]))
                    },
                    data: DataMut::Host(b),
                })
                .collect(),
        };
        let serial = Survey::of(&job);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .expect("pool");
        let parallel = pool.install(|| Survey::of_parallel(&job));
        assert_eq!(parallel, serial);
        assert!(serial.rejected.len() > 5, "{}", serial.rejected.len());
        assert_eq!(rejections(&serial), precheck(&job));
        assert_eq!((serial.bytes, serial.largest), (job.bytes(), 96));
    }

    #[test]
    fn device_segments_and_sizes_are_counted() {
        let key = Aes256Key::from_bytes([1; 32]);
        let mut host = vec![0u8; 100];
        // SAFETY: a stand-in that is never dereferenced: the survey reads
        // lengths and kinds only, and no backend runs this job.
        let dev = unsafe { DeviceSlice::new(0, 0x1000, 300) };
        let job = Job::Seal {
            key: &key,
            segments: vec![
                SealSegment {
                    nonce: Nonce96::from_parts(0, 0),
                    aad: b"",
                    data: DataMut::Host(&mut host),
                },
                SealSegment {
                    nonce: Nonce96::from_parts(0, 1),
                    aad: b"",
                    data: DataMut::Device(dev),
                },
            ],
        };
        let s = Survey::of(&job);
        assert_eq!(
            (s.bytes, s.segments, s.largest, s.device),
            (400, 2, 300, true)
        );
        assert_eq!(rejections(&s), precheck(&job));

        let a = vec![0u8; 5];
        let digest = Job::Digest {
            algo: DigestAlgo::Sha256,
            segments: vec![Data::from(&a), Data::Device(dev)],
        };
        let s = Survey::of(&digest);
        assert_eq!((s.bytes, s.largest, s.device), (305, 300, true));
        assert_eq!(rejections(&s), vec![None, None]);
    }

    #[test]
    fn rsa_input_lengths_match_precheck() {
        let key =
            crate::rsa_key::RsaPrivateKey::from_pem(include_str!("../../tests/data/rsa1024.pem"))
                .expect("key");
        let good = vec![0u8; key.size()];
        let short = vec![0u8; key.size() - 1];
        let job = Job::RsaPrivate {
            key: &key,
            segments: vec![&good, &short, &good],
        };
        let s = Survey::of(&job);
        assert_eq!(rejections(&s), precheck(&job));
        assert!(s.rejected(1).is_some());
    }
}
