//! Checkpoints in a gvault-cas repository (docs/repository.md §11).
//!
//! A checkpoint is a snapshot whose one path is `gvault-checkpoints/<name>`:
//! a directory entry, the file `manifest.json` (names, dtypes, shapes,
//! where each tensor lies), and one file `seg-NNNNNN` per segment. A
//! segment is one tensor's bytes, or a run of tiny tensors; each is chunked
//! on its own, so a chunk never spans two tensors unless they are tiny.
//! Chunks are stored uncompressed, so a chunk sealed on a GPU and one
//! sealed on the CPU are the same bytes.
//!
//! Saving: `chunk_sources` chunks segments and ids their chunks (one fused
//! accel job; on the GPU for device memory; callers run one a GPU at
//! once), `Saver::add` looks the ids up and plans packs of the new
//! chunks, one plan a place (host memory or one GPU), so each GPU seals
//! its own. A plan is sealed on the host (`Saver::seal_host`, then
//! `Saver::put` hands the pack to writer threads), or on its GPU by
//! `seal_plan_on_device`: its chunks copied into a device scratch buffer,
//! sealed there (`seal_device`), only the ciphertext copied back and the
//! pack written from there, recorded with `Saver::written_pack`. Both give
//! the same pack for the same pack id. `seal_plan_on_device` needs only
//! the repository, so each GPU's workers run it at once.
//! Loading: `read_segment` reads a segment on the host, every chunk
//! checked against its id; or `load_group_on_device` fetches a group of
//! chunks' ciphertext (`fetch`), copies it to the device, opens and
//! re-hashes it there and copies each chunk into place.

pub mod run;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::accel_jobs::{self, CipherItem, IdChunk, TAG_LEN};
use crate::backend::Kind;
use crate::index::{self, Location};
use crate::lock::Lock;
use crate::pack::{self, SealedBlob, SealedPack, FLAG_ZSTD, PACK_TARGET};
use crate::repo::ObjectKind;
use crate::snapshot::{self, ChunkRef, Entry, EntryKind, Snapshot};
use crate::work_queue::WorkQueue;
use crate::{Chunker, Error, Repository, Result};
use gvault_accel::{
    Backend, Data, DataMut, DeviceCopy, DeviceSlice, Digest, DigestAlgo, Job, Nonce96, OpenSegment,
    Output, SealSegment, Tag,
};

/// The directory every checkpoint snapshot names.
pub const ROOT: &str = "gvault-checkpoints";
pub const MANIFEST: &str = "manifest.json";
/// Device scratch a plan or a load group needs at most: a pack's worth of
/// chunks plus one largest chunk (16 MiB) and alignment.
pub const SCRATCH_BYTES: usize = PACK_TARGET + (16 << 20) + (1 << 20);
/// Segments longer than this are chunked in pieces of it (accel takes
/// segments below 4 GiB); the cut is the same on every path.
const PIECE: u64 = 1 << 30;
/// A job's input at most, host or device.
pub(crate) const JOB_BYTES: u64 = 1 << 30;
/// Device segments must start 16-byte aligned for AES-GCM.
const ALIGN: u64 = 16;

fn align(x: u64) -> u64 {
    x.div_ceil(ALIGN) * ALIGN
}

/// The stored path of checkpoint `name`.
pub fn ckpt_path(name: &str) -> Result<Vec<u8>> {
    if name.is_empty()
        || name.len() > 255
        || name == "."
        || name == ".."
        || name.bytes().any(|b| b == b'/' || b == 0)
    {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a checkpoint name (1 to 255 bytes, no '/' or NUL, not . or ..)"
        )));
    }
    Ok(format!("{ROOT}/{name}").into_bytes())
}

/// Where a segment's bytes are while it is saved. Host pointers are the
/// caller's buffers, kept alive and unchanged until the save ends.
#[derive(Clone, Copy, Debug)]
pub enum Source {
    Host { ptr: usize, len: usize },
    Device(DeviceSlice),
}

impl Source {
    /// The GPU holding the bytes; None for host memory.
    pub fn device(&self) -> Option<u32> {
        match self {
            Source::Host { .. } => None,
            Source::Device(d) => Some(d.device()),
        }
    }
    fn len(&self) -> u64 {
        match self {
            Source::Host { len, .. } => *len as u64,
            Source::Device(d) => d.len() as u64,
        }
    }
    /// # Safety
    /// The pointer must be valid for `len` bytes (the caller's promise).
    unsafe fn host(&self) -> Option<&[u8]> {
        match self {
            Source::Host { ptr, len } if *len == 0 => {
                let _ = ptr;
                Some(&[])
            }
            Source::Host { ptr, len } => Some(std::slice::from_raw_parts(*ptr as *const u8, *len)),
            Source::Device(_) => None,
        }
    }
    fn data_at(&self, off: u64, len: u64) -> Data<'_> {
        match self {
            // SAFETY: the caller keeps the buffer alive for the save.
            Source::Host { .. } => Data::Host(
                &unsafe { self.host() }.unwrap_or_default()[off as usize..(off + len) as usize],
            ),
            // SAFETY: a sub-range of a live device allocation.
            Source::Device(d) => {
                Data::Device(unsafe { DeviceSlice::new(d.device(), d.ptr() + off, len as usize) })
            }
        }
    }
}

