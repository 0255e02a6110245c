//! The service's wire protocol, version 1 (pinned byte by byte in
//! `docs/service.md`).
//!
//! Every message is a frame: a u32 little-endian length, then that many
//! bytes of body: a u8 message type, a u64 request id (chosen by the client,
//! echoed in the reply), and the type's payload. Requests carry no bulk
//! data: segments name ranges of shared-memory buffers the daemon handed
//! out (a buffer id, an offset, a length). Decoding is total: any byte
//! string decodes to a message or to a [`ProtoError`].

use gvault_accel::{
    BackendError, ChunkSpan, Digest, DigestedChunk, OpKind, Output, SegmentError, SegmentErrorKind,
    SegmentResult, Tag,
};
use thiserror::Error;
use zeroize::Zeroizing;

use crate::wire::{Dec, Enc};

/// The first bytes of a `Hello` payload.
pub const MAGIC: [u8; 4] = *b"GVSV";
/// The protocol version this build speaks.
pub const VERSION: u16 = 1;
/// The largest request body the daemon reads; a longer length prefix
/// closes the connection before any of it is read.
pub const MAX_REQUEST_BODY: u32 = 1 << 20;
/// The largest reply body a client reads (chunk lists of large jobs).
pub const MAX_REPLY_BODY: u32 = 256 << 20;
/// The most segments one request may carry.
pub const MAX_SEGMENTS: usize = 1 << 16;
/// The longest associated data of one AES-GCM segment.
pub const MAX_AAD: usize = 64 << 10;
/// The longest key material (an RSA-4096 private key in PKCS#1 DER is
/// about 2.4 KB).
pub const MAX_KEY_BYTES: usize = 16 << 10;
/// The longest error or status text.
pub const MAX_TEXT: usize = 1 << 20;

/// Why a byte string is not a valid message.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ProtoError {
    #[error("message truncated in {0}")]
    Truncated(&'static str),
    #[error("{what} is {len} bytes, the limit is {max}")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("invalid {0}")]
    Invalid(&'static str),
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("{0} bytes after the end of the message")]
    Trailing(usize),
}

/// A range of one of the client's shared buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BufRef {
    pub buffer: u32,
    pub offset: u64,
    pub len: u64,
}

impl BufRef {
    fn put(&self, e: &mut Enc) {
        e.u32(self.buffer).u64(self.offset).u64(self.len);
    }
    fn get(d: &mut Dec<'_>) -> Result<BufRef, ProtoError> {
        Ok(BufRef {
            buffer: d.u32("buffer id")?,
            offset: d.u64("buffer offset")?,
            len: d.u64("segment length")?,
        })
    }
    const WIRE_LEN: usize = 20;
}

/// The kinds of key a client may register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Aes256 = 1,
    Blake3 = 2,
    Tea = 3,
    Blowfish = 4,
    /// An RSA private key, PKCS#1 DER.
    Rsa = 5,
}

impl KeyKind {
    fn from_u8(v: u8) -> Result<KeyKind, ProtoError> {
        Ok(match v {
            1 => KeyKind::Aes256,
            2 => KeyKind::Blake3,
            3 => KeyKind::Tea,
            4 => KeyKind::Blowfish,
            5 => KeyKind::Rsa,
            _ => return Err(ProtoError::Invalid("key kind")),
        })
    }
}

/// The cipher of a CTR request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CtrKind {
    Aes256 = 1,
    Tea = 2,
    Blowfish = 3,
}

/// The digest of a digest request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestKind {
    Blake3 = 1,
    Blake3Keyed = 2,
    Sha256 = 3,
    Md5 = 4,
    Crc32 = 5,
    Crc32c = 6,
}

impl DigestKind {
    pub fn op(self) -> OpKind {
        match self {
            DigestKind::Blake3 => OpKind::Blake3,
            DigestKind::Blake3Keyed => OpKind::Blake3Keyed,
            DigestKind::Sha256 => OpKind::Sha256,
            DigestKind::Md5 => OpKind::Md5,
            DigestKind::Crc32 => OpKind::Crc32,
            DigestKind::Crc32c => OpKind::Crc32c,
        }
    }
}

