//! Reading values back from the value log through their pointers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::codec::{BlockCodec, BlockContext, BlockKind};
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
    pub fn read(&self, ptr: &ValuePointer, key: &[u8]) -> Result<Vec<u8>> {
        let path = vlog_path(&self.dir, ptr.file);
        let loc = format!("block {} at offset {}", ptr.frame.block, ptr.frame.offset);
        let file = self.file(ptr.file)?;
        let mut buf = vec![0u8; FRAME_HEADER_LEN + ptr.frame.len as usize];
        file.file
            .read_exact_at(&mut buf, ptr.frame.offset)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    Error::corruption(&path, &loc, "value frame runs past the end of the file")
                } else {
                    Error::io(format!("reading {} ({loc})", path.display()), e)
                }
            })?;
        let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        let block = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        if len != ptr.frame.len || block != ptr.frame.block || buf[8] != BlockKind::LogValue as u8 {
            return Err(Error::corruption(
                &path,
                &loc,
                "frame header does not match the value pointer",
            ));
        }
        let ctx = BlockContext {
            key_id: file.key_id,
            file_number: ptr.file,
            block_number: block,
            offset: ptr.frame.offset,
            kind: BlockKind::LogValue,
        };
        // Shift the sealed block to the front instead of copying it out: no
        // second allocation of a value-sized buffer per read.
        buf.copy_within(FRAME_HEADER_LEN.., 0);
        buf.truncate(ptr.frame.len as usize);
        let mut payload = self
            .codec
            .open(&ctx, buf)
            .map_err(|e| Error::corruption(&path, &loc, e.0))?;
        let Some((k, v)) = decode_value_frame(&payload) else {
            return Err(Error::corruption(&path, &loc, "malformed value frame"));
        };
        if k != key {
            return Err(Error::corruption(
                &path,
                &loc,
                "value frame belongs to another key",
            ));
        }
        // The value is the payload's tail: keep the buffer, drop the key.
        let start = payload.len() - v.len();
        payload.drain(..start);
        Ok(payload)
    }

    pub fn forget(&self, n: u64) {
        self.open.lock().remove(&n);
    }
}