/// Chunk boundaries and ids of `srcs` under the repository's chunker, one
/// job per up to `JOB_BYTES` of input (`backend` runs device-resident ones).
pub fn chunk_sources(
    repo: &Repository,
    backend: &dyn Backend,
    srcs: &[Source],
) -> Result<Vec<Vec<IdChunk>>> {
    // Pieces: (source, offset, len).
    let mut pieces: Vec<(usize, u64, u64)> = Vec::new();
    for (i, s) in srcs.iter().enumerate() {
        let mut off = 0;
        while off < s.len() {
            let n = PIECE.min(s.len() - off);
            pieces.push((i, off, n));
            off += n;
        }
    }
    let mut out = vec![Vec::new(); srcs.len()];
    let mut start = 0;
    while start < pieces.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < pieces.len() && (end == start || bytes + pieces[end].2 <= JOB_BYTES) {
            bytes += pieces[end].2;
            end += 1;
        }
        let group = &pieces[start..end];
        let found = chunk_pieces(repo, backend, srcs, group)?;
        for (&(si, off, _), chunks) in group.iter().zip(found) {
            out[si].extend(chunks.into_iter().map(|c| IdChunk {
                offset: c.offset + off,
                ..c
            }));
        }
        start = end;
    }
    Ok(out)
}

fn chunk_pieces(
    repo: &Repository,
    backend: &dyn Backend,
    srcs: &[Source],
    pieces: &[(usize, u64, u64)],
) -> Result<Vec<Vec<IdChunk>>> {
    let key = &repo.keys.chunk_id;
    let fail = |e: gvault_accel::BackendError| Error::Accel(format!("chunk job failed: {e}"));
    match repo.config.chunker {
        Chunker::Cdc { min, avg, max } => {
            let params = accel_jobs::chunk_params(min, avg, max)?;
            let mut job = Job::ChunkDigest {
                params,
                key,
                crc32c: false,
                segments: pieces
                    .iter()
                    .map(|&(s, off, n)| srcs[s].data_at(off, n))
                    .collect(),
            };
            let r = backend.run(&mut job).map_err(fail)?;
            if r.len() != pieces.len() {
                return Err(Error::Accel("chunk job lost segments".into()));
            }
            accel_jobs::id_chunks(r)
        }
        Chunker::Fixed { size } => {
            let size = size as u64;
            let mut spans: Vec<(usize, u64, u32)> = Vec::new();
            let mut segs: Vec<Data<'_>> = Vec::new();
            for (pi, &(s, off, n)) in pieces.iter().enumerate() {
                let mut o = 0;
                while o < n {
                    let len = size.min(n - o);
                    spans.push((pi, o, len as u32));
                    segs.push(srcs[s].data_at(off + o, len));
                    o += len;
                }
            }
            let mut out = vec![Vec::new(); pieces.len()];
            if segs.is_empty() {
                return Ok(out);
            }
            let mut job = Job::Digest {
                algo: DigestAlgo::Blake3Keyed(key),
                segments: segs,
            };
            let r = backend.run(&mut job).map_err(fail)?;
            if r.len() != spans.len() {
                return Err(Error::Accel("digest job lost segments".into()));
            }
            for ((pi, offset, len), r) in spans.into_iter().zip(r) {
                let id = match r {
                    Ok(Output::Digest(Digest::B256(d))) => d,
                    Ok(o) => return Err(Error::Accel(format!("digest job returned {o:?}"))),
                    Err(e) => return Err(Error::Accel(format!("hashing: {e}"))),
                };
                out[pi].push(IdChunk { offset, len, id });
            }
            Ok(out)
        }
    }
}

/// One new chunk in a pack plan: where it comes from and where it goes in
/// the plan's scratch buffer (16-byte aligned).
#[derive(Clone, Copy, Debug)]
pub struct PlanBlob {
    pub seg: usize,
    pub offset: u64,
    pub len: u32,
    pub id: [u8; 32],
    pub scratch: u64,
}

/// New chunks that make one pack, all from one place: host memory
/// (`device` None) or one GPU, whose chunks it seals.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    pub device: Option<u32>,
    pub blobs: Vec<PlanBlob>,
    /// Scratch bytes the plan needs (aligned layout).
    pub scratch_len: u64,
    /// Sum of the chunks' lengths.
    pub bytes: u64,
}

impl Plan {
    fn push(&mut self, seg: usize, c: &IdChunk) {
        let scratch = align(self.scratch_len);
        self.blobs.push(PlanBlob {
            seg,
            offset: c.offset,
            len: c.len,
            id: c.id,
            scratch,
        });
        self.scratch_len = scratch + c.len as u64;
        self.bytes += c.len as u64 + TAG_LEN as u64;
    }
}

/// What a save did.
#[derive(Clone, Debug, Default)]
pub struct SaveStats {
    pub segments: u64,
    pub bytes_total: u64,
    pub chunks_new: u64,
    pub chunks_known: u64,
    pub bytes_new: u64,
    pub bytes_added: u64,
    pub packs: u64,
    pub packs_sealed_on_device: u64,
}

/// One checkpoint being saved.
pub struct Saver {
    pub repo: Arc<Repository>,
    lock: Option<Lock>,
    pub sources: Vec<Source>,
    pub seg_chunks: Vec<Vec<ChunkRef>>,
    session: HashSet<[u8; 32]>,
    /// The plan being filled for each place (host, or a GPU): packs hold
    /// chunks of one place, so each GPU seals its own.
    cur: BTreeMap<Option<u32>, Plan>,
    pending: Vec<Location>,
    pack_sizes: HashMap<[u8; 32], u64>,
    writers: Option<Writers>,
    pub stats: SaveStats,
}

