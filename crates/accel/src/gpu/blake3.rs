//! BLAKE3 (plain and keyed) on the GPU: `blake3_chunks` hashes every 1 KiB
//! chunk of every segment in parallel into a job-wide array of chaining
//! values, then `blake3_reduce` merges them, 16 to 1 per launch, up the
//! left-balanced tree; only the 32-byte digests come back. The `_crc32c`
//! kernel variants also compute each segment's CRC-32C from the same loads
//! (per-KiB registers, combined up the same tree).

use super::abi::{B3Level, B3Piece, B3_CRC_REP_PAIR_BYTES, B3_GROUP as GROUP};
use super::launch::{
    B3ChunksArgs, B3ChunksCrcArgs, B3ReduceArgs, B3ReduceCrcArgs, Kernel, Shape, BLAKE3_CHUNKS,
    BLAKE3_CHUNKS_CRC32C, BLAKE3_CHUNKS_CRC32C_REP2, BLAKE3_CHUNKS_CRC32C_REP4, BLAKE3_REDUCE,
    BLAKE3_REDUCE_CRC32C,
};
use super::runtime::{upload, DevError, Device, DeviceBuffer};
use super::stage::{as_bytes, cut, stage_host, upload_descs};
use crate::types::Blake3Key;

const CHUNKS_BLOCK: u32 = 128;
const REDUCE_BLOCK: u32 = 128;
const KEYED_HASH: u32 = 16;
const IV: [u32; 8] = [
    0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
];

/// How `blake3_chunks_crc32c*` looks its CRC-32C tables up (kernels/README.md,
/// "Fused CRC-32C"): `slice8`, slicing by 8 over 8 KiB of tables shared by a
/// warp's lanes (bank conflicts); `rep2` / `rep4`, slicing by 2 / 4 over
/// tables replicated per lane (64 / 128 KiB, conflict-free).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CrcScheme {
    Slice8,
    Rep2,
    Rep4,
}

impl CrcScheme {
    /// `GVAULT_B3_CRC` (slice8, rep2 or rep4) when set, so the schemes can be
    /// timed side by side in one build; otherwise rep2 where a block may
    /// have 66 KiB of shared memory (sm_70/72, sm_80 on), else slice8.
    /// Measured on the H100 (fused 1 GiB x 4 resident): rep2 179 GB/s, rep4
    /// 136, slice8 138, against 388 without the CRC.
    pub(crate) fn pick(
        var: Result<String, std::env::VarError>,
        cc: (i32, i32),
    ) -> Result<Self, DevError> {
        match var {
            Err(std::env::VarError::NotPresent) => Ok(match cc {
                (major, _) if major >= 8 => Self::Rep2,
                (7, 0) | (7, 2) => Self::Rep2,
                _ => Self::Slice8,
            }),
            Ok(v) => match v.as_str() {
                "slice8" => Ok(Self::Slice8),
                "rep2" => Ok(Self::Rep2),
                "rep4" => Ok(Self::Rep4),
                _ => Err(format!(
                    "GVAULT_B3_CRC={v:?}: expected \"slice8\", \"rep2\" or \"rep4\""
                )),
            },
            Err(e) => Err(format!("GVAULT_B3_CRC: {e}")),
        }
    }

    fn kernel(self) -> Kernel<B3ChunksCrcArgs> {
        match self {
            Self::Slice8 => BLAKE3_CHUNKS_CRC32C,
            Self::Rep2 => BLAKE3_CHUNKS_CRC32C_REP2,
            Self::Rep4 => BLAKE3_CHUNKS_CRC32C_REP4,
        }
    }

    /// Threads a block (the kernels' __launch_bounds__).
    fn block(self) -> u32 {
        match self {
            Self::Slice8 => CHUNKS_BLOCK,
            Self::Rep2 => 512,
            Self::Rep4 => 1024,
        }
    }

    /// Dynamic shared memory a block (the replicated tables).
    fn dynamic_shared(self) -> u32 {
        match self {
            Self::Slice8 => 0,
            Self::Rep2 => B3_CRC_REP_PAIR_BYTES,
            Self::Rep4 => 2 * B3_CRC_REP_PAIR_BYTES,
        }
    }