/// FastCDC parameters as they travel (checked by the daemon with
/// `ChunkParams::new`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkWire {
    pub min: u32,
    pub avg: u32,
    pub max: u32,
    pub level: u8,
}

/// What a run request computes; keys are handles the connection registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOp {
    Seal {
        key: u32,
    },
    Open {
        key: u32,
    },
    Ctr {
        cipher: CtrKind,
        key: u32,
    },
    /// `key` is used by `Blake3Keyed` only (0 otherwise).
    Digest {
        algo: DigestKind,
        key: u32,
    },
    Chunk {
        params: ChunkWire,
    },
    ChunkDigest {
        params: ChunkWire,
        key: u32,
        crc32c: bool,
    },
    Rsa {
        key: u32,
    },
}

impl RunOp {
    pub fn kind(&self) -> OpKind {
        match self {
            RunOp::Seal { .. } => OpKind::AesGcmSeal,
            RunOp::Open { .. } => OpKind::AesGcmOpen,
            RunOp::Ctr { cipher, .. } => match cipher {
                CtrKind::Aes256 => OpKind::AesCtr,
                CtrKind::Tea => OpKind::TeaCtr,
                CtrKind::Blowfish => OpKind::BlowfishCtr,
            },
            RunOp::Digest { algo, .. } => algo.op(),
            RunOp::Chunk { .. } => OpKind::Chunk,
            RunOp::ChunkDigest { .. } => OpKind::ChunkDigest,
            RunOp::Rsa { .. } => OpKind::RsaPrivate,
        }
    }

    /// The op without its key handle (handles are per connection; the
    /// daemon compares keys by identity instead).
    pub fn shape(&self) -> RunOp {
        let mut op = *self;
        match &mut op {
            RunOp::Seal { key }
            | RunOp::Open { key }
            | RunOp::Ctr { key, .. }
            | RunOp::Digest { key, .. }
            | RunOp::ChunkDigest { key, .. }
            | RunOp::Rsa { key } => *key = 0,
            RunOp::Chunk { .. } => {}
        }
        op
    }

    /// Whether the op transforms its segments in place (else reads them).
    pub fn writes(&self) -> bool {
        matches!(
            self,
            RunOp::Seal { .. } | RunOp::Open { .. } | RunOp::Ctr { .. }
        )
    }
}

/// One segment of a run request. Which of `nonce`, `tag`, `aad` and `iv`
/// travel depends on the op (seal: nonce, aad; open: nonce, tag, aad; CTR:
/// iv); the others stay empty.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SegmentSpec {
    pub data: BufRef,
    pub nonce: [u8; 12],
    pub tag: [u8; 16],
    pub aad: Vec<u8>,
    pub iv: Vec<u8>,
}

/// A job over the client's shared buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRequest {
    pub op: RunOp,
    pub segments: Vec<SegmentSpec>,
}

/// A client's message.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// The first message of a connection: the versions the client speaks.
    Hello {
        min_version: u16,
        max_version: u16,
    },
    /// A new zeroed shared buffer of `len` bytes (its fd comes with the reply).
    Alloc {
        len: u64,
    },
    Free {
        buffer: u32,
    },
    /// Key material; the reply names a handle valid on this connection only.
    RegisterKey {
        kind: KeyKind,
        material: Zeroizing<Vec<u8>>,
    },
    ReleaseKey {
        handle: u32,
    },
    Run(RunRequest),
    /// The daemon's counters as JSON.
    Status,
}

mod ty {
    pub const HELLO: u8 = 1;
    pub const ALLOC: u8 = 2;
    pub const FREE: u8 = 3;
    pub const REGISTER_KEY: u8 = 4;
    pub const RELEASE_KEY: u8 = 5;
    pub const RUN: u8 = 6;
    pub const STATUS: u8 = 7;

    pub const R_HELLO: u8 = 0x81;
    pub const R_ALLOC: u8 = 0x82;
    pub const R_DONE: u8 = 0x83;
    pub const R_KEY: u8 = 0x84;
    pub const R_RUN: u8 = 0x86;
    pub const R_STATUS: u8 = 0x87;
    pub const R_ERROR: u8 = 0xff;
}

