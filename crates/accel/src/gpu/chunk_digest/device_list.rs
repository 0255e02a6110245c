//! The fused job with its chunk list built on the device
//! (`GVAULT_FUSED_DESC=device`, the default): after the section walks,
//! `fused_count` checks every section list and counts its chunks, 1 KiB
//! BLAKE3 chunks and reduce groups, `fused_scan` sums them, and
//! `fused_scatter` writes the BLAKE3 piece and level descriptors in place
//! (kernels/fused.cu). The host waits once, for the totals (and the
//! overflow and consistency flags), to size the buffers; the BLAKE3 kernels
//! then run on the same stream and one download brings back every chunk's
//! digest, offset, length and CRC-32C. (The host path, which builds the
//! descriptors itself from downloaded section lists, spends ~5 ms of a
//! 4 GiB group's ~12.6 on that on an H100.)

use super::super::abi::{
    B3Level, B3Piece, FusedStat, FUSED_BAD as BAD, FUSED_HEAD_WORDS as HEAD_WORDS,
    FUSED_LEVELS as LEVELS, FUSED_OVERFLOW as OVERFLOWED, FUSED_SCAN_BLOCK,
};
use super::super::blake3::{key_words, launch_level, launch_pieces, Pieces};
use super::super::cdc::{resolve, OnDevice, OVERFLOW};
use super::super::launch::{
    FusedCountArgs, FusedScanArgs, FusedScatterArgs, Shape, FUSED_COUNT, FUSED_SCAN, FUSED_SCATTER,
};
use super::super::runtime::{download, sync, DevError, Device, DeviceBuffer, Trace};
use super::super::stage::{as_bytes, upload_on};
use crate::chunking::ChunkParams;
use crate::job::{ChunkSpan, DigestedChunk};
use crate::types::Blake3Key;

const PIECE_BYTES: u64 = std::mem::size_of::<B3Piece>() as u64;
const LEVEL_BYTES: u64 = std::mem::size_of::<B3Level>() as u64;
/// Output bytes a chunk: digest, offset (u64), length (u32), CRC (u32).
const OUT_BYTES: u64 = 32 + 8 + 4 + 4;
const BLOCK: u32 = 256;

