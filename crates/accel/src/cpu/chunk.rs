//! Content-defined chunk boundaries with the `fastcdc` crate's 2020
//! algorithm (normalized chunking). Serial within a segment; segments run in
//! parallel. The fused job then hashes each chunk (keyed BLAKE3, and CRC-32C
//! when asked), chunks in parallel.

use fastcdc::v2020::FastCDC;
use rayon::prelude::*;

use crate::chunking::ChunkParams;
use crate::job::{ChunkSpan, DigestedChunk};
use crate::types::Blake3Key;

pub(super) fn boundaries(params: &ChunkParams, data: &[u8]) -> Vec<ChunkSpan> {
    FastCDC::with_level(
        data,
        params.min(),
        params.avg(),
        params.max(),
        params.normalization(),
    )
    .map(|c| ChunkSpan {
        offset: c.offset as u64,
        len: c.length as u32,
    })
    .collect()
}

/// Boundaries, then the keyed BLAKE3 (and, if asked, the CRC-32C) of every
/// chunk, chunks in parallel.
pub(super) fn digested(
    params: &ChunkParams,
    key: &Blake3Key,
    crc32c: bool,
    data: &[u8],
) -> Vec<DigestedChunk> {
    boundaries(params, data)
        .into_par_iter()
        .map(|span| {
            let at = span.offset as usize;
            let bytes = &data[at..at + span.len as usize];
            DigestedChunk {
                span,
                digest: *blake3::keyed_hash(key.expose(), bytes).as_bytes(),
                crc32c: crc32c.then(|| crc32c::crc32c(bytes)),
            }
        })
        .collect()
}
