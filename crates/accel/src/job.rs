//! The unit of work: a job is one operation over many segments. Callers hand
//! over whole batches (a flushed table, a group commit, a file's chunks) so a
//! backend can amortise its fixed costs; results come back per segment.
//!
//! Cipher segments are transformed in place (`&mut [u8]`), so no backend has
//! to allocate output buffers; digest and chunk segments are read only.
//! Either kind may instead name device memory (`DeviceSlice`), for data that
//! already lives on a GPU.

use std::fmt;

use crate::chunking::ChunkParams;
use crate::error::SegmentError;
use crate::rsa_batch::RsaItem;
use crate::rsa_key::RsaPrivateKey;
use crate::types::{Aes256Key, Blake3Key, BlowfishKey, CtrIv, Nonce96, Tag, TeaKey};

/// The largest segment any backend accepts: lengths travel as 32-bit values
/// in on-disk formats and GPU descriptors.
pub const MAX_SEGMENT_LEN: u64 = u32::MAX as u64;

/// Memory on a GPU, owned by the caller, which must keep it alive and
/// unchanged by others for the duration of the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceSlice {
    device: u32,
    ptr: u64,
    len: usize,
}

impl DeviceSlice {
    /// # Safety
    /// `ptr` must be a device allocation on `device` valid for `len` bytes
    /// for as long as any job that names it runs.
    pub unsafe fn new(device: u32, ptr: u64, len: usize) -> Self {
        Self { device, ptr, len }
    }
    pub fn device(&self) -> u32 {
        self.device
    }
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Input of a read-only segment.
#[derive(Clone, Copy, Debug)]
pub enum Data<'a> {
    Host(&'a [u8]),
    Device(DeviceSlice),
}

impl<'a> Data<'a> {
    pub fn len(&self) -> usize {
        match self {
            Data::Host(b) => b.len(),
            Data::Device(d) => d.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn host(&self) -> Option<&'a [u8]> {
        match self {
            Data::Host(b) => Some(b),
            Data::Device(_) => None,
        }
    }
}

impl<'a> From<&'a [u8]> for Data<'a> {
    fn from(b: &'a [u8]) -> Self {
        Data::Host(b)
    }
}

impl<'a> From<&'a Vec<u8>> for Data<'a> {
    fn from(b: &'a Vec<u8>) -> Self {
        Data::Host(b)
    }
}

/// A buffer transformed in place.
#[derive(Debug)]
pub enum DataMut<'a> {
    Host(&'a mut [u8]),
    Device(DeviceSlice),
}

impl DataMut<'_> {
    pub fn len(&self) -> usize {
        match self {
            DataMut::Host(b) => b.len(),
            DataMut::Device(d) => d.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn host_mut(&mut self) -> Option<&mut [u8]> {
        match self {
            DataMut::Host(b) => Some(b),
            DataMut::Device(_) => None,
        }
    }
}

impl<'a> From<&'a mut [u8]> for DataMut<'a> {
    fn from(b: &'a mut [u8]) -> Self {
        DataMut::Host(b)
    }
}

impl<'a> From<&'a mut Vec<u8>> for DataMut<'a> {
    fn from(b: &'a mut Vec<u8>) -> Self {
        DataMut::Host(b.as_mut_slice())
    }
}

/// AES-256-GCM seal: plaintext in, ciphertext out in place; the tag is the result.
#[derive(Debug)]
pub struct SealSegment<'a> {
    pub nonce: Nonce96,
    pub aad: &'a [u8],
    pub data: DataMut<'a>,
}

/// AES-256-GCM open: ciphertext in, plaintext out in place, or the buffer
/// zeroed and `AuthenticationFailed` when the tag does not verify.
#[derive(Debug)]
pub struct OpenSegment<'a> {
    pub nonce: Nonce96,
    pub aad: &'a [u8],
    pub tag: Tag,
    pub data: DataMut<'a>,
}

/// A CTR-mode segment (encryption and decryption are the same XOR).
#[derive(Debug)]
pub struct CtrSegment<'a> {
    pub iv: CtrIv,
    pub data: DataMut<'a>,
}

