//! The client: [`ServiceBackend`] is an accel [`Backend`] whose jobs run
//! in the daemon, so the store, the CAS and the benchmarks run unchanged
//! against it.
//!
//! A job's segments are copied into a shared staging buffer (one copy,
//! where a socket would take two), or, if they already lie in a buffer from
//! [`ServiceBackend::alloc_shared`], named where they are with no copy at
//! all; the request names ranges; the daemon works on the pages in place;
//! in-place results are copied back. Keys are registered once per
//! connection and named by handle. If the connection breaks, the job is
//! retried once on a new connection (staged data is unchanged by a failed
//! attempt); if the daemon is gone, the job fails with a clear error.

mod conn;
mod keys;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};

use gvault_accel::{
    AutoBackend, Backend, BackendError, CtrCipher, Data, DataMut, DigestAlgo, Job, RsaItem,
    RsaPrivateKey, SegmentError, SegmentErrorKind, SegmentResult, MAX_SEGMENT_LEN,
};
use rsa::pkcs1::EncodeRsaPrivateKey;
use zeroize::Zeroizing;

use crate::protocol::{
    BufRef, ChunkWire, CtrKind, DigestKind, ErrorCode, KeyKind, Reply, Request, RunOp, RunRequest,
    SegmentSpec, MAX_AAD, MAX_SEGMENTS,
};
use crate::shm::SharedMemory;
use conn::Connection;
use keys::{Fingerprint, KeyCache};

/// A staging buffer, reused across jobs.
struct Slab {
    id: u32,
    mem: SharedMemory,
}

/// Staging buffers of one connection, and its key handles.
struct Session {
    conn: Arc<Connection>,
    generation: u64,
    free: Mutex<Vec<Slab>>,
    keys: KeyCache,
}

impl Session {
    /// Staging bytes kept for reuse (beyond this, buffers are freed).
    const KEEP_BYTES: usize = 256 << 20;

    fn take_slab(&self, len: usize) -> Result<Slab, String> {
        {
            let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(i) = free
                .iter()
                .enumerate()
                .filter(|(_, s)| s.mem.len() >= len)
                .min_by_key(|(_, s)| s.mem.len())
                .map(|(i, _)| i)
            {
                return Ok(free.swap_remove(i));
            }
        }
        let size = len.max(1 << 20).next_power_of_two();
        let (id, mem) = self.conn.alloc(size)?;
        Ok(Slab { id, mem })
    }

    fn give_back(&self, slab: Slab) {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let kept: usize = free.iter().map(|s| s.mem.len()).sum();
        if kept + slab.mem.len() <= Self::KEEP_BYTES {
            free.push(slab);
            return;
        }
        drop(free);
        let _ = self.conn.call(&Request::Free { buffer: slab.id });
    }
}

/// A buffer shared with the daemon: jobs over segments inside it cross no
/// copy at all. Valid for the connection it was made on; after a
/// reconnection, jobs over it are staged like any other memory.
pub struct SharedBuffer {
    mem: Arc<SharedMemory>,
    id: u32,
    generation: u64,
    session: Weak<Session>,
}

impl std::ops::Deref for SharedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping lives as long as self; the daemon writes it
        // only during a job over it, which borrows it mutably.
        unsafe { &*self.mem.slice_mut(0, self.mem.len()).unwrap_or_default() }
    }
}

impl std::ops::DerefMut for SharedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; uniquely borrowed through self.
        unsafe { self.mem.slice_mut(0, self.mem.len()).unwrap_or_default() }
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        if let Some(s) = self.session.upgrade() {
            if s.generation == self.generation && s.conn.is_alive() {
                let _ = s.conn.call(&Request::Free { buffer: self.id });
            }
        }
    }
}

/// The daemon as an accel backend.
pub struct ServiceBackend {
    socket: PathBuf,
    session: Mutex<Option<Arc<Session>>>,
    generations: AtomicU64,
    /// User buffers: (generation, id, mapping), for zero-copy segments.
    shared: Mutex<Vec<(u64, u32, Weak<SharedMemory>)>>,
    /// Keys of the per-process fingerprint of key material (never sent).
    salt: [u8; 32],
}