impl Saver {
    pub fn new(repo: Arc<Repository>) -> Result<Saver> {
        let lock = Lock::shared(repo.backend.clone())?;
        Ok(Saver {
            repo,
            lock: Some(lock),
            sources: Vec::new(),
            seg_chunks: Vec::new(),
            session: HashSet::new(),
            cur: BTreeMap::new(),
            pending: Vec::new(),
            pack_sizes: HashMap::new(),
            writers: None,
            stats: SaveStats::default(),
        })
    }

    fn known(&self, id: &[u8; 32]) -> Result<bool> {
        Ok(self.session.contains(id) || self.repo.index.lookup(&self.repo, id)?.is_some())
    }

    /// Registers segments and their chunks (from `chunk_sources`); returns
    /// the pack plans that filled up.
    pub fn add(&mut self, srcs: Vec<Source>, chunks: Vec<Vec<IdChunk>>) -> Result<Vec<Plan>> {
        let mut ready = Vec::new();
        for (src, chunks) in srcs.into_iter().zip(chunks) {
            let seg = self.sources.len();
            self.sources.push(src);
            self.stats.segments += 1;
            self.stats.bytes_total += src.len();
            let mut refs = Vec::with_capacity(chunks.len());
            for c in &chunks {
                refs.push(ChunkRef {
                    id: c.id,
                    len: c.len,
                });
                if self.known(&c.id)? {
                    self.stats.chunks_known += 1;
                    continue;
                }
                self.session.insert(c.id);
                self.stats.chunks_new += 1;
                self.stats.bytes_new += c.len as u64;
                let place = src.device();
                let plan = self.cur.entry(place).or_insert_with(|| Plan {
                    device: place,
                    ..Plan::default()
                });
                plan.push(seg, c);
                if plan.bytes >= PACK_TARGET as u64 {
                    ready.extend(self.cur.remove(&place));
                }
            }
            self.seg_chunks.push(refs);
        }
        Ok(ready)
    }

    /// The last, partly filled plans (one a place at most).
    pub fn take_rest(&mut self) -> Vec<Plan> {
        std::mem::take(&mut self.cur)
            .into_values()
            .filter(|p| !p.blobs.is_empty())
            .collect()
    }

    /// Seals `plan` on the host (the repository's accelerator) and lays
    /// out its pack.
    pub fn seal_host(&self, plan: &Plan) -> Result<SealedPack> {
        let mut blobs = Vec::with_capacity(plan.blobs.len());
        for b in &plan.blobs {
            // SAFETY: host sources stay valid for the save (caller's promise).
            let src = unsafe { self.sources[b.seg].host() }.ok_or_else(|| {
                Error::InvalidArgument("a device chunk cannot be sealed on the host path".into())
            })?;
            let data = src[b.offset as usize..b.offset as usize + b.len as usize].to_vec();
            blobs.push((b.id, data));
        }
        seal_pack_on_host(&self.repo, crate::repo::new_id(), blobs)
    }

    /// Hands a pack to the writer threads (sealing goes on while packs
    /// are written and synced); its chunks are indexed at commit, once
    /// every pack is durable.
    pub fn put(&mut self, p: SealedPack) -> Result<()> {
        if self.writers.is_none() {
            self.writers = Some(Writers::new(self.repo.backend.clone()));
        }
        let w = self
            .writers
            .as_mut()
            .ok_or_else(|| Error::Accel("pack writers missing".into()))?;
        w.send(p)?;
        let done = w.collect(false);
        self.written(done)
    }

    /// Records a pack [`seal_plan_on_device`] wrote; it is indexed at
    /// commit.
    pub fn written_pack(&mut self, p: WrittenPack) -> Result<()> {
        self.stats.packs_sealed_on_device += 1;
        self.written(vec![Ok((p.name, p.size, p.entries))])
    }

    fn written(&mut self, done: Vec<Written>) -> Result<()> {
        for r in done {
            let (name, size, entries) = r?;
            let id = crate::repo::parse_id(&name)
                .ok_or_else(|| Error::Accel("pack name is not an id".into()))?;
            self.pack_sizes.insert(id, size);
            self.stats.bytes_added += size;
            self.stats.packs += 1;
            for (i, e) in entries.into_iter().enumerate() {
                self.pending.push(Location {
                    pack: id,
                    ordinal: i as u32,
                    blob: e,
                });
            }
        }
        Ok(())
    }