    /// Grid for `total` chunks: the replicated schemes build 64-128 KiB of
    /// tables a block, so their grid is one resident wave (2 or 1 blocks an
    /// SM at 64 registers) and the grid-stride loop covers the rest.
    fn grid(self, dev: &Device, total: u64) -> u32 {
        let grid = dev.grid_for(total, self.block());
        match self {
            Self::Slice8 => grid,
            Self::Rep2 => grid.min(dev.multiprocessors.max(1) * 2),
            Self::Rep4 => grid.min(dev.multiprocessors.max(1)),
        }
    }
}

/// Chunks of a segment: an empty one is one empty chunk.
pub(crate) fn chunks_of(len: u64) -> u64 {
    len.div_ceil(1024).max(1)
}

/// One segment to hash: host bytes or a device address.
#[derive(Clone, Copy)]
pub(crate) enum Input<'a> {
    Host(&'a [u8]),
    Device { ptr: u64, len: usize },
}

impl Input<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            Input::Host(b) => b.len(),
            Input::Device { len, .. } => *len,
        }
    }
}

/// The key words and flags of a plain or keyed hash.
pub(crate) fn key_words(key: Option<&Blake3Key>) -> ([u32; 8], u32) {
    match key {
        None => (IV, 0),
        Some(k) => {
            let mut w = [0u32; 8];
            for (i, c) in k.expose().chunks(4).enumerate() {
                w[i] = u32::from_le_bytes(c.try_into().expect("4-byte chunk"));
            }
            (w, KEYED_HASH)
        }
    }
}

