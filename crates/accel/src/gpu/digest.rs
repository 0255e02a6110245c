//! Digest jobs on one device: BLAKE3 (`blake3.rs`), and SHA-256, MD5,
//! CRC-32 and CRC-32C (`serial.rs`: one thread per segment; the CRCs' long
//! segments cut into pieces first, `crc_cut.rs`). Host segments
//! are staged through the pinned slots; device-resident ones are read where
//! they lie; only digests come back.

use super::blake3::{self as b3, Input};
use super::crc_cut;
use super::runtime::Device;
use super::serial;
use crate::error::{BackendError, SegmentErrorKind};
use crate::job::{Data, Digest, DigestAlgo, Output, SegmentResult};

/// The inputs that passed the precheck, and the results slots for the rest.
pub(crate) fn inputs<'a>(
    dev: &Device,
    segments: &[Data<'a>],
    pre: Vec<Option<SegmentErrorKind>>,
) -> (Vec<Input<'a>>, Vec<usize>, Vec<SegmentResult>) {
    let mut inputs = Vec::new();
    let mut index = Vec::new();
    let mut results: Vec<SegmentResult> = Vec::with_capacity(segments.len());
    for (i, (seg, pre)) in segments.iter().zip(pre).enumerate() {
        if let Some(kind) = pre {
            results.push(Err(kind.at(i)));
            continue;
        }
        match seg {
            Data::Host(b) => inputs.push(Input::Host(b)),
            Data::Device(d) if d.device() as usize == dev.ordinal => inputs.push(Input::Device {
                ptr: d.ptr(),
                len: d.len(),
            }),
            Data::Device(_) => {
                results.push(Err(SegmentErrorKind::Internal(
                    "device segment is not on the job's device".into(),
                )
                .at(i)));
                continue;
            }
        }
        index.push(i);
        results.push(Ok(Output::Done));
    }
    (inputs, index, results)
}

/// A chunking job: boundaries per segment.
pub(crate) fn run_chunk(
    dev: &Device,
    params: &crate::chunking::ChunkParams,
    segments: &[Data<'_>],
    pre: Vec<Option<SegmentErrorKind>>,
) -> Result<Vec<SegmentResult>, BackendError> {
    let (inputs, index, mut results) = inputs(dev, segments, pre);
    let spans = super::cdc::chunk_all(dev, params, &inputs)
        .map_err(|e| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name)))?;
    for (i, c) in index.into_iter().zip(spans) {
        results[i] = Ok(Output::Chunks(c));
    }
    Ok(results)
}

/// The fused job: chunks and their keyed BLAKE3 digests per segment.
pub(crate) fn run_chunk_digest(
    dev: &Device,
    params: &crate::chunking::ChunkParams,
    key: &crate::types::Blake3Key,
    crc32c: bool,
    segments: &[Data<'_>],
    pre: Vec<Option<SegmentErrorKind>>,
) -> Result<Vec<SegmentResult>, BackendError> {
    let (inputs, index, mut results) = inputs(dev, segments, pre);
    let chunks = super::chunk_digest::run(dev, params, key, crc32c, &inputs)
        .map_err(|e| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name)))?;
    for (i, c) in index.into_iter().zip(chunks) {
        results[i] = Ok(Output::DigestedChunks(c));
    }
    Ok(results)
}

pub(crate) fn run(
    dev: &Device,
    algo: &DigestAlgo<'_>,
    segments: &[Data<'_>],
    pre: Vec<Option<SegmentErrorKind>>,
) -> Result<Vec<SegmentResult>, BackendError> {
    let device_err =
        |e: String| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name));
    let (inputs, index, mut results) = inputs(dev, segments, pre);
    let digests: Vec<Digest> = match algo {
        DigestAlgo::Blake3 | DigestAlgo::Blake3Keyed(_) => {
            let key = match algo {
                DigestAlgo::Blake3Keyed(k) => Some(*k),
                _ => None,
            };
            b3::hash_all(dev, key, &inputs)
                .map_err(device_err)?
                .into_iter()
                .map(Digest::B256)
                .collect()
        }
        DigestAlgo::Crc32 | DigestAlgo::Crc32c => {
            let poly = match algo {
                DigestAlgo::Crc32 => crc_cut::Poly::Ieee,
                _ => crc_cut::Poly::Castagnoli,
            };
            let cut = crc_cut::cut(&inputs);
            let crcs: Vec<u32> = serial::hash_all(dev, *algo, &cut.pieces)
                .map_err(device_err)?
                .into_iter()
                .map(|d| match d {
                    Digest::Crc(c) => Ok(c),
                    other => Err(format!("a CRC kernel returned {other:?}")),
                })
                .collect::<Result<_, _>>()
                .map_err(device_err)?;
            cut.combine(poly, &crcs)
                .into_iter()
                .map(Digest::Crc)
                .collect()
        }
        DigestAlgo::Sha256 | DigestAlgo::Md5 => {
            serial::hash_all(dev, *algo, &inputs).map_err(device_err)?
        }
    };
    for (i, d) in index.into_iter().zip(digests) {
        results[i] = Ok(Output::Digest(d));
    }
    Ok(results)
}