    /// Writes the index file, then the snapshot (segment 0 is the
    /// manifest); returns the snapshot's name. Every plan must have been
    /// sealed and put.
    pub fn commit(&mut self, name: &str) -> Result<String> {
        if self.cur.values().any(|p| !p.blobs.is_empty()) {
            return Err(Error::InvalidArgument(
                "commit with chunks not yet sealed".into(),
            ));
        }
        if self.seg_chunks.is_empty() {
            return Err(Error::InvalidArgument(
                "a checkpoint needs its manifest".into(),
            ));
        }
        let root = ckpt_path(name)?;
        if let Some(mut w) = self.writers.take() {
            let done = w.collect(true);
            self.written(done)?;
        }
        if !self.pending.is_empty() {
            let entries = std::mem::take(&mut self.pending);
            let f = index::write_file(&self.repo, entries, &self.pack_sizes)?;
            self.stats.bytes_added += self.repo.backend.size(Kind::Index, &f.name)?;
            self.repo.index.add(f);
        }
        let lock = self
            .lock
            .take()
            .ok_or_else(|| Error::InvalidArgument("checkpoint already committed".into()))?;
        lock.check_held()?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        // SAFETY: getuid and getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let entry = |path: Vec<u8>, kind: EntryKind, chunks: Vec<ChunkRef>| Entry {
            path,
            kind,
            mode: if kind == EntryKind::Dir {
                0o040755
            } else {
                0o100644
            },
            uid,
            gid,
            mtime_ns: now,
            atime_ns: now,
            ctime_ns: now,
            dev: 0,
            ino: 0,
            size: chunks.iter().map(|c| c.len as u64).sum(),
            flags: 0,
            target: Vec::new(),
            link: 0,
            chunks,
        };
        let mut entries = vec![entry(root.clone(), EntryKind::Dir, Vec::new())];
        for (i, chunks) in std::mem::take(&mut self.seg_chunks).into_iter().enumerate() {
            let mut p = root.clone();
            p.push(b'/');
            if i == 0 {
                p.extend_from_slice(MANIFEST.as_bytes());
            } else {
                p.extend_from_slice(format!("seg-{:06}", i - 1).as_bytes());
            }
            entries.push(entry(p, EntryKind::File, chunks));
        }
        let snap = Snapshot {
            time_ns: now,
            hostname: crate::lock::hostname().into_bytes(),
            paths: vec![root],
            parent: None,
            entries,
        };
        let name = snap.write(&self.repo)?;
        drop(lock);
        Ok(name)
    }
}

