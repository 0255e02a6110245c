//! FastCDC chunking on one device: `gear_candidates` marks, for every
//! position of a segment, whether its gear hash passes the small and large
//! masks; the bitmaps (1/16 of the input) come back and `cdc_resolve`
//! applies the min/avg/max rules on the host, exactly as `fastcdc::v2020`.
//! Host segments are uploaded whole (one at a time), device-resident ones
//! are read where they lie.

use std::ffi::c_void;

use super::blake3::Input;
use super::runtime::{download, upload, DevError, Device};
use crate::cdc_resolve::{masks, resolve};
use crate::chunking::ChunkParams;
use crate::job::ChunkSpan;

const BLOCK: u32 = 256;
/// Positions per thread (kernels/cdc.cu).
const SPAN: u64 = 256;

/// Chunk boundaries of each input, in order.
pub(crate) fn chunk_all(
    dev: &Device,
    params: &ChunkParams,
    inputs: &[Input<'_>],
) -> Result<Vec<Vec<ChunkSpan>>, DevError> {
    dev.bind()?;
    let (mask_s, mask_l) = masks(params);
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        let (len, host) = match *input {
            Input::Host(b) => (b.len(), Some(b)),
            Input::Device { len, .. } => (len, None),
        };
        if len == 0 {
            out.push(Vec::new());
            continue;
        }
        let staged;
        let ptr = match *input {
            Input::Host(b) => {
                staged = dev.alloc(b.len())?;
                upload(staged.ptr, b)?;
                staged.ptr
            }
            Input::Device { ptr, .. } => ptr,
        };
        let words = len.div_ceil(32);
        let hits = dev.alloc(words * 8)?;
        let (mut d, mut n, mut ms, mut ml, mut hs, mut hl) = (
            ptr,
            len as u64,
            mask_s,
            mask_l,
            hits.ptr,
            hits.ptr + words as u64 * 4,
        );
        let mut params_v = [
            &mut d as *mut u64 as *mut c_void,
            &mut n as *mut u64 as *mut c_void,
            &mut ms as *mut u64 as *mut c_void,
            &mut ml as *mut u64 as *mut c_void,
            &mut hs as *mut u64 as *mut c_void,
            &mut hl as *mut u64 as *mut c_void,
        ];
        let grid = dev.grid_for((len as u64).div_ceil(SPAN), BLOCK);
        // SAFETY: parameters match gear_candidates; `ptr` holds `len` bytes
        // (staged here, or the caller's DeviceSlice); hits holds 2 * words words.
        unsafe { dev.launch("gear_candidates", grid, BLOCK, 0, stream, &mut params_v)? };
        super::runtime::sync(stream)?;
        let mut bits = vec![0u8; words * 8];
        download(&mut bits, hits.ptr)?;
        let words_of = |b: &[u8]| -> Vec<u32> {
            b.chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect()
        };
        let (s, l) = (words_of(&bits[..words * 4]), words_of(&bits[words * 4..]));
        let mut failed = None;
        let spans = resolve(params, len, &s[..], &l[..], |at, k| match host {
            Some(b) => b[at..at + k].to_vec(),
            None => {
                // The 63 bytes after each hash start, read back from the device.
                let mut v = vec![0u8; k];
                if let Err(e) = download(&mut v, ptr + at as u64) {
                    failed = Some(e);
                }
                v
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        out.push(spans);
    }
    Ok(out)
}
