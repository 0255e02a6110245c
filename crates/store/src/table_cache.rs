//! Open tables by file number, so that index and filter are read once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::cache::BlockCache;
use crate::codec::BlockCodec;
use crate::env::FileSystem;
use crate::error::{Error, Result};
use crate::format::table_path;
use crate::table_reader::Table;
use crate::version::FileMeta;

pub struct TableCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    codec: Arc<dyn BlockCodec>,
    blocks: Arc<BlockCache>,
    max_open: usize,
    open: Mutex<HashMap<u64, Arc<Table>>>,
}

impl TableCache {
    pub fn new(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        codec: Arc<dyn BlockCodec>,
        blocks: Arc<BlockCache>,
        max_open: usize,
    ) -> Self {
        TableCache {
            fs,
            dir,
            codec,
            blocks,
            max_open: max_open.max(1),
            open: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, f: &FileMeta) -> Result<Arc<Table>> {
        if let Some(t) = self.open.lock().get(&f.number) {
            return Ok(t.clone());
        }
        let path = table_path(&self.dir, f.number);
        let t = Table::open(
            &*self.fs,
            &path,
            f.number,
            f.size,
            self.codec.clone(),
            self.blocks.clone(),
        )
        .map_err(|e| match e {
            Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Error::corruption(
                    &path,
                    "whole file",
                    "table named by the manifest is missing",
                )
            }
            e => e,
        })?;
        let t = Arc::new(t);
        let mut open = self.open.lock();
        if open.len() >= self.max_open {
            // Any entry will do: tables in use stay alive through their Arc.
            if let Some(&k) = open.keys().next() {
                open.remove(&k);
            }
        }
        open.insert(f.number, t.clone());
        Ok(t)
    }

    pub fn evict(&self, number: u64) {
        self.open.lock().remove(&number);
    }
}