/// Seals `plan` in place in `scratch` (device memory holding the
/// plan's chunks at their scratch offsets); returns the pack id and
/// the tags. Nothing leaves the device.
pub fn seal_device(
    repo: &Repository,
    plan: &Plan,
    backend: &dyn Backend,
    scratch: DeviceSlice,
) -> Result<([u8; 32], Vec<[u8; 16]>)> {
    if plan.device != Some(scratch.device()) {
        return Err(Error::InvalidArgument(format!(
            "a plan of chunks on {:?} sealed in scratch on device {}",
            plan.device,
            scratch.device()
        )));
    }
    if (scratch.len() as u64) < plan.scratch_len || !scratch.ptr().is_multiple_of(ALIGN) {
        return Err(Error::InvalidArgument(format!(
            "device scratch of {} bytes at {:#x}: the plan needs {} bytes, 16-byte aligned",
            scratch.len(),
            scratch.ptr(),
            plan.scratch_len
        )));
    }
    let pack_id = crate::repo::new_id();
    let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
    let aads: Vec<Vec<u8>> = plan
        .blobs
        .iter()
        .map(|b| pack::blob_aad(&b.id, b.len, 0))
        .collect();
    let mut segments = Vec::with_capacity(plan.blobs.len());
    for (i, (b, aad)) in plan.blobs.iter().zip(&aads).enumerate() {
        segments.push(SealSegment {
            nonce: Nonce96::try_from_slice(&pack::blob_nonce(i as u32))
                .map_err(|e| Error::Accel(e.to_string()))?,
            aad,
            // SAFETY: inside the scratch allocation (checked above).
            data: DataMut::Device(unsafe {
                DeviceSlice::new(scratch.device(), scratch.ptr() + b.scratch, b.len as usize)
            }),
        });
    }
    let mut job = Job::Seal {
        key: &key,
        segments,
    };
    let r = backend
        .run(&mut job)
        .map_err(|e| Error::Accel(format!("device seal failed: {e}")))?;
    if r.len() != plan.blobs.len() {
        return Err(Error::Accel("device seal lost segments".into()));
    }
    let tags = r
        .into_iter()
        .map(|r| match r {
            Ok(o) => o
                .tag()
                .map(|t| *t.as_bytes())
                .ok_or_else(|| Error::Accel(format!("seal returned {o:?}"))),
            Err(e) => Err(Error::Accel(format!("device sealing: {e}"))),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((pack_id, tags))
}

/// Seals uncompressed blobs `(id, plaintext)` under pack `pack_id`'s key
/// (nonce = position) on the repository's accelerator and lays out the
/// pack: a host-sealed checkpoint pack.
fn seal_pack_on_host(
    repo: &Repository,
    pack_id: [u8; 32],
    mut blobs: Vec<([u8; 32], Vec<u8>)>,
) -> Result<SealedPack> {
    let key = repo.keys.object_key(ObjectKind::Pack, &pack_id);
    let aads: Vec<Vec<u8>> = blobs
        .iter()
        .map(|(id, data)| pack::blob_aad(id, data.len() as u32, 0))
        .collect();
    let items = blobs
        .iter_mut()
        .zip(&aads)
        .enumerate()
        .map(|(i, ((_, data), aad))| CipherItem {
            nonce: pack::blob_nonce(i as u32),
            aad,
            data,
        })
        .collect();
    let tags = accel_jobs::seal(repo.accel(), &key, items)?;
    let sealed: Vec<SealedBlob<'_>> = blobs
        .iter()
        .zip(&tags)
        .map(|((id, c), t)| SealedBlob {
            id: *id,
            raw_len: c.len() as u32,
            flags: 0,
            ciphertext: c,
            tag: *t,
        })
        .collect();
    pack::assemble(repo, pack_id, &sealed)
}

/// A pack written to the repository, not yet indexed.
pub struct WrittenPack {
    pub name: String,
    pub size: u64,
    pub entries: Vec<pack::BlobEntry>,
}

/// Writes the pack of a plan sealed on the device from its ciphertext,
/// copied back to `host` (the scratch layout), straight from there (no
/// copy into a pack buffer); the caller records it with
/// [`Saver::written_pack`].
fn write_device_pack(
    repo: &Repository,
    plan: &Plan,
    pack_id: [u8; 32],
    tags: &[[u8; 16]],
    host: &[u8],
) -> Result<WrittenPack> {
    if (host.len() as u64) < plan.scratch_len || tags.len() != plan.blobs.len() {
        return Err(Error::InvalidArgument(
            "ciphertext shorter than the plan or tags missing".into(),
        ));
    }
    let blobs: Vec<SealedBlob<'_>> = plan
        .blobs
        .iter()
        .zip(tags)
        .map(|(b, t)| SealedBlob {
            id: b.id,
            raw_len: b.len,
            flags: 0,
            ciphertext: &host[b.scratch as usize..(b.scratch + b.len as u64) as usize],
            tag: *t,
        })
        .collect();
    let (entries, trailer) = pack::layout(repo, &pack_id, &blobs)?;
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 * blobs.len() + 1);
    for b in &blobs {
        parts.push(b.ciphertext);
        parts.push(&b.tag);
    }
    parts.push(&trailer);
    let name = hex::encode(pack_id);
    repo.backend.put_parts(Kind::Pack, &name, &parts)?;
    Ok(WrittenPack {
        size: pack::pack_len(&entries, &trailer) as u64,
        name,
        entries,
    })
}

/// Seconds spent in each step of one device item (the benchmark's trace).
pub type StepSeconds = [(&'static str, f64); 4];

/// `f`'s result and the seconds it took.
fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(T, f64)> {
    let t = std::time::Instant::now();
    let r = f()?;
    Ok((r, t.elapsed().as_secs_f64()))
}

fn device_copy(backend: &dyn Backend, device: u32, copies: &[DeviceCopy]) -> Result<()> {
    // SAFETY: the callers build every range from live slices they checked
    // against the plan or group (and the caller's promise that device
    // slices and host buffers stay valid for the call).
    match unsafe { backend.copy_device(device, copies) } {
        Some(r) => r.map_err(|e| Error::Accel(format!("device copy failed: {e}"))),
        None => Err(Error::Accel("no GPU to copy device memory with".into())),
    }
}

/// Seals `plan` on its GPU and writes its pack, all without the GIL or a
/// framework: the plan's chunks copied from their segments (`sources`,
/// indexed by segment) into `scratch`, sealed there, only the ciphertext
/// copied to `pinned` (page-locked host memory, at least the plan's
/// scratch length), and the pack written from there.
///
/// # Safety
/// `sources`' device slices, `scratch` and `pinned` are live for the call
/// and nothing else uses `scratch` or `pinned` meanwhile.
pub unsafe fn seal_plan_on_device(
    repo: &Repository,
    backend: &dyn Backend,
    plan: &Plan,
    sources: &[Source],
    scratch: DeviceSlice,
    pinned: &mut [u8],
) -> Result<(WrittenPack, StepSeconds)> {
    let Some(device) = plan.device else {
        return Err(Error::InvalidArgument(
            "a plan of host chunks has no device to seal on".into(),
        ));
    };
    if scratch.device() != device
        || (scratch.len() as u64) < plan.scratch_len
        || (pinned.len() as u64) < plan.scratch_len
    {
        return Err(Error::InvalidArgument(format!(
            "scratch of {} bytes on GPU {} and a host buffer of {} bytes for a plan of {} bytes on GPU {device}",
            scratch.len(),
            scratch.device(),
            pinned.len(),
            plan.scratch_len
        )));
    }
    let mut gather = Vec::with_capacity(plan.blobs.len());
    for b in &plan.blobs {
        let src = match sources.get(b.seg) {
            Some(Source::Device(d)) if d.device() == device => d,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "segment {} of a plan on GPU {device} is not in that GPU's memory",
                    b.seg
                )))
            }
        };
        if b.offset + b.len as u64 > src.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "a chunk runs past the end of segment {}",
                b.seg
            )));
        }
        gather.push(DeviceCopy {
            dst: scratch.ptr() + b.scratch,
            src: src.ptr() + b.offset,
            len: b.len as usize,
        });
    }
    let ((), gathered) = timed(|| device_copy(backend, device, &gather))?;
    let ((pack_id, tags), sealed) = timed(|| seal_device(repo, plan, backend, scratch))?;
    let back = DeviceCopy {
        dst: pinned.as_mut_ptr() as u64,
        src: scratch.ptr(),
        len: plan.scratch_len as usize,
    };
    let ((), copied) = timed(|| device_copy(backend, device, &[back]))?;
    let (w, written) = timed(|| write_device_pack(repo, plan, pack_id, &tags, pinned))?;
    Ok((
        w,
        [
            ("gather", gathered),
            ("seal", sealed),
            ("d2h", copied),
            ("write", written),
        ],
    ))
}

