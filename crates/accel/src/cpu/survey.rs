//! The one serial pass over a job's segments before the parallel work: the
//! checks every backend applies (the rules of `backend::precheck`, which a
//! test holds this to) and the totals the auto backend decides with. The
//! auto backend surveys a job once and hands the survey on, so deciding
//! adds no pass of its own (on 512 B x 131072 jobs a pass costs ~5 ns a
//! segment: ~10% of the CPU's work on a 16-core host).

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

impl Survey {
    /// Surveys `job` in one pass.
    pub fn of(job: &Job<'_>) -> Survey {
        let mut s = Survey {
            segments: job.len(),
            ..Survey::default()
        };
        match job {
            Job::Seal { segments, .. } => {
                for (i, seg) in segments.iter().enumerate() {
                    let len = seg.data.len() as u64;
                    s.add(i, len, on_device_mut(&seg.data), too_large(len));
                }
            }
            Job::Open { segments, .. } => {
                for (i, seg) in segments.iter().enumerate() {
                    let len = seg.data.len() as u64;
                    s.add(i, len, on_device_mut(&seg.data), too_large(len));
                }
            }
            Job::Ctr { cipher, segments } => {
                let want = cipher.iv_len();
                for (i, seg) in segments.iter().enumerate() {
                    let len = seg.data.len() as u64;
                    let bad = if seg.iv.len() != want {
                        Some(SegmentErrorKind::IvLength {
                            expected: want,
                            got: seg.iv.len(),
                        })
                    } else {
                        too_large(len)
                    };
                    s.add(i, len, on_device_mut(&seg.data), bad);
                }
            }
            Job::Digest { segments, .. }
            | Job::Chunk { segments, .. }
            | Job::ChunkDigest { segments, .. } => {
                for (i, seg) in segments.iter().enumerate() {
                    let len = seg.len() as u64;
                    s.add(i, len, on_device(seg), too_large(len));
                }
            }
            Job::RsaPrivate { key, segments } => {
                let want = key.size();
                for (i, seg) in segments.iter().enumerate() {
                    let bad = (seg.len() != want).then_some(SegmentErrorKind::InputLength {
                        expected: want,
                        got: seg.len(),
                    });
                    s.add(i, seg.len() as u64, false, bad);
                }
            }
        }
        s
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
            CtrIv::B128(Iv128([0; 16])),
            CtrIv::B64(Iv64([0; 8])),
            CtrIv::B128(Iv128([1; 16])),
            CtrIv::B64(Iv64([3; 8])),
            CtrIv::B128(Iv128([2; 16])),
            CtrIv::B128(Iv128([2; 16])),
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
