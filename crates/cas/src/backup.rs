//! Backup: read → chunk + id (one accel job per batch of small files or per
//! window of a large file) → index lookup → compress → seal (one accel job
//! per pack) → pack writes; then the index file, then the snapshot. A
//! snapshot is written only after every chunk it names is in a pack and an
//! index file, so a backup killed at any moment leaves a consistent
//! repository: at worst packs no index names, which the next backup adopts
//! and `prune` removes if nothing uses them.
//!
//! Memory is bounded by three read windows (64 MiB each, or four times the
//! largest chunk; `GVAULT_CAS_WINDOW_MIB`), the packs in flight (16 MiB
//! each, two per pack writer) and the session's index entries (flushed to
//! an index file every `INDEX_FLUSH` chunks).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::thread::Scope;
use std::time::{SystemTime, UNIX_EPOCH};

use rayon::prelude::*;

use crate::accel_jobs::{self, IdChunk};
use crate::backend::Kind;
use crate::error::{Error, Result};
use crate::index::{self, Location};
use crate::lock::Lock;
use crate::pack::{self, PackBuilder, FLAG_ZSTD, PACK_TARGET};
use crate::repo::{Chunker, Repository};
use crate::snapshot::{self, ChunkRef, Entry, EntryKind, Snapshot, FLAG_SPARSE};
use crate::stage_clock::{Stage, StageClock};
use crate::work_queue::WorkQueue;

const WINDOW: usize = 64 << 20;
/// Windows a large file's stream holds at once: one being read, one being
/// chunked, one being packed.
const STREAM_BUFFERS: usize = 3;
/// Files up to this size are read whole and chunked many to one job.
const SMALL_FILE: u64 = 4 << 20;
const BATCH_FILES: usize = 4096;
const INDEX_FLUSH: usize = 200_000;

/// What a backup did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupSummary {
    pub snapshot: String,
    pub parent: Option<String>,
    pub files_new: u64,
    pub files_changed: u64,
    pub files_unchanged: u64,
    pub dirs: u64,
    /// Bytes of file contents read.
    pub bytes_read: u64,
    /// Bytes of all files in the snapshot.
    pub bytes_total: u64,
    pub chunks_new: u64,
    pub chunks_known: u64,
    /// Plaintext bytes of the new chunks.
    pub bytes_new_raw: u64,
    /// Bytes added to the repository (sealed, after dedup and compression).
    pub bytes_added: u64,
    pub packs_written: u64,
    /// Unindexed packs of an interrupted backup, indexed by this one.
    pub packs_adopted: u64,
    /// Files and directories that could not be read (skipped) or changed
    /// while read, one message each.
    pub warnings: Vec<String>,
}

/// Progress as files are read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    pub files: u64,
    /// Bytes of file contents read.
    pub bytes: u64,
    /// Bytes of the files found unchanged since the parent snapshot (not
    /// read again): with `bytes`, how far through the tree the backup is.
    pub bytes_unchanged: u64,
}

pub type ProgressFn<'a> = &'a mut dyn FnMut(Progress);

/// Packs are sealed and written by this many threads (at least 2), so that
/// chunking and packing go on while packs are sealed, written and synced;
/// on object storage, as many as the backend's connections (at most 8: each
/// holds up to two 16 MiB packs), since each mostly waits on the network.
fn pack_threads(repo: &Repository) -> usize {
    let cpu = std::thread::available_parallelism().map_or(2, |n| (n.get() / 2).clamp(2, 8));
    cpu.max(repo.backend.parallelism().min(8))
}

/// Seals and writes packs on background threads; results come back in any
/// order, and a pack's chunks are indexed only once it is durable. At most
/// `2 × pack_threads()` packs are held (queued or being sealed).
type Uploads = WorkQueue<PackBuilder, (String, u64, Vec<pack::BlobEntry>)>;
type Uploaded = Result<(String, u64, Vec<pack::BlobEntry>)>;

fn start_uploads<'s, 'r: 's>(
    repo: &'r Repository,
    scope: &'s Scope<'s, 'r>,
    spare: &Arc<SpareBuffers>,
    clock: &Arc<StageClock>,
) -> Uploads {
    let threads = pack_threads(repo);
    let (q, (work, done)) = Uploads::new(threads);
    for _ in 0..threads {
        let ends = (work.clone(), done.clone());
        let spare = spare.clone();
        let clock = clock.clone();
        scope.spawn(move || {
            crate::work_queue::serve(ends, |p: PackBuilder| {
                let p = clock.time(Stage::Seal, || p.seal(repo))?;
                let put = clock.time(Stage::Write, || {
                    repo.backend.put(Kind::Pack, &p.name, &p.bytes)
                });
                let len = p.bytes.len() as u64;
                spare.give(p.bytes);
                put.map(|()| (p.name, len, p.entries))
            })
        });
    }
    q
}

