//! Seed 001's primitives on one GPU, bit for bit with `crate::seed001`:
//! the parallel Merkle-Damgård digest (every block is a segment of the
//! serial MD5 / SHA-256 kernels, one thread a block; the final hash of the
//! digest list runs on the host, as in the seed) and sliding-window MD5
//! (`sliding_md5` of kernels/seed001.cu, one thread a window). Host input
//! crosses the link once; device-resident input is read where it lies.

use super::blake3::Input;
use super::launch::{Shape, SlidingMd5Args, SLIDING_MD5};
use super::runtime::{download, DevError, Device};
use super::stage::{as_bytes, copy_in, cut, upload_on};
use super::{serial, GpuBackend};
use crate::error::BackendError;
use crate::job::{Data, DigestAlgo};
use crate::seed001::{blocks_in, check_block, finish, PmdDigest, PmdHash, WindowParams};

const BLOCK: u32 = 128;
/// Matches stored by the first launch; more cause one rerun with room for all.
const FIRST_CAP: u64 = 1 << 16;

impl GpuBackend {
    /// The device for `data`: its own, or the least busy.
    fn device_for(&self, data: &Data<'_>) -> Result<&Device, BackendError> {
        match data {
            Data::Device(d) => self
                .devices
                .iter()
                .find(|dev| dev.ordinal == d.device() as usize)
                .ok_or_else(|| BackendError::InvalidJob(format!("no GPU {}", d.device()))),
            Data::Host(_) => Ok(self
                .devices
                .iter()
                .min_by_key(|d| d.outstanding.load(std::sync::atomic::Ordering::Relaxed))
                .expect("probe guarantees at least one device")),
        }
    }

    /// Seed 001's direct hashing: the parallel Merkle-Damgård digest of
    /// `data` over blocks of `block` bytes (as `seed001::pmd_digest`).
    pub fn pmd_digest(
        &self,
        hash: PmdHash,
        block: u32,
        data: Data<'_>,
    ) -> Result<PmdDigest, BackendError> {
        check_block(block)?;
        let dev = self.device_for(&data)?;
        let algo = match hash {
            PmdHash::Md5 => DigestAlgo::Md5,
            PmdHash::Sha256 => DigestAlgo::Sha256,
        };
        let n = blocks_in(data.len() as u64, block) as usize;
        let b = block as usize;
        let inputs: Vec<Input<'_>> = match data {
            Data::Host(bytes) if bytes.is_empty() => vec![Input::Host(bytes)],
            Data::Host(bytes) => bytes.chunks(b).map(Input::Host).collect(),
            Data::Device(d) => (0..n)
                .map(|k| Input::Device {
                    ptr: d.ptr() + (k * b) as u64,
                    len: b.min(d.len() - (k * b).min(d.len())),
                })
                .collect(),
        };
        let digests = serial::hash_all(dev, algo, &inputs).map_err(device_err(dev))?;
        let list: Vec<u8> = digests.iter().flat_map(|d| d.as_bytes()).collect();
        Ok(finish(hash, block, &list))
    }

    /// Seed 001's sliding-window hashing: offsets, ascending, of the windows
    /// whose MD5 is one of `patterns` (as `seed001::window_matches`).
    pub fn window_matches(
        &self,
        params: &WindowParams,
        data: Data<'_>,
        patterns: &[[u8; 16]],
    ) -> Result<Vec<u64>, BackendError> {
        let dev = self.device_for(&data)?;
        let nwin = params.windows_in(data.len() as u64);
        if nwin == 0 || patterns.is_empty() {
            return Ok(Vec::new());
        }
        if !dev.loaded(SLIDING_MD5) {
            return Err(BackendError::Device(
                "kernel sliding_md5 is not loaded".into(),
            ));
        }
        sliding(dev, params, data, nwin, patterns).map_err(device_err(dev))
    }
}

fn device_err(dev: &Device) -> impl Fn(String) -> BackendError + '_ {
    move |e| BackendError::Device(format!("GPU {} ({}): {e}", dev.ordinal, dev.name))
}

fn sliding(
    dev: &Device,
    params: &WindowParams,
    data: Data<'_>,
    nwin: u64,
    patterns: &[[u8; 16]],
) -> Result<Vec<u64>, DevError> {
    dev.bind()?;
    let staged;
    let ptr = match data {
        Data::Host(bytes) => {
            staged = dev.alloc(bytes.len())?;
            let (pieces, targets): (Vec<&[u8]>, Vec<u64>) = cut(bytes)
                .map(|(at, p)| (p, staged.ptr + at as u64))
                .unzip();
            copy_in(dev, &pieces, &targets)?;
            staged.ptr
        }
        Data::Device(d) => d.ptr(),
    };
    // Patterns as (bytes 0..8, bytes 8..16) big-endian pairs, sorted: the
    // kernel's binary search order is the bytes' lexicographic order.
    let mut pairs: Vec<[u64; 2]> = patterns
        .iter()
        .map(|p| {
            let (a, b) = p.split_at(8);
            [
                u64::from_be_bytes(a.try_into().expect("8 bytes")),
                u64::from_be_bytes(b.try_into().expect("8 bytes")),
            ]
        })
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    let flat: Vec<u64> = pairs.iter().flatten().copied().collect();
    let stream = dev
        .slots
        .lock()
        .map_err(|_| "slot lock poisoned".to_string())?[0]
        .stream;
    let pat = dev.alloc(flat.len() * 8)?;
    upload_on(stream, pat.ptr, as_bytes(&flat))?;
    let mut cap = FIRST_CAP.min(nwin);
    loop {
        let out = dev.alloc(cap as usize * 8)?;
        let count = dev.alloc(8)?;
        upload_on(stream, count.ptr, &[0u8; 8])?;
        let args = SlidingMd5Args {
            data: ptr.into(),
            window: params.window() as u64,
            step: params.step() as u64,
            nwin,
            patterns: pat.ptr.into(),
            npat: pairs.len() as u32,
            out: out.ptr.into(),
            count: count.ptr.into(),
            cap,
        };
        let shape = Shape {
            grid: dev.grid_for(nwin, BLOCK),
            block: BLOCK,
            shared: 0,
        };
        // SAFETY: every window lies inside the data (nwin from its length);
        // `out` holds cap offsets, `count` one u64, `pat` 2 * npat words.
        unsafe { dev.launch(SLIDING_MD5, shape, stream, args)? };
        super::runtime::sync(stream)?;
        let mut raw = [0u8; 8];
        download(&mut raw, count.ptr)?;
        let found = u64::from_le_bytes(raw);
        if found > cap {
            cap = found;
            continue;
        }
        let mut bytes = vec![0u8; found as usize * 8];
        if found > 0 {
            download(&mut bytes, out.ptr)?;
        }
        let mut offsets: Vec<u64> = bytes
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        offsets.sort_unstable();
        return Ok(offsets);
    }
}
