//! Appends frames to a log-structured file (value log or manifest).
//!
//! A frame is a 9-byte header (sealed length u32, block number u32, block
//! kind u8) followed by the sealed block. Frames of one group are sealed as
//! one batch and written with one `append`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{BlockCodec, BlockContext, BlockKind, KeyPin, SealSlot};
use crate::env::{FileSystem, WritableFile};
use crate::error::{Error, IoContext, Result};
use crate::format::{BlockHandle, FileHeader, FileKind, LogPosition, HEADER_LEN};

pub const FRAME_HEADER_LEN: usize = 9;

pub struct LogWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    file_number: u64,
    offset: u64,
    next_block: u32,
    /// The data key named in the header; every block of the file uses it.
    /// Pinned while the file is written (a value-log head is in the
    /// version, a manifest is the current one, but only once created).
    key: KeyPin,
    codec: Arc<dyn BlockCodec>,
    /// The last group's buffer, kept for the next one: a fresh
    /// value-sized buffer per group costs page faults on every commit.
    spare: Vec<u8>,
    /// Where the write-back started so far ends ([`Self::append`]).
    written_back: u64,
}

/// Once this many appended bytes are not yet handed to write-back, the
/// writer starts it ([`WritableFile::start_writeback`]). Without it a
/// value-log file's 128 MiB stay dirty in the page cache until the sync
/// that seals the file, and the writer that rotates it waits for all of
/// it: ~80 ms, a fifth of a 256 MiB fill of 4 KiB values on the
/// development host. 1 MiB as RocksDB's `bytes_per_sync` habitually is.
const WRITEBACK_BYTES: u64 = 1 << 20;

/// Write-back is started up to a multiple of this (the page size, or a
/// multiple of it): the partial page at the end is written again by the
/// next append, and a page under write-back may make that append wait.
const WRITEBACK_ALIGN: u64 = 4096;

/// A group buffer larger than this is freed after its write, not kept.
const MAX_SPARE_BYTES: usize = 8 << 20;

/// Frames being laid out for one append (see [`LogWriter::start_group`]).
pub struct FrameGroup {
    buf: Vec<u8>,
    frames: Vec<PlacedFrame>,
    /// Where the group starts in the file.
    start: LogPosition,
    overhead: usize,
    key_id: u32,
}

/// A frame's sealed block inside the group buffer.
struct PlacedFrame {
    ctx: BlockContext,
    /// Where the block (after its frame header) starts in the buffer.
    start: usize,
    /// Payload plus seal.
    len: usize,
}

impl FrameGroup {
    /// Appends a frame whose payload `fill` writes at the end of the
    /// buffer; returns where the frame will be in the file.
    pub fn push(&mut self, kind: BlockKind, fill: impl FnOnce(&mut Vec<u8>)) -> BlockHandle {
        let header_at = self.buf.len();
        self.buf.extend_from_slice(&[0; FRAME_HEADER_LEN]);
        let start = self.buf.len();
        fill(&mut self.buf);
        let len = self.buf.len() - start + self.overhead;
        self.buf.resize(start + len, 0);
        let handle = BlockHandle {
            offset: self.start.offset + header_at as u64,
            len: len as u32,
            block: self.start.block + self.frames.len() as u32,
        };
        let header = &mut self.buf[header_at..start];
        header[0..4].copy_from_slice(&handle.len.to_le_bytes());
        header[4..8].copy_from_slice(&handle.block.to_le_bytes());
        header[8] = kind as u8;
        self.frames.push(PlacedFrame {
            ctx: BlockContext {
                key_id: self.key_id,
                file_number: self.start.file,
                block_number: handle.block,
                offset: handle.offset,
                kind,
            },
            start,
            len,
        });
        handle
    }
}

impl LogWriter {
    /// Creates the file, writes its header and makes both durable.
    pub fn create(
        fs: &dyn FileSystem,
        path: &Path,
        kind: FileKind,
        file_number: u64,
        codec: Arc<dyn BlockCodec>,
    ) -> Result<LogWriter> {
        let mut file = fs
            .create(path)
            .ctx(|| format!("creating {}", path.display()))?;
        let key = codec.pin_key();
        let key_id = key.id();
        let header = FileHeader {
            kind,
            key_id,
            file_number,
        };
        file.append(&header.encode())
            .and_then(|_| file.sync())
            .ctx(|| format!("writing header of {}", path.display()))?;
        Ok(LogWriter {
            file,
            path: path.to_owned(),
            file_number,
            offset: HEADER_LEN as u64,
            next_block: 0,
            key,
            codec,
            spare: Vec::new(),
            written_back: 0,
        })
    }

