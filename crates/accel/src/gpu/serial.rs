//! SHA-256, MD5, CRC-32 and CRC-32C on the GPU (kernels/serial.cu): one
//! thread per segment, since these hashes are sequential within a message.
//! A host segment longer than a staging slot is hashed slot after slot with
//! its state carried on the device; launches are ordered for that.

use super::abi::{SerialPiece, SP_FIRST as FIRST, SP_LAST as LAST};
use super::blake3::Input;
use super::launch::{
    Kernel, SerialArgs, Shape, CRC32C_PIECES, CRC32_PIECES, MD5_PIECES, SHA256_PIECES,
};
use super::runtime::{download, upload, DevError, Device, DESC_BYTES, SLOT_BYTES};
use super::stage::{as_bytes, stage_host, upload_descs};
use crate::job::{Digest, DigestAlgo};

const BLOCK: u32 = 128;

fn kernel(algo: DigestAlgo<'_>) -> Option<Kernel<SerialArgs>> {
    Some(match algo {
        DigestAlgo::Sha256 => SHA256_PIECES,
        DigestAlgo::Md5 => MD5_PIECES,
        DigestAlgo::Crc32 => CRC32_PIECES,
        DigestAlgo::Crc32c => CRC32C_PIECES,
        DigestAlgo::Blake3 | DigestAlgo::Blake3Keyed(_) => return None,
    })
}

