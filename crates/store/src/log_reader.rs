//! Reads frames back from a value-log or manifest file, checking each seal.
//!
//! A frame that fails is either a torn tail (a crash during the last append:
//! nothing valid follows it) or real damage (valid frames follow). The
//! reader tells the two apart with [`LogReader::valid_frame_after`] so that
//! recovery cuts the first and reports the second.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{BlockCodec, BlockContext, BlockKind};
use crate::env::{FileSystem, RandomAccessFile};
use crate::error::{Error, IoContext, Result};
use crate::format::{BlockHandle, FileHeader, FileKind, LogPosition, HEADER_LEN};
use crate::log_writer::FRAME_HEADER_LEN;

pub struct Frame {
    pub handle: BlockHandle,
    pub kind: BlockKind,
    pub payload: Vec<u8>,
}

/// A frame that could not be read: where, and why.
#[derive(Debug, Clone)]
pub struct BadFrame {
    pub offset: u64,
    pub block: u32,
    pub reason: String,
    /// The frame runs past the end of the file: the mark of an append cut
    /// short by a crash.
    pub truncated: bool,
}

/// An open log file and the data key its header names.
#[derive(Clone)]
pub struct LogFile {
    pub file: Arc<dyn RandomAccessFile>,
    pub key_id: u32,
}

impl LogFile {
    pub fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
}

pub struct LogReader {
    file: Arc<dyn RandomAccessFile>,
    key_id: u32,
    path: PathBuf,
    file_number: u64,
    offset: u64,
    next_block: u32,
    end: u64,
    codec: Arc<dyn BlockCodec>,
}

/// Opens a log file and checks its header (kind and number).
pub fn open_log_file(
    fs: &dyn FileSystem,
    path: &Path,
    kind: FileKind,
    file_number: u64,
    codec: &dyn BlockCodec,
) -> Result<LogFile> {
    let file = fs
        .open_read(path)
        .ctx(|| format!("opening {}", path.display()))?;
    let key_id = check_header(&*file, path, kind, file_number, codec)?;
    Ok(LogFile { file, key_id })
}

pub fn check_header(
    file: &dyn RandomAccessFile,
    path: &Path,
    kind: FileKind,
    file_number: u64,
    codec: &dyn BlockCodec,
) -> Result<u32> {
    let len = file
        .len()
        .ctx(|| format!("reading size of {}", path.display()))?;
    let mut buf = [0u8; HEADER_LEN];
    if len < HEADER_LEN as u64 {
        return Err(Error::corruption(
            path,
            "file header at offset 0",
            "file is shorter than its header",
        ));
    }
    file.read_exact_at(&mut buf, 0)
        .ctx(|| format!("reading header of {}", path.display()))?;
    let h = FileHeader::decode(&buf)
        .map_err(|e| Error::corruption(path, "file header at offset 0", e.to_string()))?;
    if h.kind != kind || h.file_number != file_number {
        return Err(Error::corruption(
            path,
            "file header at offset 0",
            format!(
                "header says {:?} file {}, expected {:?} file {} (file renamed or swapped?)",
                h.kind, h.file_number, kind, file_number
            ),
        ));
    }
    check_key(path, h.key_id, codec)?;
    Ok(h.key_id)
}

/// A file's header names a data key the codec must hold: none for an
/// unencrypted store, one in the key registry for an encrypted one.
pub fn check_key(path: &Path, key_id: u32, codec: &dyn BlockCodec) -> Result<()> {
    if codec.knows_key(key_id) {
        return Ok(());
    }
    let reason = match (key_id, codec.key_id()) {
        (0, _) => "it is not encrypted, but the store is".to_string(),
        (k, 0) => format!(
            "it is sealed with data key {k}, but the store has no key registry (KEYS missing?)"
        ),
        (k, _) => format!("it is sealed with data key {k}, which the key registry does not hold"),
    };
    Err(Error::corruption(path, "file header at offset 0", reason))
}

impl LogReader {
    pub fn new(
        file: LogFile,
        path: &Path,
        start: LogPosition,
        end: u64,
        codec: Arc<dyn BlockCodec>,
    ) -> LogReader {
        LogReader {
            file: file.file,
            key_id: file.key_id,
            path: path.to_owned(),
            file_number: start.file,
            offset: start.offset,
            next_block: start.block,
            end,
            codec,
        }
    }

    /// Where the next frame would start.
    pub fn position(&self) -> LogPosition {
        LogPosition {
            file: self.file_number,
            offset: self.offset,
            block: self.next_block,
        }
    }