/// Digests of `inputs`, in order.
pub(crate) fn hash_all(
    dev: &Device,
    key: Option<&Blake3Key>,
    inputs: &[Input<'_>],
) -> Result<Vec<[u8; 32]>, DevError> {
    Ok(hash(dev, key, inputs, false)?.0)
}

/// Digests, and CRC-32Cs when asked, of a job's inputs, in order.
pub(crate) type Hashed = (Vec<[u8; 32]>, Option<Vec<u32>>);

/// Digests of `inputs`, in order, and with `crc32c` each input's CRC-32C
/// (computed by the same kernels from the same loads).
pub(crate) fn hash(
    dev: &Device,
    key: Option<&Blake3Key>,
    inputs: &[Input<'_>],
    crc32c: bool,
) -> Result<Hashed, DevError> {
    dev.bind()?;
    if inputs.is_empty() {
        return Ok((Vec::new(), crc32c.then(Vec::new)));
    }
    let (words, flags) = key_words(key);
    let key_buf = dev.alloc(32)?;
    upload(key_buf.ptr, as_bytes(&words))?;
    let counts: Vec<u64> = inputs.iter().map(|i| chunks_of(i.len() as u64)).collect();
    let mut firsts = Vec::with_capacity(counts.len());
    let mut total = 0u64;
    for &c in &counts {
        firsts.push(total);
        total += c;
    }
    let cvs = dev.alloc((total as usize) * 32)?;
    let digests = dev.alloc(inputs.len() * 32)?;
    // Per-KiB CRC registers and the per-segment results.
    let crc = if crc32c {
        Some((dev.alloc(total as usize * 4)?, dev.alloc(inputs.len() * 4)?))
    } else {
        None
    };
    let crc_at = |base: u64| crc.as_ref().map(|(c, out)| (c.ptr + base * 4, out.ptr));

    let mut host_pieces: Vec<&[u8]> = Vec::new();
    let mut host_descs: Vec<B3Piece> = Vec::new();
    let mut dev_descs: Vec<B3Piece> = Vec::new();
    for (s, input) in inputs.iter().enumerate() {
        let root = (counts[s] == 1) as u32;
        match *input {
            Input::Host(bytes) => {
                for (at, piece) in cut(bytes) {
                    host_pieces.push(piece);
                    host_descs.push(B3Piece {
                        offset: 0,
                        len: piece.len() as u64,
                        first_chunk: firsts[s] + (at / 1024) as u64,
                        counter: (at / 1024) as u64,
                        seg: s as u32,
                        root,
                    });
                }
            }
            Input::Device { ptr, len } => dev_descs.push(B3Piece {
                offset: ptr,
                len: len as u64,
                first_chunk: firsts[s],
                counter: 0,
                seg: s as u32,
                root,
            }),
        }
    }
    let max_batch = super::runtime::DESC_BYTES / std::mem::size_of::<B3Piece>();
    stage_host(dev, &host_pieces, max_batch, None, |slot, batch| {
        let mut descs: Vec<B3Piece> = batch
            .iter()
            .map(|st| B3Piece {
                offset: st.off as u64,
                ..host_descs[st.idx]
            })
            .collect();
        let base = rebase(&mut descs);
        upload_descs(slot, &descs)?;
        launch_chunks(
            dev,
            key_buf.ptr,
            flags,
            slot.dev,
            slot.dev_desc,
            &descs,
            cvs.ptr + base * 32,
            digests.ptr,
            crc_at(base),
            slot.stream,
        )
    })?;
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;
    let mut trace = super::runtime::Trace::new("blake3", stream);
    trace.mark("host pieces");
    // Kept alive until the stream is synchronised below.
    let mut dev_desc_buf = None;
    if !dev_descs.is_empty() {
        let base = rebase(&mut dev_descs);
        let buf = dev.alloc(std::mem::size_of_val(dev_descs.as_slice()))?;
        // One 40-byte piece per input: several MB for a fused job's chunks.
        dev.upload_pinned(buf.ptr, as_bytes(&dev_descs))?;
        launch_chunks(
            dev,
            key_buf.ptr,
            flags,
            0,
            buf.ptr,
            &dev_descs,
            cvs.ptr + base * 32,
            digests.ptr,
            crc_at(base),
            stream,
        )?;
        dev_desc_buf = Some(buf);
    }
    trace.mark("device chunks");
    let lens: Vec<u64> = inputs.iter().map(|i| i.len() as u64).collect();
    let reduce_bufs = reduce(
        dev,
        key_buf.ptr,
        flags,
        &lens,
        &firsts,
        &cvs,
        digests.ptr,
        crc.as_ref().map(|(c, out)| (c.ptr, out.ptr)),
        stream,
    )?;
    // One synchronisation for the device chunks and every reduce level.
    super::runtime::sync(stream)?;
    drop((reduce_bufs, dev_desc_buf));
    trace.mark("reduce");
    let mut out = vec![0u8; inputs.len() * 32];
    dev.download_pinned(&mut out, digests.ptr)?;
    let crcs = match &crc {
        Some((_, per_seg)) => {
            let mut bytes = vec![0u8; inputs.len() * 4];
            dev.download_pinned(&mut bytes, per_seg.ptr)?;
            Some(
                bytes
                    .chunks(4)
                    .map(|c| u32::from_le_bytes(c.try_into().expect("4-byte CRC")))
                    .collect(),
            )
        }
        None => None,
    };
    Ok((
        out.chunks(32)
            .map(|c| c.try_into().expect("32-byte digest"))
            .collect(),
        crcs,
    ))
}

/// Rebases `descs` so their chunks count from 0 (the kernel's index) and
/// returns the job-wide index of the first, by which the CV pointer moves.
pub(crate) fn rebase(descs: &mut [B3Piece]) -> u64 {
    let base = descs.first().map_or(0, |d| d.first_chunk);
    for d in descs.iter_mut() {
        d.first_chunk -= base;
    }
    base
}

/// Launches `blake3_chunks` over `descs` (rebased, already at `desc_ptr`);
/// with `crc` = (per-KiB registers, moved like `cvs`; per-segment CRCs),
/// `blake3_chunks_crc32c`.
#[allow(clippy::too_many_arguments)]
fn launch_chunks(
    dev: &Device,
    key: u64,
    flags: u32,
    data: u64,
    desc_ptr: u64,
    descs: &[B3Piece],
    cvs: u64,
    digests: u64,
    crc: Option<(u64, u64)>,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    let Some(last) = descs.last() else {
        return Ok(());
    };
    let total = last.first_chunk + chunks_of(last.len);
    let n = u32::try_from(descs.len()).map_err(|_| "blake3: over 2^32 pieces in one launch")?;
    let pieces = Pieces {
        ptr: desc_ptr,
        n,
        total,
    };
    launch_pieces(dev, key, flags, data, pieces, cvs, digests, crc, stream)
}

/// Piece descriptors already on the device: `n` of them at `ptr`, covering
/// `total` 1 KiB chunks (the last piece's first_chunk + its chunks).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pieces {
    pub ptr: u64,
    pub n: u32,
    pub total: u64,
}

/// Launches `blake3_chunks` (or with `crc` its CRC-32C variant) over pieces
/// that lie on the device.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_pieces(
    dev: &Device,
    key: u64,
    flags: u32,
    data: u64,
    pieces: Pieces,
    cvs: u64,
    digests: u64,
    crc: Option<(u64, u64)>,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    if pieces.n == 0 {
        return Ok(());
    }
    let total = pieces.total;
    // SAFETY (both launches): data + offset ranges are staged slot bytes or
    // caller-guaranteed device memory; cvs/digests (and the CRC arrays)
    // hold every index the descriptors name; block and shared memory are
    // what the chosen kernel was written for.
    match crc {
        Some((crcs, crc_out)) => {
            let scheme = CrcScheme::pick(
                crate::tuning::tuning()
                    .b3_crc
                    .clone()
                    .ok_or(std::env::VarError::NotPresent),
                dev.compute_capability,
            )?;
            let shape = Shape {
                grid: scheme.grid(dev, total),
                block: scheme.block(),
                shared: scheme.dynamic_shared(),
            };
            let args = B3ChunksCrcArgs {
                key_in: key.into(),
                flags,
                data: data.into(),
                pieces: pieces.ptr.into(),
                npieces: pieces.n,
                total_chunks: total,
                cvs: cvs.into(),
                digests: digests.into(),
                crcs: crcs.into(),
                crc_out: crc_out.into(),
            };
            unsafe { dev.launch(scheme.kernel(), shape, stream, args) }
        }
        None => {
            let shape = Shape {
                grid: dev.grid_for(total, CHUNKS_BLOCK),
                block: CHUNKS_BLOCK,
                shared: 0,
            };
            let args = B3ChunksArgs {
                key_in: key.into(),
                flags,
                data: data.into(),
                pieces: pieces.ptr.into(),
                npieces: pieces.n,
                total_chunks: total,
                cvs: cvs.into(),
                digests: digests.into(),
            };
            unsafe { dev.launch(BLAKE3_CHUNKS, shape, stream, args) }
        }
    }
}