mod op_code {
    pub const SEAL: u8 = 1;
    pub const OPEN: u8 = 2;
    pub const CTR: u8 = 3;
    pub const DIGEST: u8 = 4;
    pub const CHUNK: u8 = 5;
    pub const CHUNK_DIGEST: u8 = 6;
    pub const RSA: u8 = 7;
}

/// A frame: the length prefix and the body.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

fn header(e: &mut Enc, t: u8, id: u64) {
    e.u8(t).u64(id);
}

impl Request {
    /// The body of this request with id `id` (without the length prefix).
    pub fn encode(&self, id: u64) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Request::Hello {
                min_version,
                max_version,
            } => {
                header(&mut e, ty::HELLO, id);
                e.raw(&MAGIC).u16(*min_version).u16(*max_version);
            }
            Request::Alloc { len } => {
                header(&mut e, ty::ALLOC, id);
                e.u64(*len);
            }
            Request::Free { buffer } => {
                header(&mut e, ty::FREE, id);
                e.u32(*buffer);
            }
            Request::RegisterKey { kind, material } => {
                header(&mut e, ty::REGISTER_KEY, id);
                e.u8(*kind as u8).blob(material);
            }
            Request::ReleaseKey { handle } => {
                header(&mut e, ty::RELEASE_KEY, id);
                e.u32(*handle);
            }
            Request::Run(run) => {
                header(&mut e, ty::RUN, id);
                encode_run(&mut e, run);
            }
            Request::Status => header(&mut e, ty::STATUS, id),
        }
        e.0
    }

    /// Decodes a request body: (id, request).
    pub fn decode(body: &[u8]) -> Result<(u64, Request), ProtoError> {
        let mut d = Dec::new(body);
        let t = d.u8("message type")?;
        let id = d.u64("request id")?;
        let req = match t {
            ty::HELLO => {
                if d.array::<4>("magic")? != MAGIC {
                    return Err(ProtoError::Invalid("magic"));
                }
                Request::Hello {
                    min_version: d.u16("min version")?,
                    max_version: d.u16("max version")?,
                }
            }
            ty::ALLOC => Request::Alloc {
                len: d.u64("buffer length")?,
            },
            ty::FREE => Request::Free {
                buffer: d.u32("buffer id")?,
            },
            ty::REGISTER_KEY => {
                let kind = KeyKind::from_u8(d.u8("key kind")?)?;
                let material = Zeroizing::new(d.blob(MAX_KEY_BYTES, "key material")?.to_vec());
                Request::RegisterKey { kind, material }
            }
            ty::RELEASE_KEY => Request::ReleaseKey {
                handle: d.u32("key handle")?,
            },
            ty::RUN => Request::Run(decode_run(&mut d)?),
            ty::STATUS => Request::Status,
            other => return Err(ProtoError::UnknownType(other)),
        };
        d.finish()?;
        Ok((id, req))
    }
}

fn put_params(e: &mut Enc, p: &ChunkWire) {
    e.u32(p.min).u32(p.avg).u32(p.max).u8(p.level);
}

fn get_params(d: &mut Dec<'_>) -> Result<ChunkWire, ProtoError> {
    Ok(ChunkWire {
        min: d.u32("chunk min")?,
        avg: d.u32("chunk avg")?,
        max: d.u32("chunk max")?,
        level: d.u8("chunk level")?,
    })
}

fn encode_run(e: &mut Enc, run: &RunRequest) {
    match run.op {
        RunOp::Seal { key } => {
            e.u8(op_code::SEAL).u32(key);
        }
        RunOp::Open { key } => {
            e.u8(op_code::OPEN).u32(key);
        }
        RunOp::Ctr { cipher, key } => {
            e.u8(op_code::CTR).u8(cipher as u8).u32(key);
        }
        RunOp::Digest { algo, key } => {
            e.u8(op_code::DIGEST).u8(algo as u8).u32(key);
        }
        RunOp::Chunk { params } => {
            e.u8(op_code::CHUNK);
            put_params(e, &params);
        }
        RunOp::ChunkDigest {
            params,
            key,
            crc32c,
        } => {
            e.u8(op_code::CHUNK_DIGEST);
            put_params(e, &params);
            e.u32(key).u8(crc32c as u8);
        }
        RunOp::Rsa { key } => {
            e.u8(op_code::RSA).u32(key);
        }
    }
    e.u32(run.segments.len() as u32);
    for s in &run.segments {
        s.data.put(e);
        match run.op {
            RunOp::Seal { .. } => {
                e.raw(&s.nonce).blob(&s.aad);
            }
            RunOp::Open { .. } => {
                e.raw(&s.nonce).raw(&s.tag).blob(&s.aad);
            }
            RunOp::Ctr { .. } => {
                // Counter blocks are 8 or 16 bytes; a longer one is cut to
                // what the length byte can say (and refused by the daemon).
                let iv = &s.iv[..s.iv.len().min(255)];
                e.u8(iv.len() as u8).raw(iv);
            }
            _ => {}
        }
    }
}