    /// Numbers the next frame `block` instead of 0; the pointer file uses a
    /// block number no manifest frame reaches, so that it and its manifest
    /// (same file number) never share a nonce.
    pub fn start_at_block(&mut self, block: u32) {
        self.next_block = block;
    }

    pub fn position(&self) -> LogPosition {
        LogPosition {
            file: self.file_number,
            offset: self.offset,
            block: self.next_block,
        }
    }

    pub fn file_number(&self) -> u64 {
        self.file_number
    }

    /// Starts a group of frames to append next. Payloads are written
    /// straight into the group's buffer, sealed there in place and written
    /// from it: a value is copied once on its way to the file.
    pub fn start_group(&mut self, capacity: usize) -> FrameGroup {
        let mut buf = std::mem::take(&mut self.spare);
        buf.clear();
        buf.reserve(capacity);
        FrameGroup {
            buf,
            frames: Vec::new(),
            start: self.position(),
            overhead: self.codec.overhead(),
            key_id: self.key.id(),
        }
    }

    /// Seals the group's frames as one batch and appends them with one
    /// write. The group must be the last one started on this writer.
    pub fn append(&mut self, group: FrameGroup) -> Result<()> {
        let FrameGroup {
            mut buf,
            frames,
            start,
            ..
        } = group;
        if start != self.position() {
            return Err(Error::Seal(format!(
                "{}: a frame group was planned at offset {} but the file is at {}",
                self.path.display(),
                start.offset,
                self.position().offset
            )));
        }
        let mut slots = Vec::with_capacity(frames.len());
        let mut rest: &mut [u8] = &mut buf;
        let mut at = 0;
        for f in &frames {
            let (_, tail) = std::mem::take(&mut rest).split_at_mut(f.start - at);
            let (block, tail) = tail.split_at_mut(f.len);
            slots.push(SealSlot { ctx: f.ctx, block });
            rest = tail;
            at = f.start + f.len;
        }
        self.codec
            .seal_slots(&mut slots)
            .map_err(|e| Error::Seal(format!("{}: {e}", self.path.display())))?;
        drop(slots);
        self.file
            .append(&buf)
            .ctx(|| format!("appending to {}", self.path.display()))?;
        self.offset += buf.len() as u64;
        self.next_block += frames.len() as u32;
        if buf.capacity() <= MAX_SPARE_BYTES {
            self.spare = buf;
        }
        self.start_writeback();
        Ok(())
    }

    /// Hands whole pages appended since the last call to write-back once
    /// there are [`WRITEBACK_BYTES`] of them (a hint: durability still
    /// comes only from [`Self::sync`]).
    fn start_writeback(&mut self) {
        let end = self.offset / WRITEBACK_ALIGN * WRITEBACK_ALIGN;
        if end >= self.written_back + WRITEBACK_BYTES {
            self.file
                .start_writeback(self.written_back, end - self.written_back);
            self.written_back = end;
        }
    }

    /// Seals the blocks as one batch and appends them with one write.
    pub fn append_group(&mut self, blocks: Vec<(BlockKind, Vec<u8>)>) -> Result<Vec<BlockHandle>> {
        let bytes = blocks
            .iter()
            .map(|(_, p)| FRAME_HEADER_LEN + p.len() + self.codec.overhead())
            .sum();
        let mut group = self.start_group(bytes);
        let handles = blocks
            .iter()
            .map(|(kind, payload)| group.push(*kind, |b| b.extend_from_slice(payload)))
            .collect();
        self.append(group)?;
        Ok(handles)
    }

