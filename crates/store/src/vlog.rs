//! Reading values back from the value log through their pointers.

use std::collections::HashMap;
use std::ops::Range;

use rayon::prelude::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::cache::{BlockCache, CachedValue, Fill};
use crate::codec::{BlockCodec, BlockContext, BlockKind, OpenError, OpenSlot};
use crate::env::FileSystem;
use crate::error::{Error, Result};
use crate::format::{vlog_path, FileKind, ValuePointer};
use crate::lock_order::{Rank, RankedMutex};
use crate::log_reader::{open_log_file, LogFile};
use crate::log_writer::FRAME_HEADER_LEN;
use crate::pinned::Pinned;
use crate::write_batch::decode_value_frame;

pub struct ValueLog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    codec: Arc<dyn BlockCodec>,
    /// Open files, published for readers, who use a handle in place (no
    /// lock word or reference count written per read); opening and
    /// forgetting replace the map under `open_writer`.
    open: ArcSwap<HashMap<u64, LogFile>>,
    open_writer: RankedMutex<()>,
    /// Files forgotten so far: a file opened while one was forgotten is
    /// used but not cached (see `TableCache`'s `evictions`).
    forgotten: AtomicU64,
    /// Values read, opened and checked, shared with the table blocks'
    /// budget (none: every read goes to the file).
    cache: Option<Arc<BlockCache>>,
}