fn decode_run(d: &mut Dec<'_>) -> Result<RunRequest, ProtoError> {
    let op = match d.u8("op")? {
        op_code::SEAL => RunOp::Seal {
            key: d.u32("key handle")?,
        },
        op_code::OPEN => RunOp::Open {
            key: d.u32("key handle")?,
        },
        op_code::CTR => {
            let cipher = match d.u8("ctr cipher")? {
                1 => CtrKind::Aes256,
                2 => CtrKind::Tea,
                3 => CtrKind::Blowfish,
                _ => return Err(ProtoError::Invalid("ctr cipher")),
            };
            RunOp::Ctr {
                cipher,
                key: d.u32("key handle")?,
            }
        }
        op_code::DIGEST => {
            let algo = match d.u8("digest algorithm")? {
                1 => DigestKind::Blake3,
                2 => DigestKind::Blake3Keyed,
                3 => DigestKind::Sha256,
                4 => DigestKind::Md5,
                5 => DigestKind::Crc32,
                6 => DigestKind::Crc32c,
                _ => return Err(ProtoError::Invalid("digest algorithm")),
            };
            RunOp::Digest {
                algo,
                key: d.u32("key handle")?,
            }
        }
        op_code::CHUNK => RunOp::Chunk {
            params: get_params(d)?,
        },
        op_code::CHUNK_DIGEST => RunOp::ChunkDigest {
            params: get_params(d)?,
            key: d.u32("key handle")?,
            crc32c: match d.u8("crc32c flag")? {
                0 => false,
                1 => true,
                _ => return Err(ProtoError::Invalid("crc32c flag")),
            },
        },
        op_code::RSA => RunOp::Rsa {
            key: d.u32("key handle")?,
        },
        _ => return Err(ProtoError::Invalid("op")),
    };
    let n = d.count(BufRef::WIRE_LEN, "segment count")?;
    if n > MAX_SEGMENTS {
        return Err(ProtoError::TooLong {
            what: "segment count",
            len: n,
            max: MAX_SEGMENTS,
        });
    }
    let mut segments = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = SegmentSpec {
            data: BufRef::get(d)?,
            ..SegmentSpec::default()
        };
        match op {
            RunOp::Seal { .. } => {
                s.nonce = d.array("nonce")?;
                s.aad = d.blob(MAX_AAD, "associated data")?.to_vec();
            }
            RunOp::Open { .. } => {
                s.nonce = d.array("nonce")?;
                s.tag = d.array("tag")?;
                s.aad = d.blob(MAX_AAD, "associated data")?.to_vec();
            }
            RunOp::Ctr { .. } => {
                let n = d.u8("iv length")? as usize;
                s.iv = d.bytes(n, "iv")?.to_vec();
            }
            _ => {}
        }
        segments.push(s);
    }
    Ok(RunRequest { op, segments })
}

/// The daemon's limits, told to each client in its `Hello` reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of shared buffers one client may hold at once.
    pub client_memory: u64,
    /// Requests one client may have in flight (the daemon stops reading
    /// its socket beyond that).
    pub client_queue: u32,
    pub max_buffers: u32,
    pub max_keys: u32,
    pub max_request_body: u32,
}