/// The block cipher of a CTR job.
#[derive(Debug, Clone, Copy)]
pub enum CtrCipher<'a> {
    Aes256(&'a Aes256Key),
    /// Seed 000's cipher; 64-bit blocks. For reproduction, not for new data.
    Tea(&'a TeaKey),
    /// Seed 003's cipher; 64-bit blocks. For reproduction, not for new data.
    Blowfish(&'a BlowfishKey),
}

impl CtrCipher<'_> {
    /// The counter block width this cipher needs.
    pub fn iv_len(&self) -> usize {
        match self {
            CtrCipher::Aes256(_) => 16,
            CtrCipher::Tea(_) | CtrCipher::Blowfish(_) => 8,
        }
    }
    pub fn op(&self) -> OpKind {
        match self {
            CtrCipher::Aes256(_) => OpKind::AesCtr,
            CtrCipher::Tea(_) => OpKind::TeaCtr,
            CtrCipher::Blowfish(_) => OpKind::BlowfishCtr,
        }
    }
}

/// The digest of a digest job.
#[derive(Debug, Clone, Copy)]
pub enum DigestAlgo<'a> {
    Blake3,
    Blake3Keyed(&'a Blake3Key),
    Sha256,
    Md5,
    /// CRC-32 (IEEE 802.3, as zlib).
    Crc32,
    /// CRC-32C (Castagnoli, as iSCSI and ext4).
    Crc32c,
}

impl DigestAlgo<'_> {
    pub fn op(&self) -> OpKind {
        match self {
            DigestAlgo::Blake3 => OpKind::Blake3,
            DigestAlgo::Blake3Keyed(_) => OpKind::Blake3Keyed,
            DigestAlgo::Sha256 => OpKind::Sha256,
            DigestAlgo::Md5 => OpKind::Md5,
            DigestAlgo::Crc32 => OpKind::Crc32,
            DigestAlgo::Crc32c => OpKind::Crc32c,
        }
    }
}

/// One operation over many segments.
#[derive(Debug)]
pub enum Job<'a> {
    Seal {
        key: &'a Aes256Key,
        segments: Vec<SealSegment<'a>>,
    },
    Open {
        key: &'a Aes256Key,
        segments: Vec<OpenSegment<'a>>,
    },
    Ctr {
        cipher: CtrCipher<'a>,
        segments: Vec<CtrSegment<'a>>,
    },
    Digest {
        algo: DigestAlgo<'a>,
        segments: Vec<Data<'a>>,
    },
    /// Content-defined chunk boundaries (FastCDC 2020, normalized).
    Chunk {
        params: ChunkParams,
        segments: Vec<Data<'a>>,
    },
    /// Chunk boundaries as `Chunk`, each chunk with its keyed BLAKE3 digest,
    /// in one pass: on a GPU the bytes cross the link once. With `crc32c`,
    /// each chunk also gets its CRC-32C, computed while the bytes are read
    /// for BLAKE3.
    ChunkDigest {
        params: ChunkParams,
        key: &'a Blake3Key,
        crc32c: bool,
        segments: Vec<Data<'a>>,
    },
    /// The RSA private-key operation (m = c^d mod n, by CRT) on inputs of
    /// exactly the modulus length, big-endian.
    RsaPrivate {
        key: &'a RsaPrivateKey,
        segments: Vec<&'a [u8]>,
    },
    /// The RSA private-key operation under many keys in one job (the
    /// requests of many clients, batched as seed 004's server does): each
    /// item's input is exactly its key's modulus length, big-endian; one
    /// result per item, in order.
    RsaPrivateKeys { items: Vec<RsaItem<'a>> },
}

impl Job<'_> {
    pub fn op(&self) -> OpKind {
        match self {
            Job::Seal { .. } => OpKind::AesGcmSeal,
            Job::Open { .. } => OpKind::AesGcmOpen,
            Job::Ctr { cipher, .. } => cipher.op(),
            Job::Digest { algo, .. } => algo.op(),
            Job::Chunk { .. } => OpKind::Chunk,
            Job::ChunkDigest { .. } => OpKind::ChunkDigest,
            Job::RsaPrivate { .. } | Job::RsaPrivateKeys { .. } => OpKind::RsaPrivate,
        }
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        match self {
            Job::Seal { segments, .. } => segments.len(),
            Job::Open { segments, .. } => segments.len(),
            Job::Ctr { segments, .. } => segments.len(),
            Job::Digest { segments, .. }
            | Job::Chunk { segments, .. }
            | Job::ChunkDigest { segments, .. } => segments.len(),
            Job::RsaPrivate { segments, .. } => segments.len(),
            Job::RsaPrivateKeys { items } => items.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total payload bytes (what a cost model charges per byte).
    pub fn bytes(&self) -> u64 {
        let sum = |it: &mut dyn Iterator<Item = usize>| it.map(|n| n as u64).sum();
        match self {
            Job::Seal { segments, .. } => sum(&mut segments.iter().map(|s| s.data.len())),
            Job::Open { segments, .. } => sum(&mut segments.iter().map(|s| s.data.len())),
            Job::Ctr { segments, .. } => sum(&mut segments.iter().map(|s| s.data.len())),
            Job::Digest { segments, .. }
            | Job::Chunk { segments, .. }
            | Job::ChunkDigest { segments, .. } => sum(&mut segments.iter().map(|s| s.len())),
            Job::RsaPrivate { segments, .. } => sum(&mut segments.iter().map(|s| s.len())),
            Job::RsaPrivateKeys { items } => sum(&mut items.iter().map(|i| i.input.len())),
        }
    }
}

/// The operations, without their data: what cost models, benchmarks and the
/// service protocol name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    AesGcmSeal,
    AesGcmOpen,
    AesCtr,
    TeaCtr,
    BlowfishCtr,
    Blake3,
    Blake3Keyed,
    Sha256,
    Md5,
    Crc32,
    Crc32c,
    Chunk,
    ChunkDigest,
    RsaPrivate,
}

