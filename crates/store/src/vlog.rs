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
    ///
    /// One buffer per read, one copy of the value: the frame is read into
    /// the buffer that is returned, opened where it lies, and the value is
    /// moved to the front (it used to be moved twice: the sealed block to
    /// the front, then the value over the key). Error texts are only built
    /// on error: formatting them cost ~0.2 µs per read.
    pub fn read(&self, ptr: &ValuePointer, key: &[u8]) -> Result<Vec<u8>> {
        let path = || vlog_path(&self.dir, ptr.file);
        let loc = || format!("block {} at offset {}", ptr.frame.block, ptr.frame.offset);
        let corrupt = |why: &str| Error::corruption(path(), loc(), why);
        let file = self.file(ptr.file)?;
        let sealed_len = ptr.frame.len as usize;
        let mut buf = vec![0u8; FRAME_HEADER_LEN + sealed_len];
        file.file
            .read_exact_at(&mut buf, ptr.frame.offset)
            .map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    corrupt("value frame runs past the end of the file")
                } else {
                    Error::io(format!("reading {} ({})", path().display(), loc()), e)
                }
            })?;
        let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        let block = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
        if len != ptr.frame.len || block != ptr.frame.block || buf[8] != BlockKind::LogValue as u8 {
            return Err(corrupt("frame header does not match the value pointer"));
        }
        let ctx = BlockContext {
            key_id: file.key_id,
            file_number: ptr.file,
            block_number: block,
            offset: ptr.frame.offset,
            kind: BlockKind::LogValue,
        };
        let payload_len = self
            .codec
            .open_in_place(&ctx, &mut buf[FRAME_HEADER_LEN..])
            .map_err(|e| corrupt(&e.0))?;
        let payload = &buf[FRAME_HEADER_LEN..FRAME_HEADER_LEN + payload_len];
        let Some((k, v)) = decode_value_frame(payload) else {
            return Err(corrupt("malformed value frame"));
        };
        if k != key {
            return Err(corrupt("value frame belongs to another key"));
        }
        // The value is the payload's tail: move it to the front of the
        // buffer and drop the rest.
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