/// What a segment of the job becomes in a request.
enum Place {
    /// Copied into the staging buffer at this offset.
    Staged(usize),
    /// Already in a user buffer.
    Shared(BufRef),
    /// Not sent: answered locally with this error.
    Local(SegmentErrorKind),
}

impl ServiceBackend {
    /// Connects to the daemon at `socket`.
    pub fn connect(socket: &Path) -> Result<ServiceBackend, String> {
        let mut salt = [0u8; 32];
        rand::Rng::fill(&mut rand::thread_rng(), &mut salt[..]);
        let b = ServiceBackend {
            socket: socket.to_path_buf(),
            session: Mutex::new(None),
            generations: AtomicU64::new(0),
            shared: Mutex::new(Vec::new()),
            salt,
        };
        b.session()?;
        Ok(b)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The live session, connecting anew if the last one broke.
    fn session(&self) -> Result<Arc<Session>, String> {
        let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = s.as_ref().filter(|s| s.conn.is_alive()) {
            return Ok(Arc::clone(live));
        }
        let conn = Connection::open(&self.socket)?;
        let fresh = Arc::new(Session {
            conn,
            generation: self.generations.fetch_add(1, Ordering::Relaxed) + 1,
            free: Mutex::new(Vec::new()),
            keys: KeyCache::default(),
        });
        *s = Some(Arc::clone(&fresh));
        Ok(fresh)
    }

    /// `len` zeroed bytes shared with the daemon (see [`SharedBuffer`]).
    pub fn alloc_shared(&self, len: usize) -> Result<SharedBuffer, BackendError> {
        let s = self.session().map_err(unavailable)?;
        let (id, mem) = s.conn.alloc(len).map_err(unavailable)?;
        let mem = Arc::new(mem);
        let mut list = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|(_, _, w)| w.strong_count() > 0);
        list.push((s.generation, id, Arc::downgrade(&mem)));
        Ok(SharedBuffer {
            mem,
            id,
            generation: s.generation,
            session: Arc::downgrade(&s),
        })
    }

    /// The daemon's status report (JSON).
    pub fn status(&self) -> Result<String, String> {
        match self.session()?.conn.call(&Request::Status)? {
            (Reply::Status(s), _) => Ok(s),
            (other, _) => Err(format!("unexpected reply to Status: {other:?}")),
        }
    }

    /// The handle of a key on this session (registered on first use),
    /// counted in use: the caller releases it with its fingerprint.
    fn key_handle(
        &self,
        s: &Session,
        kind: KeyKind,
        material: &[u8],
    ) -> Result<(u32, Fingerprint), String> {
        let mut h = blake3::Hasher::new_keyed(&self.salt);
        h.update(&[kind as u8]);
        h.update(material);
        let fp: Fingerprint = h.finalize().into();
        if let Some(handle) = s.keys.acquire(&fp) {
            return Ok((handle, fp));
        }
        // Stay under the daemon's per-connection bound: release idle
        // handles, least recently used first.
        let keep = (s.conn.limits.max_keys as usize).saturating_sub(2).max(1);
        for old in s.keys.evict(keep) {
            let _ = s.conn.call(&Request::ReleaseKey { handle: old });
        }
        let req = Request::RegisterKey {
            kind,
            material: Zeroizing::new(material.to_vec()),
        };
        match s.conn.call(&req)? {
            (Reply::Key { handle }, _) => {
                let (handle, spare) = s.keys.insert(fp, handle);
                if let Some(spare) = spare {
                    let _ = s.conn.call(&Request::ReleaseKey { handle: spare });
                }
                Ok((handle, fp))
            }
            (Reply::Error { message, .. }, _) => Err(message),
            (other, _) => Err(format!("unexpected reply to RegisterKey: {other:?}")),
        }
    }