/// Why the daemon refused a request (the connection stays open unless
/// the code is `Protocol` or `Version`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Not a valid message; the daemon closes the connection after it.
    Protocol = 1,
    /// No common protocol version; the connection closes.
    Version = 2,
    UnknownBuffer = 3,
    UnknownKey = 4,
    /// A segment outside its buffer, or in-place segments that overlap.
    BadSegment = 5,
    /// A per-client memory, buffer or key quota.
    Quota = 6,
    ShuttingDown = 7,
    /// Key material the daemon cannot use (a wrong length, a bad RSA key).
    BadKey = 8,
    /// A request the op cannot take (a bad chunk parameter, a wrong key
    /// kind for the op).
    BadRequest = 9,
    /// The daemon could not do what was asked (out of memory, a system
    /// call failed).
    Internal = 10,
}

impl ErrorCode {
    fn from_u16(v: u16) -> ErrorCode {
        match v {
            1 => ErrorCode::Protocol,
            2 => ErrorCode::Version,
            3 => ErrorCode::UnknownBuffer,
            4 => ErrorCode::UnknownKey,
            5 => ErrorCode::BadSegment,
            6 => ErrorCode::Quota,
            7 => ErrorCode::ShuttingDown,
            8 => ErrorCode::BadKey,
            9 => ErrorCode::BadRequest,
            _ => ErrorCode::Internal,
        }
    }
}

/// The daemon's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Hello {
        version: u16,
        limits: Limits,
    },
    /// A new buffer; its memfd travels as SCM_RIGHTS ancillary data with
    /// the first byte of this frame.
    Alloc {
        buffer: u32,
        len: u64,
    },
    /// `Free` and `ReleaseKey` succeeded.
    Done,
    Key {
        handle: u32,
    },
    /// One result per segment, in order.
    Run(Vec<SegmentResult>),
    /// The job could not run at all.
    RunFailed(BackendError),
    Status(String),
    Error {
        code: ErrorCode,
        message: String,
    },
}

mod out_code {
    pub const DONE: u8 = 0;
    pub const TAG: u8 = 1;
    pub const DIGEST32: u8 = 2;
    pub const DIGEST16: u8 = 3;
    pub const CRC: u8 = 4;
    pub const CHUNKS: u8 = 5;
    pub const DIGESTED: u8 = 6;
    pub const BYTES: u8 = 7;
    pub const ERROR: u8 = 0x80;
}

impl Reply {
    pub fn encode(&self, id: u64) -> Vec<u8> {
        let mut e = Enc::default();
        match self {
            Reply::Hello { version, limits } => {
                header(&mut e, ty::R_HELLO, id);
                e.raw(&MAGIC)
                    .u16(*version)
                    .u64(limits.client_memory)
                    .u32(limits.client_queue)
                    .u32(limits.max_buffers)
                    .u32(limits.max_keys)
                    .u32(limits.max_request_body);
            }
            Reply::Alloc { buffer, len } => {
                header(&mut e, ty::R_ALLOC, id);
                e.u32(*buffer).u64(*len);
            }
            Reply::Done => header(&mut e, ty::R_DONE, id),
            Reply::Key { handle } => {
                header(&mut e, ty::R_KEY, id);
                e.u32(*handle);
            }
            Reply::Run(results) => {
                header(&mut e, ty::R_RUN, id);
                e.u8(0).u32(results.len() as u32);
                for r in results {
                    put_result(&mut e, r);
                }
            }
            Reply::RunFailed(err) => {
                header(&mut e, ty::R_RUN, id);
                e.u8(1);
                put_backend_error(&mut e, err);
            }
            Reply::Status(json) => {
                header(&mut e, ty::R_STATUS, id);
                e.blob(json.as_bytes());
            }
            Reply::Error { code, message } => {
                header(&mut e, ty::R_ERROR, id);
                e.u16(*code as u16).blob(message.as_bytes());
            }
        }
        e.0
    }