impl ValueLog {
    pub fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        codec: Arc<dyn BlockCodec>,
        cache: Option<Arc<BlockCache>>,
    ) -> Self {
        ValueLog {
            fs,
            dir,
            codec,
            open: ArcSwap::default(),
            open_writer: RankedMutex::new(Rank::ValueLogFiles, ()),
            forgotten: AtomicU64::new(0),
            cache,
        }
    }

    fn file(&self, n: u64) -> Result<LogFile> {
        self.with_file(n, |f| Ok(f.clone()))
    }

    /// Runs `op` on value-log file `n`, opening it if it is not open.
    fn with_file<R>(&self, n: u64, op: impl FnOnce(&LogFile) -> Result<R>) -> Result<R> {
        if let Some(f) = self.open.load().get(&n) {
            return op(f);
        }
        let forgotten = self.forgotten.load(Ordering::SeqCst);
        let path = vlog_path(&self.dir, n);
        let f =
            open_log_file(&*self.fs, &path, FileKind::ValueLog, n, &*self.codec).map_err(|e| {
                match e {
                    Error::Io { ref source, .. }
                        if source.kind() == std::io::ErrorKind::NotFound =>
                    {
                        Error::corruption(
                            &path,
                            "whole file",
                            "value-log file holding a live value is missing",
                        )
                    }
                    e => e,
                }
            })?;
        let _w = self.open_writer.lock();
        if self.forgotten.load(Ordering::SeqCst) == forgotten {
            let mut open = HashMap::clone(&self.open.load());
            open.insert(n, f.clone());
            self.open.store(Arc::new(open));
        }
        op(&f)
    }

    /// Reads the value `ptr` names and checks that it belongs to `key`.
    ///
    /// One buffer per read, one copy of the value: the frame is read into
    /// the buffer that is returned, opened where it lies, and the value is
    /// moved to the front once. Error texts are only built on error:
    /// formatting them costs ~0.2 µs per read.
    ///
    /// For bulk readers (GC's copy, salvage): a value that missed the cache
    /// is kept only while the cache has room.
    pub fn read(&self, ptr: &ValuePointer, key: &[u8]) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.read_into(ptr, key, &mut buf, Fill::WhileRoom)?;
        Ok(buf)
    }

    /// [`Self::read`] into `buf` (its old contents replaced), which a caller
    /// reading many values reuses: no allocation once it is large enough;
    /// a value that missed the cache is kept there as `fill` says.
    pub(crate) fn read_into(
        &self,
        ptr: &ValuePointer,
        key: &[u8],
        buf: &mut Vec<u8>,
        fill: Fill,
    ) -> Result<()> {
        buf.clear();
        if let Some(hit) = self.cached(ptr, key)? {
            buf.extend_from_slice(&hit.value);
            return Ok(());
        }
        let (value, _) = self.read_frame(ptr, key, buf, fill)?;
        // Move the value to the front of the buffer and drop the rest.
        let len = value.len();
        buf.copy_within(value, 0);
        buf.truncate(len);
        Ok(())
    }

    /// [`Self::read`] for a get, the value shared with the cache where it is
    /// kept there: no copy on a hit, and on a miss the entry just cached
    /// (a get always caches what it read).
    pub fn read_pinned(&self, ptr: &ValuePointer, key: &[u8]) -> Result<Pinned> {
        if let Some(hit) = self.cached(ptr, key)? {
            return Ok(Pinned::Cached(hit));
        }
        let mut buf = Vec::new();
        let (value, kept) = self.read_frame(ptr, key, &mut buf, Fill::Always)?;
        if let Some(kept) = kept {
            return Ok(Pinned::Cached(kept));
        }
        let len = value.len();
        buf.copy_within(value, 0);
        buf.truncate(len);
        Ok(Pinned::Owned(buf))
    }

    /// Reads the frame `ptr` names into `buf` (empty), opens and checks it
    /// there and caches its value as `fill` says; where in `buf` the value
    /// lies, and the cache entry made for it (none where the cache does not
    /// take it).
    fn read_frame(
        &self,
        ptr: &ValuePointer,
        key: &[u8],
        buf: &mut Vec<u8>,
        fill: Fill,
    ) -> Result<(Range<usize>, Option<Arc<CachedValue>>)> {
        buf.resize(FRAME_HEADER_LEN + ptr.frame.len as usize, 0);
        let ctx = self.fetch_into(ptr, buf)?;
        let opened = self.codec.open_in_place(&ctx, &mut buf[FRAME_HEADER_LEN..]);
        let value = self.value_range(ptr, key, buf, opened)?;
        let kept = self.keep(ptr, key, &buf[value.clone()], fill);
        Ok((value, kept))
    }

    /// Reads many values at once (the read-ahead worker of an iterator)
    /// into `buf`, which the caller reuses from batch to batch: the frames
    /// are read in parallel, then opened in one batch, which an encrypting
    /// codec spreads over cores. Result i is where `wanted[i]`'s value lies
    /// in `buf`, or why it could not be read: a damaged frame fails only
    /// its own entry. A scan's read: values are cached only while the cache
    /// has room ([`Fill::WhileRoom`]).
    ///
    /// One reused buffer, filled by the pool and read by the iterating
    /// thread: buffers allocated on one thread and freed on another
    /// contended on the allocator's arena locks (4 KiB values: ~1 µs an
    /// entry on the development host), and fresh megabyte buffers cost
    /// page faults.
    /// `opened_at`, when given, receives the moment the reads were done
    /// and the opening began (the read-ahead worker's statistics).
    pub fn read_many(
        &self,
        wanted: &[(ValuePointer, &[u8])],
        buf: &mut Vec<u8>,
        opened_at: Option<&mut std::time::Instant>,
    ) -> Vec<Result<Range<usize>>> {
        // Cached values take their value's room in `buf`, the others their
        // frame's.
        let hits: Vec<Result<Option<Arc<CachedValue>>>> =
            wanted.iter().map(|(p, k)| self.cached(p, k)).collect();
        let sizes: Vec<usize> = wanted
            .iter()
            .zip(&hits)
            .map(|((p, _), hit)| match hit {
                Ok(Some(v)) => v.value.len(),
                Ok(None) => FRAME_HEADER_LEN + p.frame.len as usize,
                Err(_) => 0,
            })
            .collect();
        let total: usize = sizes.iter().sum();
        if buf.len() < total {
            buf.resize(total, 0);
        }
        let mut frames: Vec<&mut [u8]> = Vec::with_capacity(wanted.len());
        let mut rest = &mut buf[..total];
        for &n in &sizes {
            let (frame, tail) = rest.split_at_mut(n);
            frames.push(frame);
            rest = tail;
        }
        // Each file of the batch is looked up once, here: every parallel
        // read taking the open-file map's lock (and the file's reference
        // count) contended across the pool's threads.
        let mut files: Vec<(u64, Result<LogFile>)> = Vec::new();
        for ((ptr, _), hit) in wanted.iter().zip(&hits) {
            if matches!(hit, Ok(None)) && !files.iter().any(|(n, _)| *n == ptr.file) {
                files.push((ptr.file, self.file(ptr.file)));
            }
        }
        // A cached value is copied in, the others are read; `None`: nothing
        // to open.
        let fetched: Vec<Option<Result<BlockContext>>> = frames
            .par_iter_mut()
            .zip(wanted.par_iter().zip(hits.par_iter()))
            .map(|(frame, ((ptr, _), hit))| match hit {
                Ok(Some(v)) => {
                    frame.copy_from_slice(&v.value);
                    None
                }
                Err(_) => None,
                Ok(None) => Some(
                    match files
                        .iter()
                        .find(|(n, _)| *n == ptr.file)
                        .map(|(_, f)| f.as_ref().map_err(Error::clone))
                    {
                        Some(Ok(file)) => self.fetch_from(file, ptr, frame),
                        Some(Err(e)) => Err(e),
                        None => self.fetch_into(ptr, frame),
                    },
                ),
            })
            .collect();
        if let Some(t) = opened_at {
            *t = std::time::Instant::now();
        }
        let mut slots: Vec<OpenSlot<'_>> = Vec::with_capacity(wanted.len());
        for (frame, ctx) in frames.into_iter().zip(&fetched) {
            if let Some(Ok(ctx)) = ctx {
                slots.push(OpenSlot {
                    ctx: *ctx,
                    sealed: &mut frame[FRAME_HEADER_LEN..],
                });
            }
        }
        let mut opened = self.codec.open_many_in_place(&mut slots).into_iter();
        drop(slots);
        let mut start = 0;
        let mut results = Vec::with_capacity(wanted.len());
        for ((((ptr, key), size), fetched), hit) in wanted.iter().zip(&sizes).zip(fetched).zip(hits)
        {
            let at = start;
            start += size;
            let Some(fetched) = fetched else {
                results.push(hit.map(|_| at..at + size));
                continue;
            };
            results.push(fetched.and_then(|_| {
                let r = opened.next().unwrap_or_else(|| {
                    Err(OpenError("open batch returned too few results".into()))
                });
                let v = self.value_range(ptr, key, &buf[at..at + size], r)?;
                self.keep(ptr, key, &buf[at + v.start..at + v.end], Fill::WhileRoom);
                Ok(at + v.start..at + v.end)
            }));
        }
        results
    }

    /// The cached value of the frame `ptr` names, checked against `key`.
    pub(crate) fn cached(
        &self,
        ptr: &ValuePointer,
        key: &[u8],
    ) -> Result<Option<Arc<CachedValue>>> {
        let Some(cache) = &self.cache else {
            return Ok(None);
        };
        match cache.get_value(ptr.file, ptr.frame.offset) {
            Some(v) if *v.key != *key => {
                Err(self.corrupt(ptr, "value frame belongs to another key"))
            }
            hit => Ok(hit),
        }
    }

    /// Caches a value just read and checked, as `fill` says; the entry, if
    /// the cache took it.
    fn keep(
        &self,
        ptr: &ValuePointer,
        key: &[u8],
        value: &[u8],
        fill: Fill,
    ) -> Option<Arc<CachedValue>> {
        let cache = self.cache.as_ref()?;
        cache.insert_value(ptr.file, ptr.frame.offset, key, value, fill)
    }

    fn corrupt(&self, ptr: &ValuePointer, why: &str) -> Error {
        Error::corruption(
            vlog_path(&self.dir, ptr.file),
            format!("block {} at offset {}", ptr.frame.block, ptr.frame.offset),
            why,
        )
    }

    /// Reads the frame `ptr` names (header and sealed block) into `buf`,
    /// which is exactly its size, and checks its header against the
    /// pointer; returns the block's context.
    fn fetch_into(&self, ptr: &ValuePointer, buf: &mut [u8]) -> Result<BlockContext> {
        self.with_file(ptr.file, |f| self.fetch_from(f, ptr, buf))
    }

    /// As [`Self::fetch_into`], from `file`, the one `ptr` names.
    fn fetch_from(
        &self,
        file: &LogFile,
        ptr: &ValuePointer,
        buf: &mut [u8],
    ) -> Result<BlockContext> {
        file.file
            .read_exact_at(buf, ptr.frame.offset)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    self.corrupt(ptr, "value frame runs past the end of the file")
                } else {
                    Error::io(
                        format!(
                            "reading {} (block {} at offset {})",
                            vlog_path(&self.dir, ptr.file).display(),
                            ptr.frame.block,
                            ptr.frame.offset
                        ),
                        e,
                    )
                }
            })?;
        let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        let block = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        if len != ptr.frame.len || block != ptr.frame.block || buf[8] != BlockKind::LogValue as u8 {
            return Err(self.corrupt(ptr, "frame header does not match the value pointer"));
        }
        let ctx = BlockContext {
            key_id: file.key_id,
            file_number: ptr.file,
            block_number: block,
            offset: ptr.frame.offset,
            kind: BlockKind::LogValue,
        };
        Ok(ctx)
    }

    /// Checks an opened frame against `key`; returns where in the frame
    /// its value lies (the payload's tail).
    fn value_range(
        &self,
        ptr: &ValuePointer,
        key: &[u8],
        frame: &[u8],
        opened: std::result::Result<usize, OpenError>,
    ) -> Result<Range<usize>> {
        let payload_len = opened.map_err(|e| self.corrupt(ptr, &e.0))?;
        let payload = &frame[FRAME_HEADER_LEN..FRAME_HEADER_LEN + payload_len];
        let Some((k, v)) = decode_value_frame(payload) else {
            return Err(self.corrupt(ptr, "malformed value frame"));
        };
        if k != key {
            return Err(self.corrupt(ptr, "value frame belongs to another key"));
        }
        let end = FRAME_HEADER_LEN + payload_len;
        Ok(end - v.len()..end)
    }

    pub fn forget(&self, n: u64) {
        let _w = self.open_writer.lock();
        let mut open = HashMap::clone(&self.open.load());
        if open.remove(&n).is_some() {
            self.open.store(Arc::new(open));
        }
        self.forgotten.fetch_add(1, Ordering::SeqCst);
    }
}