/// Every reduce level up front: per level, one descriptor per segment that
/// still has more than one CV, and the level's group count.
fn levels(lens: &[u64], firsts: &[u64], crc: bool) -> Vec<(Vec<B3Level>, u64)> {
    let mut out: Vec<(Vec<B3Level>, u64)> = Vec::new();
    let mut node = 1024u64; // bytes under one full CV at this level
    let mut level: Vec<B3Level> = lens
        .iter()
        .zip(firsts)
        .enumerate()
        .filter(|(_, (&len, _))| chunks_of(len) > 1)
        .map(|(s, (&len, &first_in))| B3Level {
            first_in,
            count: chunks_of(len),
            seg: s as u32,
            ..B3Level::default()
        })
        .collect();
    while !level.is_empty() {
        let mut groups = 0u64;
        let full = if crc { crc_shift(node) } else { 0 };
        for l in level.iter_mut() {
            l.first_out = groups;
            groups += l.count.div_ceil(GROUP);
            if crc {
                let len = lens[l.seg as usize];
                l.crc_full = full;
                l.crc_last = crc_shift(len - (l.count - 1) * node);
            }
        }
        let next = level
            .iter()
            .filter(|l| l.count > GROUP)
            .map(|l| B3Level {
                first_in: l.first_out,
                count: l.count.div_ceil(GROUP),
                seg: l.seg,
                ..B3Level::default()
            })
            .collect();
        out.push((std::mem::replace(&mut level, next), groups));
        node = node.saturating_mul(GROUP);
    }
    out
}

/// Merges the chunk CVs (and CRC registers) of every segment with more than
/// one chunk, level by level, until each has its root digest (and CRC).
/// All level descriptors go up in one copy and the launches queue on
/// `stream` without synchronising; the returned buffers must outlive the
/// caller's synchronisation.
#[allow(clippy::too_many_arguments)]
fn reduce(
    dev: &Device,
    key: u64,
    flags: u32,
    lens: &[u64],
    firsts: &[u64],
    cvs: &DeviceBuffer,
    digests: u64,
    crc: Option<(u64, u64)>,
    stream: cudarc::driver::sys::CUstream,
) -> Result<Vec<DeviceBuffer>, DevError> {
    let levels = levels(lens, firsts, crc.is_some());
    let Some((_, first_groups)) = levels.first() else {
        return Ok(Vec::new());
    };
    let all: Vec<B3Level> = levels.iter().flat_map(|(l, _)| l.iter().copied()).collect();
    let desc = dev.alloc(std::mem::size_of_val(all.as_slice()))?;
    // About one 40-byte level per multi-chunk input: MB for fused jobs.
    dev.upload_pinned(desc.ptr, as_bytes(&all))?;
    let tmp = dev.alloc(*first_groups as usize * 32)?;
    let cv_bufs = [cvs.ptr, tmp.ptr];
    let crc_tmp = match crc {
        Some(_) => Some(dev.alloc(*first_groups as usize * 4)?),
        None => None,
    };
    let crc_bufs = match (crc, &crc_tmp) {
        (Some((regs, _)), Some(t)) => [regs, t.ptr],
        _ => [0, 0],
    };
    let crc_final = crc.map_or(0, |(_, f)| f);
    let mut input = 0usize;
    let mut at = 0usize;
    for (level, groups) in &levels {
        let lv = desc.ptr + (at * std::mem::size_of::<B3Level>()) as u64;
        let n = u32::try_from(level.len()).map_err(|_| "blake3: over 2^32 reduce descriptors")?;
        let crc_io = crc.map(|_| (crc_bufs[input], crc_bufs[1 - input], crc_final));
        let io = (cv_bufs[input], cv_bufs[1 - input], digests);
        launch_level(dev, key, flags, (lv, n, *groups), io, crc_io, stream)?;
        at += level.len();
        input = 1 - input;
    }
    let mut keep = vec![desc, tmp];
    keep.extend(crc_tmp);
    Ok(keep)
}