    /// The op of a job, with its key registered on this session.
    fn run_op(&self, s: &Session, job: &Job<'_>) -> Result<(RunOp, Option<Fingerprint>), Failure> {
        let key = std::cell::Cell::new(None);
        let reg = |kind, bytes: &[u8]| {
            let (handle, fp) = self.key_handle(s, kind, bytes).map_err(Failure::Key)?;
            key.set(Some(fp));
            Ok(handle)
        };
        let op = match job {
            Job::Seal { key, .. } => RunOp::Seal {
                key: reg(KeyKind::Aes256, key.expose())?,
            },
            Job::Open { key, .. } => RunOp::Open {
                key: reg(KeyKind::Aes256, key.expose())?,
            },
            Job::Ctr { cipher, .. } => match cipher {
                CtrCipher::Aes256(k) => RunOp::Ctr {
                    cipher: CtrKind::Aes256,
                    key: reg(KeyKind::Aes256, k.expose())?,
                },
                CtrCipher::Tea(k) => RunOp::Ctr {
                    cipher: CtrKind::Tea,
                    key: reg(KeyKind::Tea, k.expose())?,
                },
                CtrCipher::Blowfish(k) => RunOp::Ctr {
                    cipher: CtrKind::Blowfish,
                    key: reg(KeyKind::Blowfish, k.expose())?,
                },
            },
            Job::Digest { algo, .. } => {
                let (algo, key) = match algo {
                    DigestAlgo::Blake3 => (DigestKind::Blake3, 0),
                    DigestAlgo::Blake3Keyed(k) => {
                        (DigestKind::Blake3Keyed, reg(KeyKind::Blake3, k.expose())?)
                    }
                    DigestAlgo::Sha256 => (DigestKind::Sha256, 0),
                    DigestAlgo::Md5 => (DigestKind::Md5, 0),
                    DigestAlgo::Crc32 => (DigestKind::Crc32, 0),
                    DigestAlgo::Crc32c => (DigestKind::Crc32c, 0),
                };
                RunOp::Digest { algo, key }
            }
            Job::Chunk { params, .. } => RunOp::Chunk {
                params: chunk_wire(params),
            },
            Job::ChunkDigest {
                params,
                key,
                crc32c,
                ..
            } => RunOp::ChunkDigest {
                params: chunk_wire(params),
                key: reg(KeyKind::Blake3, key.expose())?,
                crc32c: *crc32c,
            },
            Job::RsaPrivate { key, .. } => {
                let der = key
                    .inner()
                    .to_pkcs1_der()
                    .map_err(|e| Failure::Key(format!("cannot encode the RSA key: {e}")))?;
                RunOp::Rsa {
                    key: reg(KeyKind::Rsa, der.as_bytes())?,
                }
            }
            // `run` sends these one key at a time.
            Job::RsaPrivateKeys { .. } => {
                return Err(Failure::Key(
                    "a request names one RSA key; the job goes one key at a time".into(),
                ))
            }
        };
        Ok((op, key.get()))
    }

    /// Where a user buffer of this session holds `[ptr, ptr + len)`.
    fn shared_ref(&self, generation: u64, ptr: *const u8, len: usize) -> Option<BufRef> {
        let list = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        list.iter().find_map(|(g, id, w)| {
            let mem = w.upgrade().filter(|_| *g == generation)?;
            let off = mem.offset_of(ptr, len)?;
            Some(BufRef {
                buffer: *id,
                offset: off as u64,
                len: len as u64,
            })
        })
    }