/// Loads chunks `chunks` of a segment (the first at segment offset
/// `first`) into `out`, the segment's device memory: their ciphertext
/// fetched into `pinned` (page-locked host memory), copied to `scratch`
/// on the same GPU, opened and re-hashed there, and each chunk copied
/// into place. Returns the bytes that crossed the link.
///
/// # Safety
/// `pinned`, `scratch` and `out` are live for the call and nothing else
/// uses `pinned` or `scratch`, or the group's range of `out`, meanwhile.
pub unsafe fn load_group_on_device(
    repo: &Repository,
    backend: &dyn Backend,
    chunks: &[ChunkRef],
    first: u64,
    pinned: &mut [u8],
    scratch: DeviceSlice,
    out: DeviceSlice,
) -> Result<(u64, StepSeconds)> {
    let device = scratch.device();
    if out.device() != device {
        return Err(Error::InvalidArgument(format!(
            "scratch on GPU {device} for a segment on GPU {}",
            out.device()
        )));
    }
    let (f, fetched) = timed(|| fetch(repo, chunks, first, pinned))?;
    if f.layout_len > scratch.len() as u64 {
        return Err(Error::InvalidArgument(format!(
            "device scratch of {} bytes for a group of {}",
            scratch.len(),
            f.layout_len
        )));
    }
    let up = DeviceCopy {
        dst: scratch.ptr(),
        src: pinned.as_ptr() as u64,
        len: f.layout_len as usize,
    };
    let ((), uploaded) = timed(|| device_copy(backend, device, &[up]))?;
    let ((), opened) = timed(|| open_device(repo, backend, &f, scratch))?;
    let mut scatter = Vec::with_capacity(f.items.len());
    for c in &f.items {
        if c.seg_offset + c.len as u64 > out.len() as u64 {
            return Err(Error::InvalidArgument(
                "a chunk runs past the end of its segment's device memory".into(),
            ));
        }
        scatter.push(DeviceCopy {
            dst: out.ptr() + c.seg_offset,
            src: scratch.ptr() + c.scratch,
            len: c.len as usize,
        });
    }
    let ((), scattered) = timed(|| device_copy(backend, device, &scatter))?;
    Ok((
        f.layout_len,
        [
            ("fetch", fetched),
            ("h2d", uploaded),
            ("open", opened),
            ("scatter", scattered),
        ],
    ))
}

/// Packs being written: at most `WRITE_QUEUE` wait for the writer
/// threads (bounding memory to a few dozen packs).
const WRITE_QUEUE: usize = 8;

/// Writer threads: half the cores, 3 to 16 (several GPUs seal faster
/// than one thread writes), and at least what the backend serves at once.
fn write_threads(backend: &dyn crate::Backend) -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    (cores / 2).clamp(3, 16).max(backend.parallelism())
}

type Written = Result<(String, u64, Vec<pack::BlobEntry>)>;

