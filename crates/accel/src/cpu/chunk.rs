//! Content-defined chunk boundaries with the `fastcdc` crate's 2020
//! algorithm (normalized chunking). Serial within a segment; segments run in
//! parallel.

use fastcdc::v2020::FastCDC;

use crate::chunking::ChunkParams;
use crate::job::ChunkSpan;

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