/// Chunks, digests (and CRC-32Cs) of segments on the device.
pub(crate) fn run_group(
    dev: &Device,
    params: &ChunkParams,
    key: &Blake3Key,
    crc32c: bool,
    segs: &[OnDevice],
) -> Result<Vec<Vec<DigestedChunk>>, DevError> {
    let Some(r) = resolve(dev, params, segs)? else {
        return Ok(segs.iter().map(|_| Vec::new()).collect());
    };
    let stream = r.stream;
    let mut trace = Trace::new("fused-device", stream);
    let nsegs = segs.len() as u32;
    let ns = r.sections;
    let stats = dev.alloc(ns as usize * std::mem::size_of::<FusedStat>())?;
    let head = dev.alloc(HEAD_WORDS * 8)?;
    // SAFETY: head is a live allocation of HEAD_WORDS words; ordered before
    // the kernels on the same stream.
    unsafe { cudarc::driver::sys::cuMemsetD8Async(head.ptr, 0, HEAD_WORDS * 8, stream) }
        .result()
        .map_err(|e| super::super::runtime::err("zeroing the fused head", e))?;
    let overflow_flag = r.flags.ptr + nsegs as u64 * 4;
    let per_section = Shape {
        grid: dev.grid_for(ns, BLOCK),
        block: BLOCK,
        shared: 0,
    };
    let count = FusedCountArgs {
        job: r.job.ptr.into(),
        segs: r.segs.ptr.into(),
        nsegs,
        nsections: ns,
        lists: r.lists.ptr.into(),
        secs: r.secs.ptr.into(),
        stats: stats.ptr.into(),
        head: head.ptr.into(),
    };
    // SAFETY: job, segs, lists and secs are the resolved buffers (ns
    // sections, cap words each), queued earlier on this stream; stats holds
    // ns FusedStats, head HEAD_WORDS words.
    unsafe { dev.launch(FUSED_COUNT, per_section, stream, count)? };
    let scan = FusedScanArgs {
        stats: stats.ptr.into(),
        nsections: ns,
        overflow: overflow_flag.into(),
        head: head.ptr.into(),
    };
    let one_block = Shape {
        grid: 1,
        block: FUSED_SCAN_BLOCK,
        shared: 0,
    };
    // SAFETY: one block of FUSED_SCAN_BLOCK threads; overflow_flag is
    // flags[nsegs] of the resolved buffers.
    unsafe { dev.launch(FUSED_SCAN, one_block, stream, scan)? };
    // The one wait: the totals size everything after it.
    sync(stream)?;
    let mut head_bytes = [0u8; HEAD_WORDS * 8];
    download(&mut head_bytes, head.ptr)?;
    let word =
        |i: usize| u64::from_le_bytes(head_bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    trace.mark("count and scan");
    if word(OVERFLOWED) != 0 {
        return Err(OVERFLOW.into());
    }
    if word(BAD) != 0 {
        return Err(format!(
            "cdc resolution: section {} of the group has an inconsistent chunk list (internal error)",
            word(BAD) - 1
        ));
    }
    let (nchunks, nkib) = (word(0), word(1));
    let groups: Vec<u64> = (0..LEVELS).map(|l| word(2 + l)).collect();
    let n = u32::try_from(nchunks)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("fused: {nchunks} chunks for {ns} sections (internal error)"))?;

    let pieces = dev.alloc((nchunks * PIECE_BYTES) as usize)?;
    let levels = dev.alloc((LEVELS as u64 * nchunks * LEVEL_BYTES) as usize)?;
    let out = dev.alloc((nchunks * OUT_BYTES) as usize)?;
    let (digests, offsets, lens, crcs) = (
        out.ptr,
        out.ptr + 32 * nchunks,
        out.ptr + 40 * nchunks,
        out.ptr + 44 * nchunks,
    );
    let scatter = FusedScatterArgs {
        job: r.job.ptr.into(),
        segs: r.segs.ptr.into(),
        nsegs,
        nsections: ns,
        lists: r.lists.ptr.into(),
        secs: r.secs.ptr.into(),
        stats: stats.ptr.into(),
        nchunks,
        crc: crc32c as u32,
        pieces: pieces.ptr.into(),
        levels: levels.ptr.into(),
        offsets: offsets.into(),
        lens: lens.into(),
    };
    // SAFETY: stats holds the scanned prefixes, whose totals are nchunks
    // (pieces, offsets, lens hold that many entries, levels LEVELS times
    // that); the kernel writes no chunk index >= nchunks.
    unsafe { dev.launch(FUSED_SCATTER, per_section, stream, scatter)? };

    let (words, flags) = key_words(Some(key));
    let key_buf = dev.alloc(32)?;
    upload_on(stream, key_buf.ptr, as_bytes(&words))?;
    let first_groups = groups[0].max(1) as usize;
    let cvs = [
        dev.alloc(nkib as usize * 32)?,
        dev.alloc(first_groups * 32)?,
    ];
    let regs: Option<[DeviceBuffer; 2]> = if crc32c {
        Some([dev.alloc(nkib as usize * 4)?, dev.alloc(first_groups * 4)?])
    } else {
        None
    };
    let pieces_on = Pieces {
        ptr: pieces.ptr,
        n,
        total: nkib,
    };
    let chunk_crc = regs.as_ref().map(|r| (r[0].ptr, crcs));
    launch_pieces(
        dev,
        key_buf.ptr,
        flags,
        0,
        pieces_on,
        cvs[0].ptr,
        digests,
        chunk_crc,
        stream,
    )?;
    let mut input = 0usize;
    for (l, &g) in groups.iter().enumerate().take_while(|(_, &g)| g > 0) {
        let lv = levels.ptr + l as u64 * nchunks * LEVEL_BYTES;
        let io = (cvs[input].ptr, cvs[1 - input].ptr, digests);
        let crc_io = regs
            .as_ref()
            .map(|r| (r[input].ptr, r[1 - input].ptr, crcs));
        launch_level(dev, key_buf.ptr, flags, (lv, n, g), io, crc_io, stream)?;
        input = 1 - input;
    }
    sync(stream)?;
    trace.mark("scatter and blake3");
    let mut bytes = vec![0u8; (nchunks * OUT_BYTES) as usize];
    dev.download_pinned(&mut bytes, out.ptr)?;
    let result = split(segs, &bytes, nchunks as usize, crc32c);
    trace.mark("download and split");
    result
}

