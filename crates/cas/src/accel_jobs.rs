//! Every call into gvault-accel's batch API, in one module: content-defined
//! chunking with keyed BLAKE3 ids (the fused `ChunkDigest` job), keyed BLAKE3
//! of fixed blocks, and AES-256-GCM seal / open. The rest of the crate passes
//! plain byte arrays for nonces and tags and never names accel's types
//! beyond the keys.

use std::sync::Arc;

use gvault_accel::{
    Aes256Key, Backend, Blake3Key, ChunkParams, Data, DataMut, Digest, DigestAlgo, Job, Nonce96,
    OpenSegment, Output, SealSegment, Tag,
};

use crate::error::{Error, Result};

pub type AccelBackend = Arc<dyn Backend>;
pub const TAG_LEN: usize = 16;

/// A chunk of one input segment with its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdChunk {
    pub offset: u64,
    pub len: u32,
    pub id: [u8; 32],
}

fn run(backend: &dyn Backend, job: &mut Job<'_>) -> Result<Vec<gvault_accel::SegmentResult>> {
    let n = job.len();
    let r = backend
        .run(job)
        .map_err(|e| Error::Accel(format!("{} job failed: {e}", job.op())))?;
    if r.len() != n {
        return Err(Error::Accel(format!(
            "backend {} returned {} results for {n} segments",
            backend.name(),
            r.len()
        )));
    }
    Ok(r)
}

/// FastCDC boundaries and keyed BLAKE3 ids of every segment, in one job.
pub fn chunk_digest(
    backend: &dyn Backend,
    params: ChunkParams,
    key: &Blake3Key,
    segments: &[&[u8]],
) -> Result<Vec<Vec<IdChunk>>> {
    let mut job = Job::ChunkDigest {
        params,
        key,
        crc32c: false,
        segments: segments.iter().map(|s| Data::Host(s)).collect(),
    };
    id_chunks(run(backend, &mut job)?)
}

/// The chunks and ids of each segment of a finished `Job::ChunkDigest`.
pub fn id_chunks(results: Vec<gvault_accel::SegmentResult>) -> Result<Vec<Vec<IdChunk>>> {
    results
        .into_iter()
        .map(|r| match r {
            Ok(Output::DigestedChunks(c)) => Ok(c
                .iter()
                .map(|d| IdChunk {
                    offset: d.span.offset,
                    len: d.span.len,
                    id: d.digest,
                })
                .collect()),
            Ok(o) => Err(Error::Accel(format!("chunk job returned {o:?}"))),
            Err(e) => Err(Error::Accel(format!("chunking: {e}"))),
        })
        .collect()
}

/// Keyed BLAKE3 of every segment (fixed-size chunk ids; checking restored
/// chunks).
pub fn keyed_digests(
    backend: &dyn Backend,
    key: &Blake3Key,
    segments: &[&[u8]],
) -> Result<Vec<[u8; 32]>> {
    if segments.is_empty() {
        return Ok(Vec::new());
    }
    let mut job = Job::Digest {
        algo: DigestAlgo::Blake3Keyed(key),
        segments: segments.iter().map(|s| Data::Host(s)).collect(),
    };
    run(backend, &mut job)?
        .into_iter()
        .map(|r| match r {
            Ok(Output::Digest(Digest::B256(d))) => Ok(d),
            Ok(o) => Err(Error::Accel(format!("digest job returned {o:?}"))),
            Err(e) => Err(Error::Accel(format!("hashing: {e}"))),
        })
        .collect()
}

/// One buffer to seal or open in place.
pub struct CipherItem<'a> {
    pub nonce: [u8; 12],
    pub aad: &'a [u8],
    pub data: &'a mut [u8],
}

/// Seals every item in place under `key`; returns the tags in order.
pub fn seal(
    backend: &dyn Backend,
    key: &Aes256Key,
    items: Vec<CipherItem<'_>>,
) -> Result<Vec<[u8; 16]>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let segments = items
        .into_iter()
        .map(|it| {
            Ok(SealSegment {
                nonce: Nonce96::try_from_slice(&it.nonce)
                    .map_err(|e| Error::Accel(e.to_string()))?,
                aad: it.aad,
                data: DataMut::Host(it.data),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut job = Job::Seal { key, segments };
    run(backend, &mut job)?
        .into_iter()
        .map(|r| match r {
            Ok(o) => o
                .tag()
                .map(|t| *t.as_bytes())
                .ok_or_else(|| Error::Accel(format!("seal job returned {o:?}"))),
            Err(e) => Err(Error::Accel(format!("sealing: {e}"))),
        })
        .collect()
}

/// Opens every item in place; per item, whether its tag verified (a
/// failed item's buffer is wiped by the backend).
pub fn open(
    backend: &dyn Backend,
    key: &Aes256Key,
    items: Vec<(CipherItem<'_>, [u8; 16])>,
) -> Result<Vec<bool>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let segments = items
        .into_iter()
        .map(|(it, tag)| {
            Ok(OpenSegment {
                nonce: Nonce96::try_from_slice(&it.nonce)
                    .map_err(|e| Error::Accel(e.to_string()))?,
                aad: it.aad,
                tag: Tag::try_from_slice(&tag).map_err(|e| Error::Accel(e.to_string()))?,
                data: DataMut::Host(it.data),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let mut job = Job::Open { key, segments };
    Ok(run(backend, &mut job)?.iter().map(|r| r.is_ok()).collect())
}

/// Seals one whole object body (`body ‖ tag` comes back).
pub fn seal_one(
    backend: &dyn Backend,
    key: &Aes256Key,
    nonce: [u8; 12],
    aad: &[u8],
    mut body: Vec<u8>,
) -> Result<Vec<u8>> {
    let tags = seal(
        backend,
        key,
        vec![CipherItem {
            nonce,
            aad,
            data: &mut body,
        }],
    )?;
    body.extend_from_slice(&tags[0]);
    Ok(body)
}

/// Opens `sealed` (`body ‖ tag`); `None` when it does not authenticate.
pub fn open_one(
    backend: &dyn Backend,
    key: &Aes256Key,
    nonce: [u8; 12],
    aad: &[u8],
    sealed: &[u8],
) -> Result<Option<Vec<u8>>> {
    if sealed.len() < TAG_LEN {
        return Ok(None);
    }
    let (body, tag) = sealed.split_at(sealed.len() - TAG_LEN);
    let mut body = body.to_vec();
    let mut t = [0u8; 16];
    t.copy_from_slice(tag);
    let ok = open(
        backend,
        key,
        vec![(
            CipherItem {
                nonce,
                aad,
                data: &mut body,
            },
            t,
        )],
    )?;
    Ok(ok[0].then_some(body))
}

/// The accelerator callers use by default: the process's shared
/// `AutoBackend`, the calibrated per-job choice between the CPU and the GPU.
pub fn auto_backend() -> AccelBackend {
    gvault_accel::AutoBackend::shared()
}

/// CPU only: the process's shared CPU backend.
pub fn cpu_backend() -> AccelBackend {
    gvault_accel::CpuBackend::shared()
}

/// Validated FastCDC parameters.
pub fn chunk_params(min: u32, avg: u32, max: u32) -> Result<ChunkParams> {
    ChunkParams::new(min, avg, max, 1).map_err(|e| Error::InvalidArgument(e.to_string()))
}

pub fn blake3_key(bytes: [u8; 32]) -> Blake3Key {
    Blake3Key::from_bytes(bytes)
}

pub fn aes_key(bytes: [u8; 32]) -> Aes256Key {
    Aes256Key::from_bytes(bytes)
}