/// Pack buffers handed back by the pack writers for the next packs: a
/// fresh 16 MiB buffer costs a page fault and a page clear every 4 KiB,
/// on the one thread that gathers chunks into packs. At most `keep` are
/// kept (as many as can be in flight at once).
struct SpareBuffers {
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
}

impl SpareBuffers {
    fn new(keep: usize) -> SpareBuffers {
        SpareBuffers {
            free: Mutex::new(Vec::new()),
            keep,
        }
    }

    fn give(&self, b: Vec<u8>) {
        if let Ok(mut f) = self.free.lock() {
            if f.len() < self.keep {
                f.push(b);
            }
        }
    }

    /// An empty pack builder, on a spare buffer where there is one.
    fn builder(&self) -> PackBuilder {
        match self.free.lock().ok().and_then(|mut f| f.pop()) {
            Some(b) => PackBuilder::with_buffer(b),
            None => PackBuilder::default(),
        }
    }
}

/// A large file's read window: page-locked where the accel backend has a
/// GPU that may take the chunk job (its DMA engines read it directly),
/// else ordinary memory.
enum Window {
    Heap(Vec<u8>),
    Pinned(gvault_accel::PinnedBuffer),
}

impl Window {
    fn new(repo: &Repository, len: usize) -> Window {
        match repo.accel().alloc_host(len) {
            Some(p) => Window::Pinned(p),
            None => Window::Heap(vec![0u8; len]),
        }
    }
}

impl std::ops::Deref for Window {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Window::Heap(v) => v,
            Window::Pinned(p) => p,
        }
    }
}

impl std::ops::DerefMut for Window {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Window::Heap(v) => v,
            Window::Pinned(p) => p,
        }
    }
}

/// Chunks go through here: dedup, compression, packs, index entries.
struct Writer<'r> {
    repo: &'r Repository,
    /// Read windows kept from one large file to the next.
    windows: Vec<Window>,
    uploads: Uploads,
    spare: Arc<SpareBuffers>,
    clock: Arc<StageClock>,
    packer: PackBuilder,
    /// Ids written this session whose index file is not yet written.
    session: HashSet<[u8; 32]>,
    pending: Vec<Location>,
    pack_sizes: HashMap<[u8; 32], u64>,
    sum: BackupSummary,
}