    pub fn decode(body: &[u8]) -> Result<(u64, Reply), ProtoError> {
        let mut d = Dec::new(body);
        let t = d.u8("message type")?;
        let id = d.u64("request id")?;
        let reply = match t {
            ty::R_HELLO => {
                if d.array::<4>("magic")? != MAGIC {
                    return Err(ProtoError::Invalid("magic"));
                }
                Reply::Hello {
                    version: d.u16("version")?,
                    limits: Limits {
                        client_memory: d.u64("memory quota")?,
                        client_queue: d.u32("queue quota")?,
                        max_buffers: d.u32("buffer quota")?,
                        max_keys: d.u32("key quota")?,
                        max_request_body: d.u32("request limit")?,
                    },
                }
            }
            ty::R_ALLOC => Reply::Alloc {
                buffer: d.u32("buffer id")?,
                len: d.u64("buffer length")?,
            },
            ty::R_DONE => Reply::Done,
            ty::R_KEY => Reply::Key {
                handle: d.u32("key handle")?,
            },
            ty::R_RUN => match d.u8("run status")? {
                0 => {
                    let n = d.count(1, "result count")?;
                    let mut results = Vec::with_capacity(n);
                    for _ in 0..n {
                        results.push(get_result(&mut d)?);
                    }
                    Reply::Run(results)
                }
                1 => Reply::RunFailed(get_backend_error(&mut d)?),
                _ => return Err(ProtoError::Invalid("run status")),
            },
            ty::R_STATUS => Reply::Status(d.string(MAX_REPLY_BODY as usize, "status")?),
            ty::R_ERROR => Reply::Error {
                code: ErrorCode::from_u16(d.u16("error code")?),
                message: d.string(MAX_TEXT, "error message")?,
            },
            other => return Err(ProtoError::UnknownType(other)),
        };
        d.finish()?;
        Ok((id, reply))
    }
}

fn put_result(e: &mut Enc, r: &SegmentResult) {
    match r {
        Ok(Output::Done) => {
            e.u8(out_code::DONE);
        }
        Ok(Output::Tag(t)) => {
            e.u8(out_code::TAG).raw(t.as_bytes());
        }
        Ok(Output::Digest(Digest::B256(d))) => {
            e.u8(out_code::DIGEST32).raw(d);
        }
        Ok(Output::Digest(Digest::B128(d))) => {
            e.u8(out_code::DIGEST16).raw(d);
        }
        Ok(Output::Digest(Digest::Crc(c))) => {
            e.u8(out_code::CRC).u32(*c);
        }
        Ok(Output::Chunks(spans)) => {
            e.u8(out_code::CHUNKS).u32(spans.len() as u32);
            for s in spans {
                e.u64(s.offset).u32(s.len);
            }
        }
        Ok(Output::DigestedChunks(chunks)) => {
            e.u8(out_code::DIGESTED).u32(chunks.len() as u32);
            for c in chunks {
                e.u64(c.span.offset).u32(c.span.len).raw(&c.digest);
                match c.crc32c {
                    Some(crc) => e.u8(1).u32(crc),
                    None => e.u8(0),
                };
            }
        }
        Ok(Output::Bytes(b)) => {
            e.u8(out_code::BYTES).blob(b);
        }
        Err(err) => {
            e.u8(out_code::ERROR).u32(err.index as u32);
            put_segment_error(e, &err.kind);
        }
    }
}

fn get_result(d: &mut Dec<'_>) -> Result<SegmentResult, ProtoError> {
    Ok(Ok(match d.u8("result kind")? {
        out_code::DONE => Output::Done,
        out_code::TAG => Output::Tag(Tag::from_bytes(d.array("tag")?)),
        out_code::DIGEST32 => Output::Digest(Digest::B256(d.array("digest")?)),
        out_code::DIGEST16 => Output::Digest(Digest::B128(d.array("digest")?)),
        out_code::CRC => Output::Digest(Digest::Crc(d.u32("crc")?)),
        out_code::CHUNKS => {
            let n = d.count(12, "chunk count")?;
            let mut spans = Vec::with_capacity(n);
            for _ in 0..n {
                spans.push(ChunkSpan {
                    offset: d.u64("chunk offset")?,
                    len: d.u32("chunk length")?,
                });
            }
            Output::Chunks(spans)
        }
        out_code::DIGESTED => {
            let n = d.count(45, "chunk count")?;
            let mut chunks = Vec::with_capacity(n);
            for _ in 0..n {
                let span = ChunkSpan {
                    offset: d.u64("chunk offset")?,
                    len: d.u32("chunk length")?,
                };
                let digest = d.array("chunk digest")?;
                let crc32c = match d.u8("crc flag")? {
                    0 => None,
                    1 => Some(d.u32("chunk crc")?),
                    _ => return Err(ProtoError::Invalid("crc flag")),
                };
                chunks.push(DigestedChunk {
                    span,
                    digest,
                    crc32c,
                });
            }
            Output::DigestedChunks(chunks)
        }
        out_code::BYTES => Output::Bytes(d.blob(MAX_KEY_BYTES, "rsa output")?.to_vec()),
        out_code::ERROR => {
            let index = d.u32("segment index")? as usize;
            return Ok(Err(SegmentError {
                index,
                kind: get_segment_error(d)?,
            }));
        }
        _ => return Err(ProtoError::Invalid("result kind")),
    }))
}