/// Each segment's chunks from the packed output (digests, offsets,
/// lengths, CRCs, each an array over the group's chunks in order): a
/// segment's chunks must tile it exactly, and together use every chunk.
fn split(
    segs: &[OnDevice],
    bytes: &[u8],
    n: usize,
    crc32c: bool,
) -> Result<Vec<Vec<DigestedChunk>>, DevError> {
    let u32_at = |base: usize, c: usize| {
        u32::from_le_bytes(bytes[base + 4 * c..base + 4 * c + 4].try_into().expect("4"))
    };
    let mut out = Vec::with_capacity(segs.len());
    let mut c = 0usize;
    for (si, seg) in segs.iter().enumerate() {
        let mut chunks = Vec::new();
        let mut pos = 0u64;
        while pos < seg.len as u64 {
            let bad = || {
                format!(
                    "fused: device chunk list does not tile segment {si} at {pos} (internal error)"
                )
            };
            if c >= n {
                return Err(bad());
            }
            let at = 32 * n + 8 * c;
            let offset = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
            let len = u32_at(40 * n, c);
            if offset != pos || len == 0 {
                return Err(bad());
            }
            chunks.push(DigestedChunk {
                span: ChunkSpan { offset, len },
                digest: bytes[32 * c..32 * c + 32].try_into().expect("32"),
                crc32c: crc32c.then(|| u32_at(44 * n, c)),
            });
            pos += len as u64;
            c += 1;
        }
        if pos != seg.len as u64 {
            return Err(format!(
                "fused: device chunks of segment {si} end at {pos} of {} (internal error)",
                seg.len
            ));
        }
        out.push(chunks);
    }
    if c != n {
        return Err(format!(
            "fused: {n} device chunks, {c} used (internal error)"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{split, OnDevice};

    fn packed(chunks: &[(u64, u32)]) -> Vec<u8> {
        let n = chunks.len();
        let mut b = vec![0u8; n * 48];
        for (c, &(off, len)) in chunks.iter().enumerate() {
            b[32 * c] = c as u8;
            b[32 * n + 8 * c..32 * n + 8 * c + 8].copy_from_slice(&off.to_le_bytes());
            b[40 * n + 4 * c..40 * n + 4 * c + 4].copy_from_slice(&len.to_le_bytes());
            b[44 * n + 4 * c..44 * n + 4 * c + 4].copy_from_slice(&(c as u32 + 7).to_le_bytes());
        }
        b
    }

    #[test]
    fn split_tiles_segments_and_rejects_gaps() {
        let segs = [
            OnDevice { ptr: 0, len: 10 },
            OnDevice { ptr: 0, len: 0 },
            OnDevice { ptr: 0, len: 5 },
        ];
        let good = packed(&[(0, 4), (4, 6), (0, 5)]);
        let got = split(&segs, &good, 3, true).unwrap();
        assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 0, 1]);
        assert_eq!(got[2][0].digest[0], 2);
        assert_eq!(got[0][1].crc32c, Some(8));
        assert_eq!(split(&segs, &good, 3, false).unwrap()[0][0].crc32c, None);
        for bad in [
            packed(&[(0, 4), (5, 5), (0, 5)]), // gap
            packed(&[(0, 4), (4, 7), (0, 5)]), // past the end
            packed(&[(0, 4), (4, 0), (0, 5)]), // empty chunk
        ] {
            assert!(split(&segs, &bad, 3, true).is_err());
        }
        // too few chunks, or one left over
        assert!(split(&segs, &packed(&[(0, 4), (4, 6)]), 2, true).is_err());
        let extra = packed(&[(0, 4), (4, 6), (0, 5), (0, 1)]);
        assert!(split(&segs, &extra, 4, true).is_err());
    }
}