impl<'r> Writer<'r> {
    fn new<'s>(repo: &'r Repository, scope: &'s Scope<'s, 'r>) -> Self {
        // Packs in flight: queued, being sealed and written, one filling.
        let spare = Arc::new(SpareBuffers::new(3 * pack_threads(repo) + 1));
        let clock = Arc::new(StageClock::new());
        Writer {
            repo,
            windows: Vec::new(),
            uploads: start_uploads(repo, scope, &spare, &clock),
            spare,
            clock,
            packer: PackBuilder::default(),
            session: HashSet::new(),
            pending: Vec::new(),
            pack_sizes: HashMap::new(),
            sum: BackupSummary::default(),
        }
    }

    fn known(&self, id: &[u8; 32]) -> Result<bool> {
        Ok(self.session.contains(id) || self.repo.index.lookup(self.repo, id)?.is_some())
    }

    /// Adds the chunks of `data`; returns the file's chunk list part.
    fn add(&mut self, data: &[u8], chunks: &[IdChunk]) -> Result<Vec<ChunkRef>> {
        let clock = self.clock.clone();
        let mut fresh: Vec<(usize, &[u8])> = Vec::new();
        clock.time(Stage::Dedup, || {
            let mut seen_here = HashSet::new();
            for (i, c) in chunks.iter().enumerate() {
                if self.known(&c.id)? || !seen_here.insert(c.id) {
                    self.sum.chunks_known += 1;
                } else {
                    let s = c.offset as usize;
                    fresh.push((i, &data[s..s + c.len as usize]));
                }
            }
            Ok::<(), Error>(())
        })?;
        let compress = self.repo.config.compression;
        let compressed: Vec<Option<Vec<u8>>> = clock.time(Stage::Compress, || {
            if compress {
                fresh
                    .par_iter()
                    .map(|(_, bytes)| pack::maybe_compress(bytes))
                    .collect()
            } else {
                vec![None; fresh.len()]
            }
        });
        // Into packs a batch at a time (each pack's copies in parallel),
        // a pack written once it reaches its target.
        let mut batch: Vec<pack::NewBlob<'_>> = Vec::new();
        let mut batch_bytes = 0usize;
        for ((i, bytes), z) in fresh.iter().zip(&compressed) {
            let c = &chunks[*i];
            self.session.insert(c.id);
            self.sum.chunks_new += 1;
            self.sum.bytes_new_raw += bytes.len() as u64;
            let blob = match z {
                Some(z) => (c.id, c.len, FLAG_ZSTD, z.as_slice()),
                None => (c.id, c.len, 0, *bytes),
            };
            batch_bytes += blob.3.len() + crate::accel_jobs::TAG_LEN;
            batch.push(blob);
            if self.packer.bytes() + batch_bytes >= PACK_TARGET {
                let packer = &mut self.packer;
                clock.time(Stage::Gather, || packer.add_many(&batch));
                batch.clear();
                batch_bytes = 0;
                self.flush_pack()?;
            }
        }
        let packer = &mut self.packer;
        clock.time(Stage::Gather, || packer.add_many(&batch));
        Ok(chunks
            .iter()
            .map(|c| ChunkRef {
                id: c.id,
                len: c.len,
            })
            .collect())
    }

    fn flush_pack(&mut self) -> Result<()> {
        if self.packer.is_empty() {
            return Ok(());
        }
        let p = std::mem::replace(&mut self.packer, self.spare.builder());
        let uploads = &mut self.uploads;
        self.clock.time(Stage::PackWait, || uploads.send(p))?;
        let done = self.uploads.collect(false);
        self.written(done)?;
        if self.pending.len() >= INDEX_FLUSH {
            self.flush_index()?;
        }
        Ok(())
    }

    /// Records packs that are now durable.
    fn written(&mut self, done: Vec<Uploaded>) -> Result<()> {
        for r in done {
            let (name, size, entries) = r?;
            let pack = crate::repo::parse_id(&name).unwrap_or_default();
            self.pack_sizes.insert(pack, size);
            self.sum.bytes_added += size;
            self.sum.packs_written += 1;
            for (i, e) in entries.into_iter().enumerate() {
                self.pending.push(Location {
                    pack,
                    ordinal: i as u32,
                    blob: e,
                });
            }
        }
        Ok(())
    }

    fn flush_index(&mut self) -> Result<()> {
        // Every pack sent is durable before an index names any of it.
        let done = self.uploads.collect(true);
        self.written(done)?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let entries = std::mem::take(&mut self.pending);
        let f = index::write_file(self.repo, entries, &self.pack_sizes)?;
        self.sum.bytes_added += self.repo.backend.size(Kind::Index, &f.name)?;
        self.repo.index.add(f);
        // Ids still in the packer stay in the session set (every sent
        // pack is written and indexed now).
        self.session.clear();
        for id in self.packer_ids() {
            self.session.insert(id);
        }
        Ok(())
    }

    fn packer_ids(&self) -> Vec<[u8; 32]> {
        self.packer.ids()
    }

    fn finish(mut self) -> Result<BackupSummary> {
        self.flush_pack()?;
        self.flush_index()?;
        self.clock.report();
        Ok(self.sum)
    }

    /// Reads `r` to its end in windows; returns the chunk list and the
    /// bytes read. Three stages overlap: this thread reads the next
    /// window while a second chunks the one before and a third packs the
    /// one before that. A window is read behind a gap that takes the
    /// previous window's unfinished last chunk, which is chunked again
    /// with what follows (FastCDC starts afresh at every boundary, so this
    /// equals one pass). Memory: `STREAM_BUFFERS` windows.
    fn stream(
        &mut self,
        mut input: Input<'_>,
        progress: &mut dyn FnMut(u64),
    ) -> std::io::Result<Result<(Vec<ChunkRef>, u64)>> {
        let repo = self.repo;
        let gap = repo.config.chunker.max_len() as usize;
        let window = gvault_accel::tuning::tuning()
            .cas_window_mib
            .map_or(WINDOW, |m| m << 20)
            .max(4 * gap);
        let (free_tx, free_rx) = sync_channel::<Window>(STREAM_BUFFERS);
        let mut pool = std::mem::take(&mut self.windows);
        pool.retain(|w| w.len() == gap + window);
        while pool.len() < STREAM_BUFFERS {
            pool.push(Window::new(repo, gap + window));
        }
        for w in pool {
            let _ = free_tx.send(w);
        }
        // (window, bytes read into it after the gap, end of input)
        let (full_tx, full_rx) = sync_channel::<(Window, usize, bool)>(1);
        // (window, where its chunks start, the chunks)
        let (cut_tx, cut_rx) = sync_channel::<(Window, usize, Vec<IdChunk>)>(1);
        let clock = self.clock.clone();
        let clock = &*clock;
        let writer = &mut *self;
        let result = std::thread::scope(|s| {
            let chunker = s.spawn(move || -> Result<()> {
                let mut carry: Vec<u8> = Vec::new();
                for (mut buf, filled, eof) in full_rx {
                    let start = gap - carry.len();
                    buf[start..gap].copy_from_slice(&carry);
                    let end = gap + filled;
                    let mut chunks = clock
                        .time(Stage::Chunk, || chunk_segments(repo, &[&buf[start..end]]))?
                        .pop()
                        .unwrap_or_default();
                    if !eof {
                        chunks.pop();
                    }
                    let consumed: usize = chunks.iter().map(|c| c.len as usize).sum();
                    carry.clear();
                    carry.extend_from_slice(&buf[start + consumed..end]);
                    if cut_tx.send((buf, start, chunks)).is_err() || eof {
                        break;
                    }
                }
                Ok(())
            });
            let packer = s.spawn(move || -> Result<Vec<ChunkRef>> {
                let mut out = Vec::new();
                for (buf, start, chunks) in cut_rx {
                    out.extend(clock.time(Stage::Pack, || writer.add(&buf[start..], &chunks))?);
                    let _ = free_tx.send(buf);
                }
                Ok(out)
            });
            let mut total = 0u64;
            let mut read_err = None;
            while let Ok(mut buf) = free_rx.recv() {
                let filled =
                    match clock.time(Stage::Read, || input.fill(&mut buf[gap..gap + window])) {
                        Ok(n) => n,
                        Err(e) => {
                            read_err = Some(e);
                            break;
                        }
                    };
                total += filled as u64;
                let eof = filled < window;
                // Progress once the window is handed on: chunking and
                // packing go on while the caller's progress runs.
                let sent = full_tx.send((buf, filled, eof)).is_ok();
                progress(filled as u64);
                if !sent || eof {
                    break;
                }
            }
            drop(full_tx);
            let chunked = chunker
                .join()
                .unwrap_or_else(|_| Err(Error::Accel("the chunking thread panicked".into())));
            let packed = packer
                .join()
                .unwrap_or_else(|_| Err(Error::Accel("the packing thread panicked".into())));
            if let Some(e) = read_err {
                return Err(e);
            }
            Ok(chunked.and(packed).map(|out| (out, total)))
        });
        // The windows the packer handed back serve the next large file.
        self.windows = free_rx.try_iter().collect();
        result
    }
}