    /// One attempt at the job on session `s`. In-place results reach the
    /// caller's buffers only once every round has succeeded, so a failed
    /// attempt leaves them as they were (and may be retried).
    fn attempt(&self, s: &Session, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, Failure> {
        let views = views(job);
        if let Some(v) = views.iter().find(|v| v.aad.len() > MAX_AAD) {
            return Err(Failure::Backend(BackendError::InvalidJob(format!(
                "{} bytes of associated data: the service takes at most {MAX_AAD} a segment",
                v.aad.len()
            ))));
        }
        let (op, key) = self.run_op(s, job)?;
        let _key_use = KeyUse { session: s, key };
        let n = views.len();
        // Place every segment: local errors, user buffers, staging.
        let mut places = Vec::with_capacity(n);
        let mut staged = 0usize;
        for v in &views {
            places.push(match v.bytes {
                None => Place::Local(SegmentErrorKind::DeviceResident),
                Some(_) if v.len as u64 > MAX_SEGMENT_LEN => {
                    Place::Local(SegmentErrorKind::TooLarge {
                        len: v.len as u64,
                        max: MAX_SEGMENT_LEN,
                    })
                }
                Some(p) => match self.shared_ref(s.generation, p, v.len) {
                    Some(r) => Place::Shared(r),
                    None => {
                        let at = staged;
                        staged += staged_len(v.len);
                        Place::Staged(at)
                    }
                },
            });
        }
        let mut results: Vec<Option<SegmentResult>> = vec![None; n];
        // Slabs of finished rounds whose in-place results still have to
        // be copied back: (slab, first segment's staging offset, range).
        let mut held: Vec<(Slab, usize, std::ops::Range<usize>)> = Vec::new();
        let outcome = (|| {
            let rounds = Rounds {
                session: s,
                op,
                job,
                views: &views,
                places: &places,
            };
            // Rounds: bounded by request size, segment count and staging.
            let body_cap = (s.conn.limits.max_request_body as usize).saturating_sub(4096);
            let stage_cap = (s.conn.limits.client_memory as usize / 4).max(1 << 20);
            let mut i = 0;
            while i < n {
                let mut end = i;
                let (mut body, mut stage) = (64usize, 0usize);
                let mut base = None;
                while end < n && end - i < MAX_SEGMENTS {
                    let extra = 64 + views[end].aad.len();
                    let st = match places[end] {
                        Place::Staged(at) => {
                            base.get_or_insert(at);
                            staged_len(views[end].len)
                        }
                        _ => 0,
                    };
                    if end > i && (body + extra > body_cap || stage + st > stage_cap) {
                        break;
                    }
                    body += extra;
                    stage += st;
                    end += 1;
                }
                let base = base.unwrap_or(0);
                let slab = rounds.round(i..end, stage, base, &mut results)?;
                match slab {
                    Some(slab) if op.writes() => held.push((slab, base, i..end)),
                    Some(slab) => s.give_back(slab),
                    None => {}
                }
                i = end;
            }
            Ok(())
        })();
        if outcome.is_ok() {
            for (slab, base, range) in &held {
                for i in range.clone() {
                    if let Place::Staged(at) = places[i] {
                        // SAFETY: the slab is this thread's until given
                        // back, and the daemon has finished with it.
                        if let Some(src) = unsafe { slab.mem.slice_mut(at - base, views[i].len) } {
                            copy(segment_bytes_mut(job, i), src);
                        }
                    }
                }
            }
        }
        for (slab, _, _) in held {
            s.give_back(slab);
        }
        outcome?;
        Ok(results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|| Err(SegmentErrorKind::Internal("no result".into()).at(i)))
            })
            .collect())
    }
}

/// What every round of one attempt shares.
struct Rounds<'a, 'j> {
    session: &'a Session,
    op: RunOp,
    job: &'a Job<'j>,
    views: &'a [View],
    places: &'a [Place],
}

impl Rounds<'_, '_> {
    /// Copies a round's staged segments (`stage` bytes from staging offset
    /// `base`) in, runs it, and records its results; returns its staging
    /// slab (given back on failure).
    fn round(
        &self,
        range: std::ops::Range<usize>,
        stage: usize,
        base: usize,
        results: &mut [Option<SegmentResult>],
    ) -> Result<Option<Slab>, Failure> {
        let s = self.session;
        let slab = if stage > 0 {
            Some(s.take_slab(stage).map_err(Failure::Stage)?)
        } else {
            None
        };
        match self.run_round(range, base, slab.as_ref(), results) {
            Ok(()) => Ok(slab),
            Err(f) => {
                if let Some(slab) = slab {
                    s.give_back(slab);
                }
                Err(f)
            }
        }
    }

