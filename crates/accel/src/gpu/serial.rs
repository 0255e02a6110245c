//! SHA-256, MD5, CRC-32 and CRC-32C on the GPU (kernels/serial.cu): one
//! thread per segment, since these hashes are sequential within a message.
//! A host segment longer than a staging slot is hashed slot after slot with
//! its state carried on the device; launches are ordered for that.

use std::ffi::c_void;

use super::blake3::Input;
use super::runtime::{download, upload, DevError, Device, DESC_BYTES};
use super::stage::{as_bytes, cut, stage_host, upload_descs};
use crate::job::{Digest, DigestAlgo};

/// `SerialPiece` of kernels/serial.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct SerialPiece {
    offset: u64,
    len: u64,
    total_len: u64,
    seg: u32,
    flags: u32,
}

const FIRST: u32 = 1;
const LAST: u32 = 2;
const BLOCK: u32 = 128;

fn kernel(algo: DigestAlgo<'_>) -> Option<&'static str> {
    Some(match algo {
        DigestAlgo::Sha256 => "sha256_pieces",
        DigestAlgo::Md5 => "md5_pieces",
        DigestAlgo::Crc32 => "crc32_pieces",
        DigestAlgo::Crc32c => "crc32c_pieces",
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
    let mut host_pieces: Vec<&[u8]> = Vec::new();
    let mut host_descs = Vec::new();
    let mut dev_descs = Vec::new();
    for (s, input) in inputs.iter().enumerate() {
        match *input {
            Input::Host(bytes) => {
                let n = bytes.len().div_ceil(super::runtime::SLOT_BYTES).max(1);
                for (k, (_, piece)) in cut(bytes).enumerate() {
                    host_pieces.push(piece);
                    host_descs.push(SerialPiece {
                        offset: 0,
                        len: piece.len() as u64,
                        total_len: bytes.len() as u64,
                        seg: s as u32,
                        flags: if k == 0 { FIRST } else { 0 } | if k + 1 == n { LAST } else { 0 },
                    });
                }
            }
            Input::Device { ptr, len } => dev_descs.push(SerialPiece {
                offset: ptr,
                len: len as u64,
                total_len: len as u64,
                seg: s as u32,
                flags: FIRST | LAST,
            }),
        }
    }
    let max_batch = DESC_BYTES / std::mem::size_of::<SerialPiece>();
    stage_host(dev, &host_pieces, max_batch, true, |slot, batch| {
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
    })?;
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

#[allow(clippy::too_many_arguments)]
fn launch(
    dev: &Device,
    kernel: &str,
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
    let (mut data, mut descs, mut nv, mut state, mut digests) =
        (data, descs, n as u32, state, digests);
    let mut params = [
        &mut data as *mut u64 as *mut c_void,
        &mut descs as *mut u64 as *mut c_void,
        &mut nv as *mut u32 as *mut c_void,
        &mut state as *mut u64 as *mut c_void,
        &mut digests as *mut u64 as *mut c_void,
    ];
    let grid = dev.grid_for(n as u64, BLOCK);
    // SAFETY: parameters match the *_pieces kernels; descriptors name staged
    // or caller-guaranteed device bytes; state/digests hold 32 bytes per segment.
    unsafe { dev.launch(kernel, grid, BLOCK, 0, stream, &mut params) }
}