/// Pieces a file's read window is read in, in parallel: a read from the
/// page cache is a memory copy, one core's worth (4-5 GB/s) unless several
/// threads share the window.
const READ_PIECE: usize = 2 << 20;

/// What a large file's stream reads from.
enum Input<'a> {
    /// A file, read at `pos` in parallel pieces.
    File { file: &'a File, pos: u64 },
    /// Anything else (standard input), read in order.
    Stream(&'a mut dyn Read),
}

impl Input<'_> {
    /// Fills `buf` unless the input ends first; returns the bytes read.
    fn fill(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Input::Stream(r) => read_full(|b| r.read(b), buf),
            Input::File { file, pos } => {
                use std::os::unix::fs::FileExt;
                let at = *pos;
                let counts: Vec<std::io::Result<usize>> = buf
                    .par_chunks_mut(READ_PIECE)
                    .enumerate()
                    .map(|(i, piece)| {
                        let mut off = at + (i * READ_PIECE) as u64;
                        read_full(
                            |b| {
                                let n = file.read_at(b, off)?;
                                off += n as u64;
                                Ok(n)
                            },
                            piece,
                        )
                    })
                    .collect();
                // The bytes up to the first short piece (the end of the
                // file; a file that grows meanwhile is caught by the
                // metadata check after the read).
                let mut filled = 0;
                for (i, n) in counts.into_iter().enumerate() {
                    let n = n?;
                    filled = i * READ_PIECE + n;
                    if n < READ_PIECE.min(buf.len() - i * READ_PIECE) {
                        break;
                    }
                }
                *pos += filled as u64;
                Ok(filled)
            }
        }
    }
}