/// Launches one reduce level: `level` = (descriptors on the device, their
/// count, the level's group count, or an upper bound: groups past the last
/// descriptor's are skipped); `io` = (CVs in, CVs out, digests); with
/// `crc` = (registers in, registers out, per-segment CRCs), the CRC variant.
pub(crate) fn launch_level(
    dev: &Device,
    key: u64,
    flags: u32,
    level: (u64, u32, u64),
    io: (u64, u64, u64),
    crc: Option<(u64, u64, u64)>,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    let (levels, nlevels, total_groups) = level;
    let (cvs_in, cvs_out, digests) = io;
    let shape = Shape {
        grid: dev.grid_for(total_groups, REDUCE_BLOCK),
        block: REDUCE_BLOCK,
        shared: 0,
    };
    // SAFETY (both launches): the caller guarantees that cvs_in holds every
    // first_in + count of the nlevels descriptors at `levels`, cvs_out (and
    // the CRC arrays alike) every first_out + groups, and digests every
    // segment index they name. Stream order separates the levels.
    match crc {
        Some((crc_in, crc_out, crc_final)) => {
            let args = B3ReduceCrcArgs {
                key_in: key.into(),
                flags,
                levels: levels.into(),
                nlevels,
                total_groups,
                cvs_in: cvs_in.into(),
                cvs_out: cvs_out.into(),
                digests: digests.into(),
                crc_in: crc_in.into(),
                crc_out: crc_out.into(),
                crc_final: crc_final.into(),
            };
            unsafe { dev.launch(BLAKE3_REDUCE_CRC32C, shape, stream, args) }
        }
        None => {
            let args = B3ReduceArgs {
                key_in: key.into(),
                flags,
                levels: levels.into(),
                nlevels,
                total_groups,
                cvs_in: cvs_in.into(),
                cvs_out: cvs_out.into(),
                digests: digests.into(),
            };
            unsafe { dev.launch(BLAKE3_REDUCE, shape, stream, args) }
        }
    }
}

/// x^(8 * 2^k) modulo the CRC-32C polynomial for k = 0..64 (also the
/// kernels' `B3_CRC_X8POW`, generated from it: gpu/abi.rs).
pub(crate) fn crc_pow2() -> &'static [u32; 64] {
    super::crc_cut::pow2(super::crc_cut::Poly::Castagnoli)
}

/// x^(8 len) modulo the CRC-32C polynomial (bit-reflected, x^0 = bit 31):
/// the factor that moves a CRC register past `len` more bytes, so that
/// crc(A || B) = crc_mul(crc_shift(|B|), crc(A)) ^ crc(B) (as zlib's
/// crc32_combine).
pub(crate) fn crc_shift(len: u64) -> u32 {
    super::crc_cut::shift(super::crc_cut::Poly::Castagnoli, len)
}

#[cfg(test)]
mod tests {
    use super::{crc_pow2, crc_shift, levels, CrcScheme};

    /// a * b modulo the CRC-32C polynomial (`b3_crc_mul` in
    /// kernels/blake3.cu).
    fn crc_mul(a: u32, b: u32) -> u32 {
        super::super::crc_cut::mul(super::super::crc_cut::Poly::Castagnoli, a, b)
    }