    fn run_round(
        &self,
        range: std::ops::Range<usize>,
        base: usize,
        slab: Option<&Slab>,
        results: &mut [Option<SegmentResult>],
    ) -> Result<(), Failure> {
        let mut specs = Vec::new();
        let mut sent = Vec::new();
        for i in range {
            let data = match self.places[i] {
                Place::Local(ref k) => {
                    results[i] = Some(Err(k.clone().at(i)));
                    continue;
                }
                Place::Shared(r) => r,
                Place::Staged(at) => {
                    let slab = slab.ok_or(Failure::Stage("no staging buffer".into()))?;
                    let off = at - base;
                    let len = self.views[i].len;
                    // SAFETY: the slab is this thread's until given back; the
                    // range is inside it (the round's staging fits it).
                    let dst = unsafe { slab.mem.slice_mut(off, len) }
                        .ok_or(Failure::Stage("staging overflow".into()))?;
                    copy(dst, segment_bytes(self.job, i));
                    BufRef {
                        buffer: slab.id,
                        offset: off as u64,
                        len: len as u64,
                    }
                }
            };
            let v = &self.views[i];
            specs.push(SegmentSpec {
                data,
                nonce: v.nonce,
                tag: v.tag,
                aad: v.aad.clone(),
                iv: v.iv.clone(),
            });
            sent.push(i);
        }
        if specs.is_empty() {
            return Ok(());
        }
        let reply = self
            .session
            .conn
            .call(&Request::Run(RunRequest {
                op: self.op,
                segments: specs,
            }))
            .map_err(Failure::Connection)?;
        let out = match reply.0 {
            Reply::Run(r) if r.len() == sent.len() => r,
            Reply::Run(r) => {
                return Err(Failure::Backend(BackendError::Device(format!(
                    "the service returned {} results for {} segments",
                    r.len(),
                    sent.len()
                ))))
            }
            Reply::RunFailed(e) => return Err(Failure::Backend(e)),
            Reply::Error { code, message } => return Err(Failure::Refused(code, message)),
            other => {
                return Err(Failure::Backend(BackendError::Device(format!(
                    "unexpected reply to Run: {other:?}"
                ))))
            }
        };
        for (r, &i) in out.into_iter().zip(&sent) {
            results[i] = Some(r.map_err(|e| SegmentError { index: i, ..e }));
        }
        Ok(())
    }
}

/// A key handle in use by one attempt, released when it ends.
struct KeyUse<'a> {
    session: &'a Session,
    key: Option<Fingerprint>,
}

impl Drop for KeyUse<'_> {
    fn drop(&mut self) {
        if let Some(fp) = &self.key {
            self.session.keys.release(fp);
        }
    }
}

/// Copies a segment to or from staging; large ones on several cores (one
/// core's copy runs well below the memory's bandwidth).
fn copy(dst: &mut [u8], src: &[u8]) {
    const PIECE: usize = 1 << 20;
    if src.len() < 4 * PIECE {
        dst.copy_from_slice(src);
        return;
    }
    use rayon::prelude::*;
    dst.par_chunks_mut(PIECE)
        .zip(src.par_chunks(PIECE))
        .for_each(|(d, s)| d.copy_from_slice(s));
}

/// Staging space a segment takes: 64-byte aligned, and never none (an
/// empty segment still names a buffer).
fn staged_len(len: usize) -> usize {
    len.next_multiple_of(64).max(64)
}

/// Why an attempt failed.
enum Failure {
    /// The connection broke: retry on a new one.
    Connection(String),
    Key(String),
    Stage(String),
    Backend(BackendError),
    Refused(ErrorCode, String),
}

fn unavailable(reason: String) -> BackendError {
    BackendError::Unavailable {
        backend: "service",
        reason,
    }
}

impl Failure {
    fn into_error(self) -> BackendError {
        match self {
            Failure::Connection(why) | Failure::Key(why) | Failure::Stage(why) => unavailable(why),
            Failure::Backend(e) => e,
            Failure::Refused(ErrorCode::ShuttingDown | ErrorCode::Quota, why) => unavailable(why),
            Failure::Refused(_, why) => BackendError::InvalidJob(why),
        }
    }
}