/// Calls `read` until `buf` is full or it returns 0.
fn read_full(
    mut read: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Chunk ids of segments, by the repository's chunker (one accel job).
fn chunk_segments(repo: &Repository, segments: &[&[u8]]) -> Result<Vec<Vec<IdChunk>>> {
    match repo.config.chunker {
        Chunker::Cdc { .. } => {
            let params = repo
                .config
                .chunker
                .params()
                .ok_or_else(|| Error::corrupt("config", "invalid chunker parameters"))?;
            accel_jobs::chunk_digest(repo.accel(), params, &repo.keys.chunk_id, segments)
        }
        Chunker::Fixed { size } => {
            let mut spans: Vec<(usize, u64, u32)> = Vec::new();
            let mut slices: Vec<&[u8]> = Vec::new();
            for (si, s) in segments.iter().enumerate() {
                for (k, block) in s.chunks(size as usize).enumerate() {
                    spans.push((si, k as u64 * size as u64, block.len() as u32));
                    slices.push(block);
                }
            }
            let ids = accel_jobs::keyed_digests(repo.accel(), &repo.keys.chunk_id, &slices)?;
            let mut out = vec![Vec::new(); segments.len()];
            for ((si, offset, len), id) in spans.into_iter().zip(ids) {
                out[si].push(IdChunk { offset, len, id });
            }
            Ok(out)
        }
    }
}

fn ns(secs: i64, nsec: i64) -> i64 {
    secs.saturating_mul(1_000_000_000).saturating_add(nsec)
}

fn entry_from(path: Vec<u8>, kind: EntryKind, m: &std::fs::Metadata) -> Entry {
    let sparse = kind == EntryKind::File && m.blocks().saturating_mul(512) < m.size();
    Entry {
        path,
        kind,
        mode: m.mode(),
        uid: m.uid(),
        gid: m.gid(),
        mtime_ns: ns(m.mtime(), m.mtime_nsec()),
        atime_ns: ns(m.atime(), m.atime_nsec()),
        ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        dev: m.dev(),
        ino: m.ino(),
        size: if kind == EntryKind::File { m.size() } else { 0 },
        flags: if sparse { FLAG_SPARSE } else { 0 },
        target: Vec::new(),
        link: 0,
        chunks: Vec::new(),
    }
}

/// A small file read whole, waiting for its batch's chunk job.
struct Queued {
    entry: usize,
    data: Vec<u8>,
    before: std::fs::Metadata,
    path: PathBuf,
}

struct Walk<'r, 'p> {
    w: Writer<'r>,
    entries: Vec<Entry>,
    parent: HashMap<Vec<u8>, usize>,
    parent_snap: Option<Snapshot>,
    links: HashMap<(u64, u64), usize>,
    queue: Vec<Queued>,
    queued_bytes: usize,
    progress: Progress,
    report: ProgressFn<'p>,
    /// Entries of files that could not be read, removed at the end.
    dropped: HashSet<usize>,
}

impl Walk<'_, '_> {
    fn warn(&mut self, msg: String) {
        self.w.sum.warnings.push(msg);
    }

    fn visit(&mut self, fs_path: &Path, rel: Vec<u8>) -> Result<()> {
        let m = match std::fs::symlink_metadata(fs_path) {
            Ok(m) => m,
            Err(e) => {
                self.warn(format!("{}: {e}; skipped", fs_path.display()));
                return Ok(());
            }
        };
        let ft = m.file_type();
        if ft.is_dir() {
            self.entries
                .push(entry_from(rel.clone(), EntryKind::Dir, &m));
            self.w.sum.dirs += 1;
            let rd = match std::fs::read_dir(fs_path) {
                Ok(rd) => rd,
                Err(e) => {
                    self.warn(format!(
                        "{}: {e}; its contents are skipped",
                        fs_path.display()
                    ));
                    return Ok(());
                }
            };
            let mut names: Vec<std::ffi::OsString> = Vec::new();
            for e in rd {
                match e {
                    Ok(e) => names.push(e.file_name()),
                    Err(e) => self.warn(format!("{}: {e}", fs_path.display())),
                }
            }
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            for n in names {
                let mut r = rel.clone();
                if !r.is_empty() {
                    r.push(b'/');
                }
                r.extend_from_slice(n.as_bytes());
                self.visit(&fs_path.join(&n), r)?;
            }
        } else if ft.is_symlink() {
            let mut e = entry_from(rel, EntryKind::Symlink, &m);
            match std::fs::read_link(fs_path) {
                Ok(t) => {
                    e.target = t.as_os_str().as_bytes().to_vec();
                    self.entries.push(e);
                }
                Err(err) => self.warn(format!("{}: {err}; skipped", fs_path.display())),
            }
        } else if ft.is_file() {
            if m.nlink() > 1 {
                if let Some(&first) = self.links.get(&(m.dev(), m.ino())) {
                    let mut e = entry_from(rel, EntryKind::HardLink, &m);
                    e.link = first as u64;
                    self.entries.push(e);
                    return Ok(());
                }
                self.links.insert((m.dev(), m.ino()), self.entries.len());
            }
            self.file(fs_path, rel, m)?;
        } else {
            let what = if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_socket() {
                "a socket"
            } else {
                "a device node"
            };
            self.warn(format!("{}: {what}; not backed up", fs_path.display()));
        }
        Ok(())
    }

    fn file(&mut self, fs_path: &Path, rel: Vec<u8>, m: std::fs::Metadata) -> Result<()> {
        let mut e = entry_from(rel, EntryKind::File, &m);
        let idx = self.entries.len();
        if let Some(&pi) = self.parent.get(&e.path) {
            if let Some(p) = self.parent_snap.as_ref().map(|s| &s.entries[pi]) {
                if p.kind == EntryKind::File
                    && p.size == e.size
                    && p.mtime_ns == e.mtime_ns
                    && p.ino == e.ino
                {
                    e.chunks = p.chunks.clone();
                    self.w.sum.files_unchanged += 1;
                    self.w.sum.bytes_total += e.size;
                    self.progress.files += 1;
                    self.progress.bytes_unchanged += e.size;
                    (self.report)(self.progress);
                    self.entries.push(e);
                    return Ok(());
                }
                self.w.sum.files_changed += 1;
            }
        } else {
            self.w.sum.files_new += 1;
        }
        self.entries.push(e);
        if m.size() <= SMALL_FILE {
            // Read later, with the rest of its batch, in parallel.
            self.queued_bytes += m.size() as usize;
            self.queue.push(Queued {
                entry: idx,
                data: Vec::new(),
                before: m,
                path: fs_path.to_owned(),
            });
            if self.queued_bytes >= WINDOW || self.queue.len() >= BATCH_FILES {
                self.flush_queue()?;
            }
            return Ok(());
        }
        let f = match File::open(fs_path) {
            Ok(f) => f,
            Err(err) => {
                self.warn(format!("{}: {err}; skipped", fs_path.display()));
                self.dropped.insert(idx);
                return Ok(());
            }
        };
        let mut prog = self.progress;
        let report = &mut self.report;
        let r = self.w.stream(Input::File { file: &f, pos: 0 }, &mut |n| {
            prog.bytes += n;
            report(prog);
        });
        self.progress = prog;
        match r {
            Err(err) => {
                self.warn(format!("{}: {err}; skipped", fs_path.display()));
                self.dropped.insert(idx);
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok((chunks, total))) => {
                self.finish_file(idx, chunks, total, &m, fs_path);
            }
        }
        Ok(())
    }

    fn finish_file(
        &mut self,
        idx: usize,
        chunks: Vec<ChunkRef>,
        total: u64,
        before: &std::fs::Metadata,
        path: &Path,
    ) {
        let after = std::fs::symlink_metadata(path).ok();
        let changed = match &after {
            Some(a) => {
                a.size() != before.size()
                    || a.mtime() != before.mtime()
                    || a.mtime_nsec() != before.mtime_nsec()
                    || total != before.size()
            }
            None => true,
        };
        if changed {
            self.w.sum.warnings.push(format!(
                "{}: changed while it was read; the snapshot holds the {total} bytes read",
                path.display()
            ));
        }
        let e = &mut self.entries[idx];
        e.chunks = chunks;
        e.size = total;
        self.w.sum.bytes_read += total;
        self.w.sum.bytes_total += total;
        self.progress.files += 1;
        (self.report)(self.progress);
    }

    fn flush_queue(&mut self) -> Result<()> {
        if self.queue.is_empty() {
            return Ok(());
        }
        let mut queue = std::mem::take(&mut self.queue);
        self.queued_bytes = 0;
        // A file that grew since it was listed is read up to twice the
        // small-file size; the change is reported like any other.
        let read: Vec<std::io::Result<Vec<u8>>> = queue
            .par_iter()
            .map(|q| {
                let mut data = Vec::with_capacity(q.before.size() as usize);
                File::open(&q.path)?
                    .take(2 * SMALL_FILE)
                    .read_to_end(&mut data)?;
                Ok(data)
            })
            .collect();
        let mut kept = Vec::with_capacity(queue.len());
        for (mut q, r) in queue.drain(..).zip(read) {
            match r {
                Ok(data) => {
                    q.data = data;
                    kept.push(q);
                }
                Err(err) => {
                    self.warn(format!("{}: {err}; skipped", q.path.display()));
                    self.dropped.insert(q.entry);
                }
            }
        }
        let queue = kept;
        let segs: Vec<&[u8]> = queue.iter().map(|q| q.data.as_slice()).collect();
        let chunked = chunk_segments(self.w.repo, &segs)?;
        for (q, chunks) in queue.iter().zip(chunked) {
            let refs = self.w.add(&q.data, &chunks)?;
            self.progress.bytes += q.data.len() as u64;
            self.finish_file(q.entry, refs, q.data.len() as u64, &q.before, &q.path);
        }
        Ok(())
    }
}

/// Packs that no index file names (left by a backup that was killed): their
/// headers are read and indexed, so that their chunks are reused.
fn adopt_orphans(repo: &Repository, w: &mut Writer<'_>) -> Result<()> {
    let indexed: HashSet<[u8; 32]> = repo
        .index
        .files()
        .iter()
        .flat_map(|f| f.packs.iter().map(|p| p.0))
        .collect();
    for name in repo.backend.list(Kind::Pack)? {
        let Some(id) = crate::repo::parse_id(&name) else {
            continue;
        };
        if indexed.contains(&id) {
            continue;
        }
        let Ok(entries) = pack::read_header(repo, &name, None) else {
            continue; // damaged: `check` reports it, `prune` removes it
        };
        w.pack_sizes
            .insert(id, repo.backend.size(Kind::Pack, &name)?);
        for (i, e) in entries.into_iter().enumerate() {
            w.pending.push(Location {
                pack: id,
                ordinal: i as u32,
                blob: e,
            });
        }
        w.sum.packs_adopted += 1;
    }
    w.flush_index()
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// The stored form of a path argument: absolute, without the leading '/'.
fn stored_path(p: &Path) -> Result<(PathBuf, Vec<u8>)> {
    let abs = std::path::absolute(p)
        .map_err(|e| Error::InvalidArgument(format!("{}: {e}", p.display())))?;
    let mut rel = Vec::new();
    for c in abs.components() {
        match c {
            std::path::Component::Normal(s) => {
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                rel.extend_from_slice(s.as_bytes());
            }
            std::path::Component::ParentDir => {
                while let Some(b) = rel.pop() {
                    if b == b'/' {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    Ok((abs, rel))
}

/// The newest snapshot of this host with the same paths: the parent whose
/// unchanged files are not read again.
fn find_parent(
    repo: &Repository,
    host: &[u8],
    paths: &[Vec<u8>],
) -> Result<Option<(String, Snapshot)>> {
    let mut all = snapshot::headers(repo)?;
    while let Some((n, s)) = all.pop() {
        if s.hostname == host && s.paths == paths {
            let full = Snapshot::read(repo, &n)?;
            return Ok(Some((n, full)));
        }
    }
    Ok(None)
}

/// Backs up `paths` into a new snapshot.
pub fn backup(
    repo: &Repository,
    paths: &[PathBuf],
    report: ProgressFn<'_>,
) -> Result<BackupSummary> {
    if paths.is_empty() {
        return Err(Error::InvalidArgument(
            "nothing to back up: give at least one path".into(),
        ));
    }
    let _lock = Lock::shared(repo.backend.clone())?;
    let mut roots = Vec::new();
    for p in paths {
        let (abs, rel) = stored_path(p)?;
        if std::fs::symlink_metadata(&abs).is_err() {
            return Err(Error::NotFound(format!("{} does not exist", p.display())));
        }
        roots.push((abs, rel));
    }
    roots.sort_by(|a, b| a.1.cmp(&b.1));
    roots.dedup_by(|a, b| a.1 == b.1);
    let stored: Vec<Vec<u8>> = roots.iter().map(|r| r.1.clone()).collect();
    let host = crate::lock::hostname().into_bytes();
    let parent = find_parent(repo, &host, &stored)?;
    std::thread::scope(|scope| {
        let mut w = Writer::new(repo, scope);
        adopt_orphans(repo, &mut w)?;
        let (parent_name, parent_snap) = match parent {
            Some((n, s)) => (Some(n), Some(s)),
            None => (None, None),
        };
        let parent_map = parent_snap
            .as_ref()
            .map(|s| {
                s.entries
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.path.clone(), i))
                    .collect()
            })
            .unwrap_or_default();
        let mut walk = Walk {
            w,
            entries: Vec::new(),
            parent: parent_map,
            parent_snap,
            links: HashMap::new(),
            queue: Vec::new(),
            queued_bytes: 0,
            progress: Progress::default(),
            report,
            dropped: HashSet::new(),
        };
        for (abs, rel) in &roots {
            walk.visit(abs, rel.clone())?;
        }
        walk.flush_queue()?;
        let Walk {
            w,
            mut entries,
            dropped,
            ..
        } = walk;
        drop_entries(&mut entries, &dropped);
        let mut sum = w.finish()?;
        _lock.check_held()?;
        let snap = Snapshot {
            time_ns: now_ns(),
            hostname: host,
            paths: stored,
            parent: parent_name.as_deref().and_then(crate::repo::parse_id),
            entries,
        };
        sum.snapshot = snap.write(repo)?;
        sum.parent = parent_name;
        Ok(sum)
    })
}

/// Removes entries of files that could not be read; hard links to them
/// are removed too, and the link indexes of the rest renumbered.
fn drop_entries(entries: &mut Vec<Entry>, dropped: &HashSet<usize>) {
    if dropped.is_empty() {
        return;
    }
    let mut new_index = vec![usize::MAX; entries.len()];
    let mut kept = Vec::with_capacity(entries.len());
    for (i, e) in std::mem::take(entries).into_iter().enumerate() {
        if dropped.contains(&i) {
            continue;
        }
        if e.kind == EntryKind::HardLink && new_index[e.link as usize] == usize::MAX {
            continue;
        }
        new_index[i] = kept.len();
        kept.push(e);
    }
    for e in kept.iter_mut() {
        if e.kind == EntryKind::HardLink {
            e.link = new_index[e.link as usize] as u64;
        }
    }
    *entries = kept;
}

/// Copies the snapshot `snap` of `src` into `dst` (any two repositories,
/// e.g. a directory and a bucket): every chunk is read and checked in
/// `src`, named by `dst`'s chunk-id key, and written to `dst` only if
/// `dst` lacks it, so only missing chunks travel to `dst`. Chunk
/// boundaries are kept (the data is not chunked again). The copy keeps the
/// snapshot's time, host, paths and entries; it has no parent.
pub fn copy_snapshot(src: &Repository, dst: &Repository, snap: &Snapshot) -> Result<BackupSummary> {
    /// Chunks are named in batches of about this many bytes.
    const BATCH: usize = 32 << 20;
    let _src_lock = Lock::shared(src.backend.clone())?;
    let lock = Lock::shared(dst.backend.clone())?;
    std::thread::scope(|scope| {
        let mut w = Writer::new(dst, scope);
        adopt_orphans(dst, &mut w)?;
        let mut entries = Vec::with_capacity(snap.entries.len());
        for e in &snap.entries {
            let mut copy = e.clone();
            match e.kind {
                EntryKind::File => w.sum.files_new += 1,
                EntryKind::Dir => w.sum.dirs += 1,
                _ => {}
            }
            w.sum.bytes_total += e.size;
            if !e.chunks.is_empty() {
                let mut refs = Vec::with_capacity(e.chunks.len());
                let mut batch: Vec<u8> = Vec::new();
                let mut spans: Vec<(u64, u32)> = Vec::new();
                let mut flush = |w: &mut Writer<'_>,
                                 batch: &mut Vec<u8>,
                                 spans: &mut Vec<(u64, u32)>|
                 -> Result<()> {
                    let segs: Vec<&[u8]> = spans
                        .iter()
                        .map(|&(o, l)| &batch[o as usize..o as usize + l as usize])
                        .collect();
                    let ids = accel_jobs::keyed_digests(dst.accel(), &dst.keys.chunk_id, &segs)?;
                    let chunks: Vec<IdChunk> = spans
                        .iter()
                        .zip(ids)
                        .map(|(&(offset, len), id)| IdChunk { offset, len, id })
                        .collect();
                    refs.extend(w.add(batch, &chunks)?);
                    w.sum.bytes_read += batch.len() as u64;
                    batch.clear();
                    spans.clear();
                    Ok(())
                };
                crate::restore::read_chunks(src, &e.chunks, &mut |c, data| {
                    spans.push((batch.len() as u64, c.len));
                    batch.extend_from_slice(data);
                    if batch.len() >= BATCH {
                        flush(&mut w, &mut batch, &mut spans)?;
                    }
                    Ok(())
                })?;
                if !spans.is_empty() {
                    flush(&mut w, &mut batch, &mut spans)?;
                }
                copy.chunks = refs;
            }
            entries.push(copy);
        }
        let mut sum = w.finish()?;
        lock.check_held()?;
        let s = Snapshot {
            time_ns: snap.time_ns,
            hostname: snap.hostname.clone(),
            paths: snap.paths.clone(),
            parent: None,
            entries,
        };
        sum.snapshot = s.write(dst)?;
        Ok(sum)
    })
}

/// Backs up standard input (or any reader) as one file named `name`.
pub fn backup_reader(
    repo: &Repository,
    name: &str,
    r: &mut dyn Read,
    report: ProgressFn<'_>,
) -> Result<BackupSummary> {
    let rel = name.trim_start_matches('/').as_bytes().to_vec();
    if rel.is_empty()
        || rel
            .split(|&b| b == b'/')
            .any(|c| c.is_empty() || c == b"." || c == b"..")
    {
        return Err(Error::InvalidArgument(format!(
            "{name:?} is not a usable file name"
        )));
    }
    let _lock = Lock::shared(repo.backend.clone())?;
    std::thread::scope(|scope| {
        let mut w = Writer::new(repo, scope);
        adopt_orphans(repo, &mut w)?;
        let mut prog = Progress::default();
        let (chunks, total) = w
            .stream(Input::Stream(r), &mut |n| {
                prog.bytes += n;
                report(prog);
            })
            .map_err(|e| Error::Io {
                context: "reading standard input".into(),
                source: e,
            })??;
        let now = now_ns();
        w.sum.files_new = 1;
        w.sum.bytes_read = total;
        w.sum.bytes_total = total;
        let entry = Entry {
            path: rel.clone(),
            kind: EntryKind::File,
            mode: 0o100644,
            uid: unsafe_uid(),
            gid: 0,
            mtime_ns: now,
            atime_ns: now,
            ctime_ns: now,
            dev: 0,
            ino: 0,
            size: total,
            flags: 0,
            target: Vec::new(),
            link: 0,
            chunks,
        };
        let mut sum = w.finish()?;
        _lock.check_held()?;
        let snap = Snapshot {
            time_ns: now,
            hostname: crate::lock::hostname().into_bytes(),
            paths: vec![rel],
            parent: None,
            entries: vec![entry],
        };
        sum.snapshot = snap.write(repo)?;
        Ok(sum)
    })
}

fn unsafe_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_file_read_in_parallel_pieces_equals_the_file_in_order() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let len = 5 * READ_PIECE + 12345;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
        std::fs::File::create(&p).unwrap().write_all(&data).unwrap();
        let f = File::open(&p).unwrap();
        for window in [READ_PIECE - 1, 2 * READ_PIECE, 3 * READ_PIECE + 17, len + 1] {
            let mut input = Input::File { file: &f, pos: 0 };
            let mut got = Vec::new();
            let mut buf = vec![0u8; window];
            loop {
                let n = input.fill(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
                if n < window {
                    break;
                }
            }
            assert!(got == data, "window {window}");
            assert_eq!(input.fill(&mut buf).unwrap(), 0);
        }
        let mut stream = &data[..];
        let mut input = Input::Stream(&mut stream);
        let mut buf = vec![0u8; len + 5];
        assert_eq!(input.fill(&mut buf).unwrap(), len);
        assert!(buf[..len] == data[..]);
    }
}
