//! Cutting a job in two at a [`SplitPoint`] and putting the results back
//! together, so that a split job's results equal a single backend's: the
//! parts borrow the original buffers, a CTR segment cut inside has its
//! counter advanced, and errors keep their original segment indices.

use super::decide::{SplitPoint, CUT_ALIGN};
use crate::error::BackendError;
use crate::job::{
    CtrSegment, DataMut, Job, OpenSegment, SealSegment, SegmentResult, MAX_SEGMENT_LEN,
};
use crate::types::{CtrIv, Iv128, Iv64};

fn reborrow<'s>(d: &'s mut DataMut<'_>) -> DataMut<'s> {
    match d {
        DataMut::Host(b) => DataMut::Host(b),
        DataMut::Device(s) => DataMut::Device(*s),
    }
}

/// The counter `blocks` blocks after `iv`, wrapping as the CPU and GPU
/// kernels do (128-bit and 64-bit big-endian integers).
fn advance(iv: CtrIv, blocks: u64) -> CtrIv {
    match iv {
        CtrIv::B128(b) => CtrIv::B128(Iv128::from_bytes(
            u128::from_be_bytes(*b.as_bytes())
                .wrapping_add(blocks as u128)
                .to_be_bytes(),
        )),
        CtrIv::B64(b) => CtrIv::B64(Iv64::from_bytes(
            u64::from_be_bytes(*b.as_bytes())
                .wrapping_add(blocks)
                .to_be_bytes(),
        )),
    }
}

fn halves<'s, T, U>(
    segments: &'s mut [T],
    at: usize,
    mut part: impl FnMut(&'s mut T) -> U,
) -> (Vec<U>, Vec<U>) {
    let (head, tail) = segments.split_at_mut(at);
    (
        head.iter_mut().map(&mut part).collect(),
        tail.iter_mut().map(&mut part).collect(),
    )
}

/// The GPU part (before `at`) and the CPU part (from `at`) of `job`.
pub(crate) fn split<'s>(
    job: &'s mut Job<'_>,
    at: SplitPoint,
) -> Result<(Job<'s>, Job<'s>), BackendError> {
    let n = job.len();
    let bad = |why: &str| Err(BackendError::InvalidJob(format!("split at {at:?}: {why}")));
    if at.segment > n || (at.segment == n && at.offset > 0) {
        return bad("beyond the job");
    }
    if at.offset > 0 && !matches!(job, Job::Ctr { .. }) {
        return bad("only CTR segments may be cut inside");
    }
    Ok(match job {
        Job::Seal { key, segments } => {
            let key = *key;
            let (g, c) = halves(segments, at.segment, |s| SealSegment {
                nonce: s.nonce,
                aad: s.aad,
                data: reborrow(&mut s.data),
            });
            (
                Job::Seal { key, segments: g },
                Job::Seal { key, segments: c },
            )
        }
        Job::Open { key, segments } => {
            let key = *key;
            let (g, c) = halves(segments, at.segment, |s| OpenSegment {
                nonce: s.nonce,
                aad: s.aad,
                tag: s.tag,
                data: reborrow(&mut s.data),
            });
            (
                Job::Open { key, segments: g },
                Job::Open { key, segments: c },
            )
        }
        Job::Ctr { cipher, segments } => {
            let cipher = *cipher;
            let ctr = |s: &'s mut CtrSegment<'_>| CtrSegment {
                iv: s.iv,
                data: reborrow(&mut s.data),
            };
            if at.offset == 0 {
                let (g, c) = halves(segments, at.segment, ctr);
                (
                    Job::Ctr {
                        cipher,
                        segments: g,
                    },
                    Job::Ctr {
                        cipher,
                        segments: c,
                    },
                )
            } else {
                let (head, tail) = segments.split_at_mut(at.segment);
                let (cut, rest) = tail
                    .split_first_mut()
                    .expect("at.segment < n checked above");
                let iv = cut.iv;
                let len = cut.data.len() as u64;
                if !at.offset.is_multiple_of(CUT_ALIGN) || at.offset >= len || len > MAX_SEGMENT_LEN
                {
                    return bad("a cut must fall on a block boundary inside a valid segment");
                }
                let Some(buf) = cut.data.host_mut() else {
                    return bad("device-resident segments are not cut");
                };
                let (a, b) = buf.split_at_mut(at.offset as usize);
                let mut g: Vec<CtrSegment<'s>> = head.iter_mut().map(ctr).collect();
                g.push(CtrSegment {
                    iv,
                    data: DataMut::Host(a),
                });
                let mut c = vec![CtrSegment {
                    iv: advance(iv, at.offset / iv.len() as u64),
                    data: DataMut::Host(b),
                }];
                c.extend(rest.iter_mut().map(ctr));
                (
                    Job::Ctr {
                        cipher,
                        segments: g,
                    },
                    Job::Ctr {
                        cipher,
                        segments: c,
                    },
                )
            }
        }
        Job::Digest { algo, segments } => {
            let (g, c) = segments.split_at(at.segment);
            let algo = *algo;
            (
                Job::Digest {
                    algo,
                    segments: g.to_vec(),
                },
                Job::Digest {
                    algo,
                    segments: c.to_vec(),
                },
            )
        }
        Job::Chunk { params, segments } => {
            let (g, c) = segments.split_at(at.segment);
            let params = *params;
            (
                Job::Chunk {
                    params,
                    segments: g.to_vec(),
                },
                Job::Chunk {
                    params,
                    segments: c.to_vec(),
                },
            )
        }
        Job::ChunkDigest {
            params,
            key,
            crc32c,
            segments,
        } => {
            let (g, c) = segments.split_at(at.segment);
            let (params, key, crc32c) = (*params, *key, *crc32c);
            (
                Job::ChunkDigest {
                    params,
                    key,
                    crc32c,
                    segments: g.to_vec(),
                },
                Job::ChunkDigest {
                    params,
                    key,
                    crc32c,
                    segments: c.to_vec(),
                },
            )
        }
        Job::RsaPrivate { key, segments } => {
            let key = *key;
            let (g, c) = segments.split_at(at.segment);
            (
                Job::RsaPrivate {
                    key,
                    segments: g.to_vec(),
                },
                Job::RsaPrivate {
                    key,
                    segments: c.to_vec(),
                },
            )
        }
        Job::RsaPrivateKeys { items } => {
            let (g, c) = items.split_at(at.segment);
            (
                Job::RsaPrivateKeys { items: g.to_vec() },
                Job::RsaPrivateKeys { items: c.to_vec() },
            )
        }
    })
}