    /// The next frame, `Ok(None)` at the end, or the reason the frame at the
    /// current position is bad. I/O errors are returned as errors.
    pub fn next(&mut self) -> Result<Result<Option<Frame>, BadFrame>> {
        if self.offset >= self.end {
            return Ok(Ok(None));
        }
        let bad = |(reason, truncated): (String, bool)| BadFrame {
            offset: self.offset,
            block: self.next_block,
            reason,
            truncated,
        };
        match self.read_frame_at(self.offset, Some(self.next_block))? {
            Ok(frame) => {
                self.offset += (FRAME_HEADER_LEN + frame.handle.len as usize) as u64;
                self.next_block += 1;
                Ok(Ok(Some(frame)))
            }
            Err(reason) => Ok(Err(bad(reason))),
        }
    }

    /// Reads one frame; `expect_block` checks the block number.
    fn read_frame_at(
        &self,
        offset: u64,
        expect_block: Option<u32>,
    ) -> Result<Result<Frame, (String, bool)>> {
        if self.end - offset < FRAME_HEADER_LEN as u64 {
            return Ok(Err((
                format!(
                    "frame header cut short ({} bytes before end of file)",
                    self.end - offset
                ),
                true,
            )));
        }
        let mut head = [0u8; FRAME_HEADER_LEN];
        self.read(&mut head, offset)?;
        let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes"));
        let block = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        let Some(kind) = BlockKind::from_u8(head[8]) else {
            return Ok(Err((format!("unknown block kind {}", head[8]), false)));
        };
        if let Some(b) = expect_block {
            if block != b {
                return Ok(Err((
                    format!("frame says block {block}, expected {b}"),
                    false,
                )));
            }
        }
        let body = offset + FRAME_HEADER_LEN as u64;
        if u64::from(len) > self.end - body {
            return Ok(Err((
                format!("frame of {len} bytes runs past the end of the file"),
                true,
            )));
        }
        let mut sealed = vec![0u8; len as usize];
        self.read(&mut sealed, body)?;
        let ctx = BlockContext {
            key_id: self.key_id,
            file_number: self.file_number,
            block_number: block,
            offset,
            kind,
        };
        Ok(match self.codec.open(&ctx, sealed) {
            Ok(payload) => Ok(Frame {
                handle: BlockHandle { offset, len, block },
                kind,
                payload,
            }),
            Err(e) => Err((e.0, false)),
        })
    }

    fn read(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.file
            .read_exact_at(buf, offset)
            .ctx(|| format!("reading {} at offset {offset}", self.path.display()))
    }

    /// Whether any valid frame with a later block number starts after the
    /// bad one at `bad`. Only called on the error path, so a byte-by-byte
    /// probe is affordable; a false match needs a 32-bit checksum collision
    /// on a frame that also names the right file, offset and block.
    pub fn valid_frame_after(&self, bad: &BadFrame) -> Result<bool> {
        Ok(self.next_valid_frame(bad)?.is_some())
    }

    /// Moves past the bad frame to the next valid one, if there is one
    /// (salvage reads on past damage); returns whether it found one.
    pub fn resync_after(&mut self, bad: &BadFrame) -> Result<bool> {
        Ok(match self.next_valid_frame(bad)? {
            Some((offset, block)) => {
                self.offset = offset;
                self.next_block = block;
                true
            }
            None => false,
        })
    }

    /// Offset and block number of the first valid frame after `bad`.
    fn next_valid_frame(&self, bad: &BadFrame) -> Result<Option<(u64, u32)>> {
        const MAX_SKIPPED_BLOCKS: u32 = 1 << 20;
        let start = bad.offset + 1;
        if start >= self.end {
            return Ok(None);
        }
        let mut rest = vec![0u8; (self.end - start) as usize];
        self.read(&mut rest, start)?;
        for i in 0..rest.len().saturating_sub(FRAME_HEADER_LEN - 1) {
            let head = &rest[i..i + FRAME_HEADER_LEN];
            let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
            let block = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
            let Some(kind) = BlockKind::from_u8(head[8]) else {
                continue;
            };
            let body = i + FRAME_HEADER_LEN;
            if block <= bad.block
                || block - bad.block > MAX_SKIPPED_BLOCKS
                || len > rest.len() - body
            {
                continue;
            }
            let ctx = BlockContext {
                key_id: self.key_id,
                file_number: self.file_number,
                block_number: block,
                offset: start + i as u64,
                kind,
            };
            if self
                .codec
                .open(&ctx, rest[body..body + len].to_vec())
                .is_ok()
            {
                return Ok(Some((start + i as u64, block)));
            }
        }
        Ok(None)
    }
}