    /// Square and multiply, the reference for the table-driven crc_shift.
    fn slow_shift(len: u64) -> u32 {
        let (mut power, mut square, mut n) = (1u32 << 31, 1u32 << 23, len);
        while n > 0 {
            if n & 1 == 1 {
                power = crc_mul(square, power);
            }
            square = crc_mul(square, square);
            n >>= 1;
        }
        power
    }

    #[test]
    fn crc_shift_table_matches_square_and_multiply_and_the_kernel() {
        for len in [
            0u64,
            1,
            2,
            1023,
            1024,
            1025,
            16 << 10,
            (1 << 20) + 77,
            u64::MAX,
        ] {
            assert_eq!(crc_shift(len), slow_shift(len), "len {len}");
        }
        // The kernels' copy, as generated (hex words, 8 a row).
        let header = super::super::abi::crc_pow_header();
        let kernel: Vec<u32> = header
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter_map(|w| w.strip_prefix("0x")?.strip_suffix('u'))
            .map(|w| u32::from_str_radix(w, 16).expect("hex"))
            .collect();
        assert_eq!(kernel, crc_pow2().to_vec());
        // x^8, x^16, x^32 mod P (as fused.cu's hand-written table had them)
        assert_eq!(&kernel[..3], &[0x0080_0000, 0x0000_8000, 0x82f6_3b78]);
    }

    #[test]
    fn crc_scheme_follows_the_env_var_and_the_device() {
        use std::env::VarError::NotPresent;
        assert_eq!(
            CrcScheme::pick(Err(NotPresent), (9, 0)),
            Ok(CrcScheme::Rep2)
        );
        assert_eq!(
            CrcScheme::pick(Err(NotPresent), (8, 9)),
            Ok(CrcScheme::Rep2)
        );
        assert_eq!(
            CrcScheme::pick(Err(NotPresent), (7, 5)),
            Ok(CrcScheme::Slice8)
        );
        for (v, want) in [
            ("slice8", CrcScheme::Slice8),
            ("rep2", CrcScheme::Rep2),
            ("rep4", CrcScheme::Rep4),
        ] {
            assert_eq!(CrcScheme::pick(Ok(v.into()), (7, 5)), Ok(want));
        }
        let bad = CrcScheme::pick(Ok("rep8".into()), (9, 0)).unwrap_err();
        assert!(
            bad.contains("GVAULT_B3_CRC") && bad.contains("rep8"),
            "{bad}"
        );
    }

    #[test]
    fn crc_shift_combines_as_the_crc32c_crate() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        for cut in [0usize, 1, 3, 1024, 1025, 4096, 4999, 5000] {
            let (a, b) = data.split_at(cut);
            let combined =
                crc_mul(crc_shift(b.len() as u64), crc32c::crc32c(a)) ^ crc32c::crc32c(b);
            assert_eq!(combined, crc32c::crc32c(&data), "cut at {cut}");
        }
        assert_eq!(crc_shift(0), 1 << 31);
        // 2^40 bytes: the square-and-multiply path beyond 32-bit lengths.
        let big = crc_shift(1 << 40);
        assert_eq!(big, crc_mul(crc_shift(1 << 39), crc_shift(1 << 39)));
    }

    #[test]
    fn levels_cover_every_multi_chunk_segment() {
        // 0 B, 1 KiB (one chunk: no level), 17 KiB (two levels' worth
        // of 16-groups: 17 -> 2 -> 1), 300 KiB + 1 (301 -> 19 -> 2 -> 1).
        let lens = [0u64, 1024, 17 * 1024, 300 * 1024 + 1];
        let firsts = [0u64, 1, 2, 19];
        let lv = levels(&lens, &firsts, true);
        let counts: Vec<Vec<(u32, u64)>> = lv
            .iter()
            .map(|(l, _)| l.iter().map(|d| (d.seg, d.count)).collect())
            .collect();
        assert_eq!(
            counts,
            vec![vec![(2, 17), (3, 301)], vec![(2, 2), (3, 19)], vec![(3, 2)]]
        );
        assert_eq!(lv[0].1, 2 + 19);
        assert_eq!(lv[1].0[1].first_in, 2, "level 1 reads level 0's groups");
        assert_eq!(lv[1].0[1].crc_full, crc_shift(16 * 1024));
        assert_eq!(
            lv[1].0[1].crc_last,
            crc_shift(300 * 1024 + 1 - 18 * 16 * 1024)
        );
    }
}