/// Packs written by background threads, results in any order.
struct Writers {
    queue: WorkQueue<SealedPack, (String, u64, Vec<pack::BlobEntry>)>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Writers {
    fn new(backend: Arc<dyn crate::Backend>) -> Writers {
        let (queue, (work, done)) = WorkQueue::new(WRITE_QUEUE);
        let threads = (0..write_threads(&*backend))
            .map(|_| {
                let (ends, backend) = ((work.clone(), done.clone()), backend.clone());
                std::thread::spawn(move || {
                    crate::work_queue::serve(ends, |p: SealedPack| {
                        backend
                            .put(Kind::Pack, &p.name, &p.bytes)
                            .map(|()| (p.name, p.bytes.len() as u64, p.entries))
                    })
                })
            })
            .collect();
        Writers { queue, threads }
    }

    fn send(&mut self, p: SealedPack) -> Result<()> {
        self.queue.send(p)
    }

    /// Results ready now (`wait`: all of them).
    fn collect(&mut self, wait: bool) -> Vec<Written> {
        self.queue.collect(wait)
    }
}

impl Drop for Writers {
    fn drop(&mut self) {
        self.queue.close();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The newest snapshot of checkpoint `name`, by its recorded time.
pub fn find(repo: &Repository, name: &str) -> Result<String> {
    let root = ckpt_path(name)?;
    let mut all = snapshot::headers(repo)?;
    while let Some((n, s)) = all.pop() {
        if s.paths.len() == 1 && s.paths[0] == root {
            return Ok(n);
        }
    }
    Err(Error::NotFound(format!("no checkpoint named {name:?}")))
}

/// Every checkpoint: (name, snapshot, time ns), oldest first.
pub fn list(repo: &Repository) -> Result<Vec<(String, String, i64)>> {
    let prefix = format!("{ROOT}/");
    Ok(snapshot::headers(repo)?
        .into_iter()
        .filter_map(|(n, s)| {
            let p = s.paths.first()?;
            let name = p.strip_prefix(prefix.as_bytes())?;
            (s.paths.len() == 1).then(|| (String::from_utf8_lossy(name).into_owned(), n, s.time_ns))
        })
        .collect())
}

/// An open checkpoint: its manifest and its segments' chunk lists.
pub struct Opened {
    pub manifest: Vec<u8>,
    pub segments: Vec<Vec<ChunkRef>>,
}

pub fn open(repo: &Repository, snap_name: &str) -> Result<Opened> {
    let snap = Snapshot::read(repo, snap_name)?;
    let bad =
        |why: &str| Error::corrupt(format!("checkpoint snapshot {snap_name}"), why.to_string());
    let root = match snap.paths.as_slice() {
        [p] if p.starts_with(format!("{ROOT}/").as_bytes()) => p.clone(),
        _ => return Err(bad("is not a checkpoint")),
    };
    let mut it = snap.entries.into_iter();
    match it.next() {
        Some(e) if e.kind == EntryKind::Dir && e.path == root => {}
        _ => return Err(bad("has no checkpoint directory entry")),
    }
    let mut files = Vec::new();
    for e in it {
        if e.kind != EntryKind::File || !e.path.starts_with(&root) {
            return Err(bad("holds an entry that is no checkpoint file"));
        }
        files.push(e.chunks);
    }
    if files.is_empty() {
        return Err(bad("has no manifest"));
    }
    let mut manifest = Vec::new();
    crate::restore::read_chunks(repo, &files[0], &mut |_, d| {
        manifest.extend_from_slice(d);
        Ok(())
    })?;
    Ok(Opened {
        manifest,
        segments: files.split_off(1),
    })
}

/// Reads a segment into `out` (exactly its length); every chunk is opened
/// and checked against its id.
pub fn read_segment(repo: &Repository, chunks: &[ChunkRef], out: &mut [u8]) -> Result<()> {
    let total: u64 = chunks.iter().map(|c| c.len as u64).sum();
    if total != out.len() as u64 {
        return Err(Error::InvalidArgument(format!(
            "segment is {total} bytes; the buffer {}",
            out.len()
        )));
    }
    let mut pos = 0usize;
    crate::restore::read_chunks(repo, chunks, &mut |_, d| {
        out[pos..pos + d.len()].copy_from_slice(d);
        pos += d.len();
        Ok(())
    })
}

/// A run of a segment's chunks, fetched for opening on the device.
#[derive(Debug)]
pub struct Fetched {
    /// Per chunk: its place in the host/scratch layout, its offset in the
    /// segment, its length, and how it is to be opened.
    pub items: Vec<FetchedChunk>,
    pub layout_len: u64,
}

#[derive(Debug)]
pub struct FetchedChunk {
    pub scratch: u64,
    pub seg_offset: u64,
    pub id: [u8; 32],
    pub len: u32,
    /// None: the host already opened it (a compressed blob); the device
    /// only re-hashes it.
    pub sealed: Option<(Location, [u8; 16])>,
}

/// Chunk ranges of a segment whose aligned layout, and the tag that
/// `fetch` reads past the last chunk, fit `cap` bytes (a chunk larger
/// than that gets a range of its own).
pub fn groups(chunks: &[ChunkRef], cap: u64) -> Vec<(usize, usize)> {
    let cap = cap.saturating_sub(TAG_LEN as u64);
    let mut out = Vec::new();
    let mut start = 0;
    while start < chunks.len() {
        let mut end = start;
        let mut used = 0;
        while end < chunks.len() && (end == start || align(used) + chunks[end].len as u64 <= cap) {
            used = align(used) + chunks[end].len as u64;
            end += 1;
        }
        out.push((start, end));
        start = end;
    }
    out
}

/// Fetches the ciphertext of `chunks` into `host` at aligned offsets (the
/// layout the caller copies to the device as is). `first_offset` is the
/// segment offset of the first chunk. Each chunk's ciphertext and tag are
/// read straight into place; the tag, kept aside, is overwritten by the
/// next chunk, so `host` needs `TAG_LEN` bytes past the layout.
pub fn fetch(
    repo: &Repository,
    chunks: &[ChunkRef],
    first_offset: u64,
    host: &mut [u8],
) -> Result<Fetched> {
    let mut items = Vec::with_capacity(chunks.len());
    let mut used = 0u64;
    let mut seg_off = first_offset;
    for c in chunks {
        let at = align(used);
        let end = at + c.len as u64;
        if end + TAG_LEN as u64 > host.len() as u64 {
            return Err(Error::InvalidArgument(format!(
                "host buffer of {} bytes is too small for the group ({} bytes)",
                host.len(),
                end + TAG_LEN as u64
            )));
        }
        let what = || format!("chunk {}", hex::encode(c.id));
        let loc = repo
            .index
            .lookup(repo, &c.id)?
            .ok_or_else(|| Error::corrupt(what(), "no index file names it (missing)"))?;
        let b = loc.blob;
        if b.raw_len != c.len {
            return Err(Error::corrupt(what(), "length differs from the snapshot"));
        }
        let name = loc.pack_name();
        if b.flags & FLAG_ZSTD == 0 && b.sealed_len as usize == c.len as usize + TAG_LEN {
            let with_tag = &mut host[at as usize..end as usize + TAG_LEN];
            repo.backend
                .get_range_into(Kind::Pack, &name, b.offset as u64, with_tag)?;
            let mut tag = [0u8; 16];
            tag.copy_from_slice(&with_tag[c.len as usize..]);
            items.push(FetchedChunk {
                scratch: at,
                seg_offset: seg_off,
                id: c.id,
                len: c.len,
                sealed: Some((loc, tag)),
            });
        } else {
            // Stored compressed (by a file backup that had the same chunk):
            // opened and checked here.
            let sealed = repo.backend.get_range(
                Kind::Pack,
                &name,
                b.offset as u64,
                b.sealed_len as usize,
            )?;
            let dst = &mut host[at as usize..end as usize];
            let opened = pack::open_blobs(repo, &name, &[(loc.ordinal, b)], vec![sealed])?;
            let plain = opened
                .into_iter()
                .next()
                .ok_or_else(|| Error::corrupt(what(), "not opened"))?
                .map_err(|why| Error::corrupt(format!("{} in pack {name}", what()), why))?;
            dst.copy_from_slice(&plain);
            items.push(FetchedChunk {
                scratch: at,
                seg_offset: seg_off,
                id: c.id,
                len: c.len,
                sealed: None,
            });
        }
        used = end;
        seg_off += c.len as u64;
    }
    Ok(Fetched {
        items,
        layout_len: used,
    })
}

/// Opens a fetched group in `scratch` on the device (one AES-GCM job per
/// pack) and re-hashes every chunk there against its id.
fn open_device(
    repo: &Repository,
    backend: &dyn Backend,
    f: &Fetched,
    scratch: DeviceSlice,
) -> Result<()> {
    if (scratch.len() as u64) < f.layout_len || !scratch.ptr().is_multiple_of(ALIGN) {
        return Err(Error::InvalidArgument(
            "device scratch too small or not 16-byte aligned".into(),
        ));
    }
    // SAFETY: inside the scratch allocation (checked above).
    let slice = |c: &FetchedChunk| unsafe {
        DeviceSlice::new(scratch.device(), scratch.ptr() + c.scratch, c.len as usize)
    };
    let mut by_pack: HashMap<[u8; 32], Vec<&FetchedChunk>> = HashMap::new();
    for c in &f.items {
        if let Some((loc, _)) = &c.sealed {
            by_pack.entry(loc.pack).or_default().push(c);
        }
    }
    for (p, chunks) in by_pack {
        let key = repo.keys.object_key(ObjectKind::Pack, &p);
        let aads: Vec<Vec<u8>> = chunks
            .iter()
            .map(|c| pack::blob_aad(&c.id, c.len, 0))
            .collect();
        let mut segments = Vec::with_capacity(chunks.len());
        for (c, aad) in chunks.iter().zip(&aads) {
            let (loc, tag) = c
                .sealed
                .as_ref()
                .ok_or_else(|| Error::Accel("unsealed".into()))?;
            segments.push(OpenSegment {
                nonce: Nonce96::try_from_slice(&pack::blob_nonce(loc.ordinal))
                    .map_err(|e| Error::Accel(e.to_string()))?,
                aad,
                tag: Tag::try_from_slice(tag).map_err(|e| Error::Accel(e.to_string()))?,
                data: DataMut::Device(slice(c)),
            });
        }
        let mut job = Job::Open {
            key: &key,
            segments,
        };
        let r = backend
            .run(&mut job)
            .map_err(|e| Error::Accel(format!("device open failed: {e}")))?;
        for (c, r) in chunks.iter().zip(&r) {
            if r.is_err() {
                return Err(Error::corrupt(
                    format!("chunk {} in pack {}", hex::encode(c.id), hex::encode(p)),
                    "does not authenticate (damaged or moved bytes)",
                ));
            }
        }
        if r.len() != chunks.len() {
            return Err(Error::Accel("device open lost segments".into()));
        }
    }
    if f.items.is_empty() {
        return Ok(());
    }
    let mut job = Job::Digest {
        algo: DigestAlgo::Blake3Keyed(&repo.keys.chunk_id),
        segments: f.items.iter().map(|c| Data::Device(slice(c))).collect(),
    };
    let r = backend
        .run(&mut job)
        .map_err(|e| Error::Accel(format!("device hash failed: {e}")))?;
    if r.len() != f.items.len() {
        return Err(Error::Accel("device hash lost segments".into()));
    }
    for (c, r) in f.items.iter().zip(r) {
        match r {
            Ok(Output::Digest(Digest::B256(d))) if d == c.id => {}
            Ok(Output::Digest(_)) => {
                return Err(Error::corrupt(
                    format!("chunk {}", hex::encode(c.id)),
                    "content does not match its chunk id",
                ))
            }
            other => return Err(Error::Accel(format!("device hash: {other:?}"))),
        }
    }
    Ok(())
}

/// For tests of the GPU path: re-seals every blob of pack `name` on the
/// host under the same pack id and lays the pack out again. A pack sealed
/// on a GPU equals this byte for byte exactly when the device produced
/// what the CPU would.
pub fn reseal_on_host(repo: &Repository, name: &str) -> Result<(Vec<u8>, Vec<u8>)> {
    let bytes = repo.backend.get(Kind::Pack, name)?;
    let entries = pack::read_header(repo, name, Some(&bytes))?;
    let pack_id = crate::repo::parse_id(name)
        .ok_or_else(|| Error::corrupt(format!("pack {name}"), "bad name"))?;
    let blobs: Vec<(u32, pack::BlobEntry)> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (i as u32, *e))
        .collect();
    let sealed: Vec<Vec<u8>> = entries
        .iter()
        .map(|e| bytes[e.offset as usize..(e.offset + e.sealed_len) as usize].to_vec())
        .collect();
    let opened = pack::open_blobs(repo, name, &blobs, sealed)?;
    let mut plain = Vec::with_capacity(opened.len());
    for (r, e) in opened.into_iter().zip(&entries) {
        let p = r.map_err(|why| Error::corrupt(format!("pack {name}"), why))?;
        if e.flags != 0 {
            return Err(Error::InvalidArgument(
                "pack holds compressed blobs (not a checkpoint pack)".into(),
            ));
        }
        plain.push((e.id, p));
    }
    let again = seal_pack_on_host(repo, pack_id, plain)?;
    Ok((bytes, again.bytes))
}