impl Backend for ServiceBackend {
    fn name(&self) -> &'static str {
        "service"
    }

    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        if job.is_empty() {
            return Ok(Vec::new());
        }
        if let Job::RsaPrivateKeys { items } = job {
            return self.run_per_key(items);
        }
        let mut last = None;
        for _ in 0..2 {
            let s = match self.session() {
                Ok(s) => s,
                Err(why) => {
                    return Err(unavailable(match last {
                        Some(broke) => format!("{broke}; reconnecting: {why}"),
                        None => why,
                    }))
                }
            };
            match self.attempt(&s, job) {
                Ok(r) => return Ok(r),
                // Staged data is unchanged by a broken attempt; data in
                // user buffers may have been transformed, so no retry. A
                // break first seen while registering a key or a staging
                // buffer is a broken connection too.
                Err(Failure::Connection(why) | Failure::Key(why) | Failure::Stage(why))
                    if !s.conn.is_alive() && !self.used_shared(job, s.generation) =>
                {
                    last = Some(why)
                }
                Err(f) => return Err(f.into_error()),
            }
        }
        Err(unavailable(last.unwrap_or_default()))
    }
}

impl ServiceBackend {
    fn used_shared(&self, job: &Job<'_>, generation: u64) -> bool {
        views(job).iter().any(|v| {
            v.bytes
                .is_some_and(|p| self.shared_ref(generation, p, v.len).is_some())
        })
    }
}

/// The fields of one segment, whatever the job.
struct View {
    bytes: Option<*const u8>,
    len: usize,
    nonce: [u8; 12],
    tag: [u8; 16],
    aad: Vec<u8>,
    iv: Vec<u8>,
}

fn views(job: &Job<'_>) -> Vec<View> {
    let plain = |bytes: Option<*const u8>, len| View {
        bytes,
        len,
        nonce: [0; 12],
        tag: [0; 16],
        aad: Vec::new(),
        iv: Vec::new(),
    };
    let mut_ptr = |d: &DataMut<'_>| match d {
        DataMut::Host(b) => Some(b.as_ptr()),
        DataMut::Device(_) => None,
    };
    let ptr = |d: &Data<'_>| d.host().map(|b| b.as_ptr());
    match job {
        Job::Seal { segments, .. } => segments
            .iter()
            .map(|s| View {
                nonce: *s.nonce.as_bytes(),
                aad: s.aad.to_vec(),
                ..plain(mut_ptr(&s.data), s.data.len())
            })
            .collect(),
        Job::Open { segments, .. } => segments
            .iter()
            .map(|s| View {
                nonce: *s.nonce.as_bytes(),
                tag: *s.tag.as_bytes(),
                aad: s.aad.to_vec(),
                ..plain(mut_ptr(&s.data), s.data.len())
            })
            .collect(),
        Job::Ctr { segments, .. } => segments
            .iter()
            .map(|s| View {
                iv: match s.iv {
                    gvault_accel::CtrIv::B128(iv) => iv.as_bytes().to_vec(),
                    gvault_accel::CtrIv::B64(iv) => iv.as_bytes().to_vec(),
                },
                ..plain(mut_ptr(&s.data), s.data.len())
            })
            .collect(),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => {
            segments.iter().map(|d| plain(ptr(d), d.len())).collect()
        }
        Job::RsaPrivate { segments, .. } => segments
            .iter()
            .map(|b| plain(Some(b.as_ptr()), b.len()))
            .collect(),
        Job::RsaPrivateKeys { items } => items
            .iter()
            .map(|it| plain(Some(it.input.as_ptr()), it.input.len()))
            .collect(),
    }
}