fn put_segment_error(e: &mut Enc, k: &SegmentErrorKind) {
    match k {
        SegmentErrorKind::AuthenticationFailed => {
            e.u8(1);
        }
        SegmentErrorKind::IvLength { expected, got } => {
            e.u8(2).u64(*expected as u64).u64(*got as u64);
        }
        SegmentErrorKind::TooLarge { len, max } => {
            e.u8(3).u64(*len).u64(*max);
        }
        SegmentErrorKind::InputLength { expected, got } => {
            e.u8(4).u64(*expected as u64).u64(*got as u64);
        }
        SegmentErrorKind::InputOutOfRange => {
            e.u8(5);
        }
        SegmentErrorKind::DeviceResident => {
            e.u8(6);
        }
        SegmentErrorKind::Internal(s) => {
            e.u8(7).blob(s.as_bytes());
        }
    }
}

fn get_segment_error(d: &mut Dec<'_>) -> Result<SegmentErrorKind, ProtoError> {
    let pair = |d: &mut Dec<'_>| -> Result<(u64, u64), ProtoError> {
        Ok((d.u64("error field")?, d.u64("error field")?))
    };
    Ok(match d.u8("segment error kind")? {
        1 => SegmentErrorKind::AuthenticationFailed,
        2 => {
            let (expected, got) = pair(d)?;
            SegmentErrorKind::IvLength {
                expected: expected as usize,
                got: got as usize,
            }
        }
        3 => {
            let (len, max) = pair(d)?;
            SegmentErrorKind::TooLarge { len, max }
        }
        4 => {
            let (expected, got) = pair(d)?;
            SegmentErrorKind::InputLength {
                expected: expected as usize,
                got: got as usize,
            }
        }
        5 => SegmentErrorKind::InputOutOfRange,
        6 => SegmentErrorKind::DeviceResident,
        7 => SegmentErrorKind::Internal(d.string(MAX_TEXT, "error text")?),
        _ => return Err(ProtoError::Invalid("segment error kind")),
    })
}

/// Backend names travel as text; the error type wants a static name.
fn static_backend(name: &str) -> &'static str {
    match name {
        "cpu" => "cpu",
        "gpu" => "gpu",
        "auto" => "auto",
        _ => "daemon",
    }
}

fn put_backend_error(e: &mut Enc, err: &BackendError) {
    match err {
        BackendError::Unavailable { backend, reason } => {
            e.u8(1).blob(backend.as_bytes()).blob(reason.as_bytes());
        }
        BackendError::Unsupported { backend, op } => {
            e.u8(2).blob(backend.as_bytes()).blob(op.name().as_bytes());
        }
        BackendError::InvalidJob(s) => {
            e.u8(3).blob(s.as_bytes());
        }
        BackendError::Device(s) => {
            e.u8(4).blob(s.as_bytes());
        }
    }
}

fn get_backend_error(d: &mut Dec<'_>) -> Result<BackendError, ProtoError> {
    Ok(match d.u8("backend error kind")? {
        1 => BackendError::Unavailable {
            backend: static_backend(&d.string(64, "backend name")?),
            reason: d.string(MAX_TEXT, "reason")?,
        },
        2 => {
            let backend = static_backend(&d.string(64, "backend name")?);
            let op = OpKind::from_name(&d.string(64, "op name")?)
                .ok_or(ProtoError::Invalid("op name"))?;
            BackendError::Unsupported { backend, op }
        }
        3 => BackendError::InvalidJob(d.string(MAX_TEXT, "reason")?),
        4 => BackendError::Device(d.string(MAX_TEXT, "reason")?),
        _ => return Err(ProtoError::Invalid("backend error kind")),
    })
}