/// Digests of `inputs`, in order.
pub(crate) fn hash_all(
    dev: &Device,
    algo: DigestAlgo<'_>,
    inputs: &[Input<'_>],
) -> Result<Vec<Digest>, DevError> {
    let kernel = kernel(algo).ok_or("not a serial digest")?;
    dev.bind()?;
    if inputs.is_empty() {
        return Ok(Vec::new());
    }
    let state = dev.alloc(inputs.len() * 32)?;
    let digests = dev.alloc(inputs.len() * 32)?;
    let mut dev_descs = Vec::new();
    let mut host_segs: Vec<(u32, &[u8])> = Vec::new();
    for (s, input) in inputs.iter().enumerate() {
        match *input {
            Input::Host(bytes) => host_segs.push((s as u32, bytes)),
            Input::Device { ptr, len } => dev_descs.push(SerialPiece {
                offset: ptr,
                len: len as u64,
                total_len: len as u64,
                seg: s as u32,
                flags: FIRST | LAST,
            }),
        }
    }
    if super::serial_pinned::hash(dev, kernel, &host_segs, state.ptr, digests.ptr)? {
        host_segs.clear();
    }
    let (host_pieces, host_descs) = stripe(&host_segs, slot_piece(host_segs.len()));
    let piece_segs: Vec<u32> = host_descs.iter().map(|d| d.seg).collect();
    let max_batch = DESC_BYTES / std::mem::size_of::<SerialPiece>();
    stage_host(
        dev,
        &host_pieces,
        max_batch,
        Some(&piece_segs),
        |slot, batch| {
            let descs: Vec<SerialPiece> = batch
                .iter()
                .map(|st| SerialPiece {
                    offset: st.off as u64,
                    ..host_descs[st.idx]
                })
                .collect();
            upload_descs(slot, &descs)?;
            launch(
                dev,
                kernel,
                slot.dev,
                slot.dev_desc,
                descs.len(),
                state.ptr,
                digests.ptr,
                slot.stream,
            )
        },
    )?;
    if !dev_descs.is_empty() {
        let buf = dev.alloc(std::mem::size_of_val(dev_descs.as_slice()))?;
        upload(buf.ptr, as_bytes(&dev_descs))?;
        let stream = dev
            .slots
            .lock()
            .map_err(|_| "slot lock poisoned".to_string())?[0]
            .stream;
        launch(
            dev,
            kernel,
            0,
            buf.ptr,
            dev_descs.len(),
            state.ptr,
            digests.ptr,
            stream,
        )?;
        super::runtime::sync(stream)?;
    }
    let mut out = vec![0u8; inputs.len() * 32];
    download(&mut out, digests.ptr)?;
    Ok(out
        .chunks(32)
        .map(|c| match algo {
            DigestAlgo::Md5 => Digest::B128(c[..16].try_into().expect("16 bytes")),
            DigestAlgo::Crc32 | DigestAlgo::Crc32c => {
                Digest::Crc(u32::from_le_bytes(c[..4].try_into().expect("4 bytes")))
            }
            _ => Digest::B256(c.try_into().expect("32 bytes")),
        })
        .collect())
}

/// The piece length that lets `segs` segments share `room` bytes: whole
/// hash blocks, at least 4 KiB.
pub(super) fn piece_for(segs: usize, room: usize) -> usize {
    const MIN_PIECE: usize = 4 << 10;
    (room / segs.max(1) / 64 * 64).clamp(MIN_PIECE, room.max(MIN_PIECE))
}

fn slot_piece(segs: usize) -> usize {
    piece_for(segs, SLOT_BYTES)
}

/// Host segments cut into pieces taken round-robin (piece r of every
/// segment, then piece r + 1): each staging slot then carries a piece of
/// as many segments as fit, so each launch runs that many threads. Cut
/// one slot after another instead, a job of 4096 x 1 MiB ran 64 threads
/// per launch (1.7 GB/s). Pieces are multiples of 64 bytes (hash blocks)
/// except a segment's last.
pub(super) fn stripe<'a>(
    segs: &[(u32, &'a [u8])],
    piece: usize,
) -> (Vec<&'a [u8]>, Vec<SerialPiece>) {
    let (mut pieces, mut descs) = (Vec::new(), Vec::new());
    let rounds = segs
        .iter()
        .map(|(_, b)| b.len().div_ceil(piece).max(1))
        .max()
        .unwrap_or(0);
    for r in 0..rounds {
        for &(seg, bytes) in segs {
            let n = bytes.len().div_ceil(piece).max(1);
            if r >= n {
                continue;
            }
            let at = r * piece;
            let part = &bytes[at..(at + piece).min(bytes.len())];
            pieces.push(part);
            descs.push(SerialPiece {
                offset: 0,
                len: part.len() as u64,
                total_len: bytes.len() as u64,
                seg,
                flags: if r == 0 { FIRST } else { 0 } | if r + 1 == n { LAST } else { 0 },
            });
        }
    }
    (pieces, descs)
}

/// Queues `kernel` over `n` piece descriptors at `descs` (offsets from
/// `data`) on `stream`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    dev: &Device,
    kernel: Kernel<SerialArgs>,
    data: u64,
    descs: u64,
    n: usize,
    state: u64,
    digests: u64,
    stream: cudarc::driver::sys::CUstream,
) -> Result<(), DevError> {
    if n == 0 {
        return Ok(());
    }
    let npieces = u32::try_from(n).map_err(|_| format!("{}: over 2^32 pieces", kernel.name))?;
    // Few pieces (one thread each): spread them one warp per SM rather than
    // four warps on a quarter of the SMs, so each warp has an SM's load
    // units and L1 to itself.
    let block = npieces
        .div_ceil(dev.multiprocessors.max(1))
        .next_multiple_of(32)
        .clamp(32, BLOCK);
    let shape = Shape {
        grid: dev.grid_for(n as u64, block),
        block,
        shared: 0,
    };
    let args = SerialArgs {
        data: data.into(),
        pieces: descs.into(),
        npieces,
        state: state.into(),
        digests: digests.into(),
    };
    // SAFETY: descriptors name staged or caller-guaranteed device bytes;
    // state/digests hold 32 bytes per segment.
    unsafe { dev.launch(kernel, shape, stream, args) }
}

#[cfg(test)]
mod tests {
    use super::{stripe, FIRST, LAST};

    #[test]
    fn stripes_cover_every_segment_in_order_with_whole_blocks() {
        let big = vec![1u8; 1 << 20];
        let small: Vec<Vec<u8>> = (0..2000u32)
            .map(|i| vec![i as u8; i as usize % 70])
            .collect();
        let mut segs = vec![(0u32, &big[..])];
        segs.extend(
            small
                .iter()
                .enumerate()
                .map(|(i, v)| (i as u32 + 1, &v[..])),
        );
        let (pieces, descs) = stripe(&segs, super::slot_piece(segs.len()));
        assert_eq!(pieces.len(), descs.len());
        let mut by_seg: Vec<Vec<usize>> = vec![Vec::new(); segs.len()];
        for (k, d) in descs.iter().enumerate() {
            by_seg[d.seg as usize].push(k);
        }
        for (seg, bytes) in &segs {
            let mine = &by_seg[*seg as usize];
            let joined: Vec<u8> = mine
                .iter()
                .flat_map(|&k| pieces[k].iter().copied())
                .collect();
            assert_eq!(&joined[..], *bytes, "segment {seg} reassembles");
            assert_eq!(descs[mine[0]].flags & FIRST, FIRST);
            assert_eq!(descs[*mine.last().unwrap()].flags & LAST, LAST);
            for &k in &mine[..mine.len() - 1] {
                assert_eq!(pieces[k].len() % 64, 0, "inner pieces hold whole blocks");
                assert_eq!(
                    descs[k].flags & (FIRST | LAST),
                    if k == mine[0] { FIRST } else { 0 }
                );
            }
        }
        // 2001 segments share a slot: the 1 MiB one is cut in ~32 pieces,
        // one per round, the small ones all ride in round 0.
        assert!(by_seg[0].len() >= 30, "{} pieces", by_seg[0].len());
        assert_eq!(by_seg[0][1], 2001, "round 1 starts after round 0");
    }
}