/// The results of the whole job from those of its parts, in order, with
/// the CPU part's indices shifted back and a cut segment's two halves
/// joined (the first error wins).
pub(crate) fn merge(
    at: SplitPoint,
    mut gpu: Vec<SegmentResult>,
    cpu: Vec<SegmentResult>,
) -> Vec<SegmentResult> {
    let shift = |r: SegmentResult| {
        r.map_err(|mut e| {
            e.index += at.segment;
            e
        })
    };
    let mut cpu = cpu.into_iter().map(shift);
    if at.offset > 0 {
        if let (Some(head), Some(tail)) = (gpu.pop(), cpu.next()) {
            gpu.push(match (head, tail) {
                (Err(e), _) => Err(e),
                (Ok(_), Err(e)) => Err(e),
                (Ok(out), Ok(_)) => Ok(out),
            });
        }
    }
    gpu.extend(cpu);
    gpu
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SegmentErrorKind;
    use crate::job::Output;

    #[test]
    fn counters_advance_and_wrap_like_the_kernels() {
        let iv = CtrIv::B128(Iv128::from_bytes([0xff; 16]));
        assert_eq!(advance(iv, 1), CtrIv::B128(Iv128::from_bytes([0; 16])));
        let iv = CtrIv::B64(Iv64::from_bytes([0, 0, 0, 0, 0, 0, 0, 0xff]));
        assert_eq!(
            advance(iv, 2),
            CtrIv::B64(Iv64::from_bytes([0, 0, 0, 0, 0, 0, 1, 1]))
        );
    }

    #[test]
    fn merge_restores_indices_and_joins_cut_segments() {
        let err = |i| Err(SegmentErrorKind::AuthenticationFailed.at(i));
        let at = SplitPoint {
            segment: 2,
            offset: 16,
        };
        let gpu = vec![Ok(Output::Done), err(1), Ok(Output::Done)];
        let cpu = vec![err(0), Ok(Output::Done), err(2)];
        let all = merge(at, gpu, cpu);
        assert_eq!(
            all,
            vec![Ok(Output::Done), err(1), err(2), Ok(Output::Done), err(4)]
        );
    }
}
