//! Reading values back from the value log through their pointers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::codec::{BlockCodec, BlockContext, BlockKind, OpenError, OpenSlot};
use crate::env::FileSystem;
use crate::error::{Error, Result};
use crate::format::{vlog_path, FileKind, ValuePointer};
use crate::log_reader::{open_log_file, LogFile};
use crate::log_writer::FRAME_HEADER_LEN;
use crate::write_batch::decode_value_frame;

pub struct ValueLog {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    codec: Arc<dyn BlockCodec>,
    open: Mutex<HashMap<u64, LogFile>>,
}

impl ValueLog {
    pub fn new(fs: Arc<dyn FileSystem>, dir: PathBuf, codec: Arc<dyn BlockCodec>) -> Self {
        ValueLog {
            fs,
            dir,
            codec,
            open: Mutex::new(HashMap::new()),
        }
    }

    fn file(&self, n: u64) -> Result<LogFile> {
        if let Some(f) = self.open.lock().get(&n) {
            return Ok(f.clone());
        }
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
        self.open.lock().insert(n, f.clone());
        Ok(f)
    }

    /// Reads the value `ptr` names and checks that it belongs to `key`.
    ///
    /// One buffer per read, one copy of the value: the frame is read into
    /// the buffer that is returned, opened where it lies, and the value is
    /// moved to the front (it used to be moved twice: the sealed block to
    /// the front, then the value over the key). Error texts are only built
    /// on error: formatting them cost ~0.2 µs per read.
    pub fn read(&self, ptr: &ValuePointer, key: &[u8]) -> Result<Vec<u8>> {
        let (ctx, mut buf) = self.fetch(ptr)?;
        let opened = self.codec.open_in_place(&ctx, &mut buf[FRAME_HEADER_LEN..]);
        self.finish(ptr, key, buf, opened)
    }

    /// Reads many values at once (read-ahead of an iterator): the frames
    /// are read one by one, then opened in one batch, which an encrypting
    /// codec spreads over cores. Result i belongs to `wanted[i]` alone: a
    /// damaged frame fails only its own entry.
    pub fn read_many(&self, wanted: &[(ValuePointer, &[u8])]) -> Vec<Result<Vec<u8>>> {
        let mut bufs: Vec<Option<(BlockContext, Vec<u8>)>> = Vec::with_capacity(wanted.len());
        let mut errors: Vec<Option<Error>> = Vec::with_capacity(wanted.len());
        for (ptr, _) in wanted {
            match self.fetch(ptr) {
                Ok(b) => {
                    bufs.push(Some(b));
                    errors.push(None);
                }
                Err(e) => {
                    bufs.push(None);
                    errors.push(Some(e));
                }
            }
        }
        let mut slots: Vec<OpenSlot<'_>> = bufs
            .iter_mut()
            .flatten()
            .map(|(ctx, buf)| OpenSlot {
                ctx: *ctx,
                sealed: &mut buf[FRAME_HEADER_LEN..],
            })
            .collect();
        let mut opened = self.codec.open_many_in_place(&mut slots).into_iter();
        drop(slots);
        wanted
            .iter()
            .zip(bufs)
            .zip(errors)
            .map(|(((ptr, key), buf), err)| match (buf, err) {
                (Some((_, buf)), _) => {
                    let r = opened.next().unwrap_or_else(|| {
                        Err(OpenError("open batch returned too few results".into()))
                    });
                    self.finish(ptr, key, buf, r)
                }
                (None, Some(e)) => Err(e),
                (None, None) => Err(Error::InvalidArgument("read-ahead lost a frame".into())),
            })
            .collect()
    }

    fn corrupt(&self, ptr: &ValuePointer, why: &str) -> Error {
        Error::corruption(
            vlog_path(&self.dir, ptr.file),
            format!("block {} at offset {}", ptr.frame.block, ptr.frame.offset),
            why,
        )
    }

    /// Reads the frame `ptr` names (header and sealed block) and checks its
    /// header against the pointer; returns the block's context.
    fn fetch(&self, ptr: &ValuePointer) -> Result<(BlockContext, Vec<u8>)> {
        let file = self.file(ptr.file)?;
        let sealed_len = ptr.frame.len as usize;
        let mut buf = vec![0u8; FRAME_HEADER_LEN + sealed_len];
        file.file
            .read_exact_at(&mut buf, ptr.frame.offset)
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
        Ok((ctx, buf))
    }

    /// Checks an opened frame against `key` and turns its buffer into the
    /// value: the payload's tail, moved to the front.
    fn finish(
        &self,
        ptr: &ValuePointer,
        key: &[u8],
        mut buf: Vec<u8>,
        opened: std::result::Result<usize, OpenError>,
    ) -> Result<Vec<u8>> {
        let payload_len = opened.map_err(|e| self.corrupt(ptr, &e.0))?;
        let payload = &buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + payload_len];
        let Some((k, v)) = decode_value_frame(payload) else {
            return Err(self.corrupt(ptr, "malformed value frame"));
        };
        if k != key {
            return Err(self.corrupt(ptr, "value frame belongs to another key"));
        }
        let start = FRAME_HEADER_LEN + payload_len - v.len();
        let value_len = v.len();
        buf.copy_within(start..start + value_len, 0);
        buf.truncate(value_len);
        Ok(buf)
    }

    pub fn forget(&self, n: u64) {
        self.open.lock().remove(&n);
    }
}
