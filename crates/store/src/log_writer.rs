//! Appends frames to a log-structured file (value log or manifest).
//!
//! A frame is a 9-byte header (sealed length u32, block number u32, block
//! kind u8) followed by the sealed block. Frames of one group are sealed as
//! one batch and written with one `append`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::{BlockCodec, BlockContext, BlockKind};
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
    key_id: u32,
    codec: Arc<dyn BlockCodec>,
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
        let key_id = codec.key_id();
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
            key_id,
            codec,
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

    /// Where frames of these payload lengths would land if appended next;
    /// lets a group refer to its own value frames before it is sealed.
    pub fn plan(&self, payload_lens: &[usize]) -> Vec<BlockHandle> {
        let mut offset = self.offset;
        let mut block = self.next_block;
        payload_lens
            .iter()
            .map(|&len| {
                let sealed = (len + self.codec.overhead()) as u32;
                let h = BlockHandle {
                    offset,
                    len: sealed,
                    block,
                };
                offset += (FRAME_HEADER_LEN + sealed as usize) as u64;
                block += 1;
                h
            })
            .collect()
    }

    /// Seals the blocks as one batch and appends them with one write.
    pub fn append_group(&mut self, blocks: Vec<(BlockKind, Vec<u8>)>) -> Result<Vec<BlockHandle>> {
        let lens: Vec<usize> = blocks.iter().map(|(_, p)| p.len()).collect();
        let handles = self.plan(&lens);
        let mut batch: Vec<(BlockContext, Vec<u8>)> = blocks
            .into_iter()
            .zip(&handles)
            .map(|((kind, payload), h)| {
                let ctx = BlockContext {
                    key_id: self.key_id,
                    file_number: self.file_number,
                    block_number: h.block,
                    offset: h.offset,
                    kind,
                };
                (ctx, payload)
            })
            .collect();
        self.codec
            .seal_batch(&mut batch)
            .map_err(|e| Error::Seal(format!("{}: {e}", self.path.display())))?;
        let total: usize = batch.iter().map(|(_, s)| FRAME_HEADER_LEN + s.len()).sum();
        let mut buf = Vec::with_capacity(total);
        for (ctx, sealed) in &batch {
            buf.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
            buf.extend_from_slice(&ctx.block_number.to_le_bytes());
            buf.push(ctx.kind as u8);
            buf.extend_from_slice(sealed);
        }
        self.file
            .append(&buf)
            .ctx(|| format!("appending to {}", self.path.display()))?;
        self.offset += buf.len() as u64;
        self.next_block += handles.len() as u32;
        Ok(handles)
    }

    pub fn sync(&mut self) -> Result<()> {
        self.file
            .sync()
            .ctx(|| format!("syncing {}", self.path.display()))
    }
}