impl OpKind {
    pub const ALL: [OpKind; 14] = [
        OpKind::AesGcmSeal,
        OpKind::AesGcmOpen,
        OpKind::AesCtr,
        OpKind::TeaCtr,
        OpKind::BlowfishCtr,
        OpKind::Blake3,
        OpKind::Blake3Keyed,
        OpKind::Sha256,
        OpKind::Md5,
        OpKind::Crc32,
        OpKind::Crc32c,
        OpKind::Chunk,
        OpKind::ChunkDigest,
        OpKind::RsaPrivate,
    ];

    pub fn name(&self) -> &'static str {
        match self {
            OpKind::AesGcmSeal => "aes256gcm-seal",
            OpKind::AesGcmOpen => "aes256gcm-open",
            OpKind::AesCtr => "aes256ctr",
            OpKind::TeaCtr => "tea-ctr",
            OpKind::BlowfishCtr => "blowfish-ctr",
            OpKind::Blake3 => "blake3",
            OpKind::Blake3Keyed => "blake3-keyed",
            OpKind::Sha256 => "sha256",
            OpKind::Md5 => "md5",
            OpKind::Crc32 => "crc32",
            OpKind::Crc32c => "crc32c",
            OpKind::Chunk => "fastcdc",
            OpKind::ChunkDigest => "fastcdc-blake3",
            OpKind::RsaPrivate => "rsa-private",
        }
    }

    pub fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A digest value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Digest {
    /// BLAKE3 and SHA-256.
    B256([u8; 32]),
    /// MD5.
    B128([u8; 16]),
    /// CRC-32 and CRC-32C.
    Crc(u32),
}

impl Digest {
    pub fn as_bytes(&self) -> Vec<u8> {
        match self {
            Digest::B256(d) => d.to_vec(),
            Digest::B128(d) => d.to_vec(),
            Digest::Crc(c) => c.to_be_bytes().to_vec(),
        }
    }
}

/// One content-defined chunk of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSpan {
    pub offset: u64,
    pub len: u32,
}

/// A chunk and its keyed BLAKE3 digest (a `ChunkDigest` job's output).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DigestedChunk {
    pub span: ChunkSpan,
    pub digest: [u8; 32],
    /// The chunk's CRC-32C (Castagnoli, as iSCSI), exactly when the job
    /// asked for it.
    pub crc32c: Option<u32>,
}

/// The result of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Transformed in place (CTR, open).
    Done,
    /// Sealed in place; here is the tag.
    Tag(Tag),
    Digest(Digest),
    Chunks(Vec<ChunkSpan>),
    DigestedChunks(Vec<DigestedChunk>),
    /// RSA output, modulus length, big-endian.
    Bytes(Vec<u8>),
}

impl Output {
    pub fn tag(&self) -> Option<Tag> {
        match self {
            Output::Tag(t) => Some(*t),
            _ => None,
        }
    }
    pub fn digest(&self) -> Option<Digest> {
        match self {
            Output::Digest(d) => Some(*d),
            _ => None,
        }
    }
    pub fn chunks(&self) -> Option<&[ChunkSpan]> {
        match self {
            Output::Chunks(c) => Some(c),
            _ => None,
        }
    }
    pub fn digested_chunks(&self) -> Option<&[DigestedChunk]> {
        match self {
            Output::DigestedChunks(c) => Some(c),
            _ => None,
        }
    }
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            Output::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

pub type SegmentResult = Result<Output, SegmentError>;