    pub fn sync(&mut self) -> Result<()> {
        self.file
            .sync()
            .ctx(|| format!("syncing {}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Crc32cCodec;
    use crate::env::OsFs;
    use crate::log_reader::{open_log_file, LogReader};

    /// Passes writes to a `MemFs` and records the write-back hints.
    #[derive(Debug, Default)]
    struct HintFs {
        inner: crate::mem_fs::MemFs,
        hints: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
    }

    struct HintFile {
        inner: Box<dyn crate::env::WritableFile>,
        hints: Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
        len: u64,
    }

    impl crate::env::WritableFile for HintFile {
        fn append(&mut self, data: &[u8]) -> std::io::Result<()> {
            self.len += data.len() as u64;
            self.inner.append(data)
        }
        fn sync(&mut self) -> std::io::Result<()> {
            self.inner.sync()
        }
        fn start_writeback(&mut self, offset: u64, len: u64) {
            assert!(offset + len <= self.len, "hint past the appended bytes");
            self.hints.lock().unwrap().push((offset, len));
        }
    }

    impl FileSystem for HintFs {
        fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
            self.inner.create_dir_all(dir)
        }
        fn create(&self, path: &Path) -> std::io::Result<Box<dyn crate::env::WritableFile>> {
            Ok(Box::new(HintFile {
                inner: self.inner.create(path)?,
                hints: self.hints.clone(),
                len: 0,
            }))
        }
        fn open_read(&self, path: &Path) -> std::io::Result<Arc<dyn crate::env::RandomAccessFile>> {
            self.inner.open_read(path)
        }
        fn read_all(&self, path: &Path) -> std::io::Result<Vec<u8>> {
            self.inner.read_all(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
            self.inner.rename(from, to)
        }
        fn remove(&self, path: &Path) -> std::io::Result<()> {
            self.inner.remove(path)
        }
        fn truncate(&self, path: &Path, len: u64) -> std::io::Result<()> {
            self.inner.truncate(path, len)
        }
        fn list(&self, dir: &Path) -> std::io::Result<Vec<String>> {
            self.inner.list(dir)
        }
        fn exists(&self, path: &Path) -> bool {
            self.inner.exists(path)
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            self.inner.sync_dir(dir)
        }
        fn lock(&self, path: &Path) -> std::io::Result<Box<dyn crate::env::FileLock>> {
            self.inner.lock(path)
        }
    }

    #[test]
    fn write_back_is_started_on_whole_pages_already_appended() {
        let fs = HintFs::default();
        let path = Path::new("/db/000009.vlog");
        let codec: Arc<dyn BlockCodec> = Arc::new(Crc32cCodec);
        let mut w = LogWriter::create(&fs, path, FileKind::ValueLog, 9, codec).unwrap();
        // 4 KiB values with their framing: no append ends on a page.
        for _ in 0..1000 {
            w.append_group(vec![(BlockKind::LogValue, vec![7; 4096])])
                .unwrap();
        }
        let end = w.position().offset;
        let hints = fs.hints.lock().unwrap().clone();
        // Contiguous from the start, page-aligned, each at least the
        // threshold, and the last leaves less than the threshold behind.
        assert!(hints.len() >= 3, "{hints:?}");
        let mut at = 0;
        for &(offset, len) in &hints {
            assert_eq!(offset, at);
            assert!(len >= WRITEBACK_BYTES, "{hints:?}");
            assert_eq!((offset + len) % WRITEBACK_ALIGN, 0, "{hints:?}");
            at = offset + len;
        }
        assert!(at <= end && end - at < WRITEBACK_BYTES + WRITEBACK_ALIGN);
    }

    #[test]
    fn groups_read_back_in_order_and_a_stale_group_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000007.vlog");
        let codec: Arc<dyn BlockCodec> = Arc::new(Crc32cCodec);
        let mut w = LogWriter::create(&OsFs, &path, FileKind::ValueLog, 7, codec.clone()).unwrap();
        let start = w.position();
        let mut g = w.start_group(16);
        let a = g.push(BlockKind::LogValue, |b| b.extend_from_slice(&[1; 100]));
        let b = g.push(BlockKind::LogCommit, |b| b.extend_from_slice(b"commit"));
        w.append(g).unwrap();
        assert_eq!((a.block, b.block), (0, 1));
        assert_eq!(a.offset, start.offset);
        assert_eq!(
            b.offset,
            a.offset + (FRAME_HEADER_LEN as u64) + u64::from(a.len)
        );
        assert_eq!(
            w.position().offset,
            b.offset + (FRAME_HEADER_LEN + 6 + 4) as u64
        );
        // A group laid out before another append would seal at the wrong
        // place: refused, and nothing is written.
        let stale = w.start_group(0);
        w.append_group(vec![(BlockKind::LogCommit, b"next".to_vec())])
            .unwrap();
        let end = w.position();
        assert!(w.append(stale).is_err());
        assert_eq!(w.position(), end);
        w.sync().unwrap();

        let file = open_log_file(&OsFs, &path, FileKind::ValueLog, 7, &*codec).unwrap();
        let mut r = LogReader::new(file, &path, start, end.offset, codec);
        let mut payloads = Vec::new();
        while let Some(f) = r.next().unwrap().unwrap() {
            payloads.push((f.kind, f.payload));
        }
        assert_eq!(
            payloads,
            vec![
                (BlockKind::LogValue, vec![1; 100]),
                (BlockKind::LogCommit, b"commit".to_vec()),
                (BlockKind::LogCommit, b"next".to_vec()),
            ]
        );
    }
}
