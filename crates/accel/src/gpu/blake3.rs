//! BLAKE3 (plain and keyed) on the GPU: `blake3_chunks` hashes every 1 KiB
//! chunk of every segment in parallel into a job-wide array of chaining
//! values, then `blake3_reduce` merges them, 16 to 1 per launch, up the
//! left-balanced tree; only the 32-byte digests come back.

use std::ffi::c_void;

use super::runtime::{download, upload, DevError, Device, DeviceBuffer};
use super::stage::{as_bytes, cut, stage_host, upload_descs};
use crate::types::Blake3Key;

/// `B3Piece` of kernels/blake3.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct B3Piece {
    pub offset: u64,
    pub len: u64,
    pub first_chunk: u64,
    pub counter: u64,
    pub seg: u32,
    pub root: u32,
}

/// `B3Level` of kernels/blake3.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct B3Level {
    first_in: u64,
    count: u64,
    first_out: u64,
    seg: u32,
    pad: u32,
}

const CHUNKS_BLOCK: u32 = 128;
const REDUCE_BLOCK: u32 = 128;
const GROUP: u64 = 16;
const KEYED_HASH: u32 = 16;
const IV: [u32; 8] = [
    0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19,
];

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
    dev.bind()?;
    if inputs.is_empty() {
        return Ok(Vec::new());
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
    if !dev_descs.is_empty() {
        let base = rebase(&mut dev_descs);
        let buf = dev.alloc(std::mem::size_of_val(dev_descs.as_slice()))?;
        upload(buf.ptr, as_bytes(&dev_descs))?;
        launch_chunks(
            dev,
            key_buf.ptr,
            flags,
            0,
            buf.ptr,
            &dev_descs,
            cvs.ptr + base * 32,
            digests.ptr,
            stream,
        )?;
        super::runtime::sync(stream)?;
    }
    trace.mark("device chunks");
    reduce(
        dev,
        key_buf.ptr,
        flags,
        &counts,
        &firsts,
        cvs,
        digests.ptr,
        stream,
    )?;
    trace.mark("reduce");
    let mut out = vec![0u8; inputs.len() * 32];
    download(&mut out, digests.ptr)?;
    Ok(out
        .chunks(32)
        .map(|c| c.try_into().expect("32-byte digest"))
        .collect())
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

/// Launches `blake3_chunks` over `descs` (rebased, already at `desc_ptr`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_chunks(
    dev: &Device,
    key: u64,
    flags: u32,
    data: u64,
    desc_ptr: u64,
    descs: &[B3Piece],
    cvs: u64,
    digests: u64,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    let Some(last) = descs.last() else {
        return Ok(());
    };
    let total = last.first_chunk + chunks_of(last.len);
    let (mut key, mut flags, mut data, mut segs, mut n, mut total_v, mut cvs, mut digests) = (
        key,
        flags,
        data,
        desc_ptr,
        descs.len() as u32,
        total,
        cvs,
        digests,
    );
    let mut params = [
        &mut key as *mut u64 as *mut c_void,
        &mut flags as *mut u32 as *mut c_void,
        &mut data as *mut u64 as *mut c_void,
        &mut segs as *mut u64 as *mut c_void,
        &mut n as *mut u32 as *mut c_void,
        &mut total_v as *mut u64 as *mut c_void,
        &mut cvs as *mut u64 as *mut c_void,
        &mut digests as *mut u64 as *mut c_void,
    ];
    let grid = dev.grid_for(total, CHUNKS_BLOCK);
    // SAFETY: the parameters match blake3_chunks' signature; data + offset
    // ranges are staged slot bytes or caller-guaranteed device memory;
    // cvs/digests hold every index the descriptors name.
    unsafe { dev.launch("blake3_chunks", grid, CHUNKS_BLOCK, 0, stream, &mut params) }
}

/// Merges the chunk CVs of every segment with more than one chunk, level by
/// level, until each has its root digest.
#[allow(clippy::too_many_arguments)]
fn reduce(
    dev: &Device,
    key: u64,
    flags: u32,
    counts: &[u64],
    firsts: &[u64],
    cvs: DeviceBuffer,
    digests: u64,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    let mut level: Vec<B3Level> = counts
        .iter()
        .zip(firsts)
        .enumerate()
        .filter(|(_, (&c, _))| c > 1)
        .map(|(s, (&count, &first_in))| B3Level {
            first_in,
            count,
            first_out: 0,
            seg: s as u32,
            pad: 0,
        })
        .collect();
    if level.is_empty() {
        return Ok(());
    }
    let first_groups: u64 = level.iter().map(|l| l.count.div_ceil(GROUP)).sum();
    let bufs = [cvs, dev.alloc(first_groups as usize * 32)?];
    let mut input = 0usize;
    while !level.is_empty() {
        let mut groups = 0u64;
        for l in level.iter_mut() {
            l.first_out = groups;
            groups += l.count.div_ceil(GROUP);
        }
        let desc = dev.alloc(std::mem::size_of_val(level.as_slice()))?;
        upload(desc.ptr, as_bytes(&level))?;
        let (mut key, mut flags, mut levels, mut n, mut total, mut cin, mut cout, mut dg) = (
            key,
            flags,
            desc.ptr,
            level.len() as u32,
            groups,
            bufs[input].ptr,
            bufs[1 - input].ptr,
            digests,
        );
        let mut params = [
            &mut key as *mut u64 as *mut c_void,
            &mut flags as *mut u32 as *mut c_void,
            &mut levels as *mut u64 as *mut c_void,
            &mut n as *mut u32 as *mut c_void,
            &mut total as *mut u64 as *mut c_void,
            &mut cin as *mut u64 as *mut c_void,
            &mut cout as *mut u64 as *mut c_void,
            &mut dg as *mut u64 as *mut c_void,
        ];
        let grid = dev.grid_for(groups, REDUCE_BLOCK);
        // SAFETY: parameters match blake3_reduce; cvs_in holds every
        // first_in + count, cvs_out every first_out + groups (the output
        // buffer of level L+1 is the input of level L, which is larger).
        unsafe { dev.launch("blake3_reduce", grid, REDUCE_BLOCK, 0, stream, &mut params)? };
        super::runtime::sync(stream)?;
        level = level
            .iter()
            .filter(|l| l.count > GROUP)
            .map(|l| B3Level {
                first_in: l.first_out,
                count: l.count.div_ceil(GROUP),
                first_out: 0,
                seg: l.seg,
                pad: 0,
            })
            .collect();
        input = 1 - input;
    }
    Ok(())
}