impl ServiceBackend {
    /// A request names one key: a job under many keys goes as one request
    /// a key (the daemon batches requests across keys again), its results
    /// put back in item order.
    fn run_per_key(&self, items: &[RsaItem<'_>]) -> Result<Vec<SegmentResult>, BackendError> {
        let mut by_key: Vec<(&RsaPrivateKey, Vec<usize>)> = Vec::new();
        for (i, it) in items.iter().enumerate() {
            match by_key.iter_mut().find(|(k, _)| std::ptr::eq(*k, it.key)) {
                Some((_, idx)) => idx.push(i),
                None => by_key.push((it.key, vec![i])),
            }
        }
        let mut results: Vec<Option<SegmentResult>> = vec![None; items.len()];
        for (key, idx) in by_key {
            let mut job = Job::RsaPrivate {
                key,
                segments: idx.iter().map(|&i| items[i].input).collect(),
            };
            let done = self.run(&mut job)?;
            if done.len() != idx.len() {
                return Err(BackendError::Device(format!(
                    "the service returned {} results for {} RSA inputs",
                    done.len(),
                    idx.len()
                )));
            }
            for (&i, r) in idx.iter().zip(done) {
                results[i] = Some(r.map_err(|e| e.kind.at(i)));
            }
        }
        results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.ok_or_else(|| BackendError::Device(format!("RSA job: no result for item {i}")))
            })
            .collect()
    }
}

/// Segment `i`'s host bytes (callers checked it is host memory).
fn segment_bytes<'j>(job: &'j Job<'_>, i: usize) -> &'j [u8] {
    let m = |d: &'j DataMut<'_>| match d {
        DataMut::Host(b) => &**b,
        DataMut::Device(_) => &[][..],
    };
    match job {
        Job::Seal { segments, .. } => m(&segments[i].data),
        Job::Open { segments, .. } => m(&segments[i].data),
        Job::Ctr { segments, .. } => m(&segments[i].data),
        Job::Digest { segments, .. }
        | Job::Chunk { segments, .. }
        | Job::ChunkDigest { segments, .. } => segments[i].host().unwrap_or(&[]),
        Job::RsaPrivate { segments, .. } => segments[i],
        Job::RsaPrivateKeys { items } => items[i].input,
    }
}

/// Segment `i`'s bytes for writing back (in-place ops only).
fn segment_bytes_mut<'j>(job: &'j mut Job<'_>, i: usize) -> &'j mut [u8] {
    let data = match job {
        Job::Seal { segments, .. } => &mut segments[i].data,
        Job::Open { segments, .. } => &mut segments[i].data,
        Job::Ctr { segments, .. } => &mut segments[i].data,
        _ => return &mut [],
    };
    data.host_mut().unwrap_or(&mut [])
}

fn chunk_wire(p: &gvault_accel::ChunkParams) -> ChunkWire {
    ChunkWire {
        min: p.min(),
        avg: p.avg(),
        max: p.max(),
        level: p.level(),
    }
}

/// Where `GVAULT_ACCEL=service` connects: `service:PATH` names the socket,
/// plain `service` the default.
pub fn socket_from_spec(spec: &str) -> Option<PathBuf> {
    match spec.strip_prefix("service") {
        Some("") => Some(crate::server::default_socket()),
        Some(rest) => rest
            .strip_prefix(':')
            .filter(|p| !p.is_empty())
            .map(PathBuf::from),
        None => None,
    }
}

/// The backend for `--accel service[:SOCKET]`: the daemon if it answers;
/// else, unless `required`, the in-process auto backend, with one warning
/// line per process.
pub fn service_or_local(socket: &Path, required: bool) -> Result<Arc<dyn Backend>, String> {
    match ServiceBackend::connect(socket) {
        Ok(b) => Ok(Arc::new(b)),
        Err(why) if required => Err(format!(
            "the gvault service is required (GVAULT_SERVICE_REQUIRE=1) but unavailable: {why}"
        )),
        Err(why) => {
            static WARN: Once = Once::new();
            WARN.call_once(|| {
                eprintln!(
                    "gvault: warning: no gvault service ({why}); running the accelerators \
                     in this process"
                )
            });
            Ok(AutoBackend::shared())
        }
    }
}
