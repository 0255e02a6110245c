//! Open tables by file number, so that index and filter are read once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
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
    /// Evictions so far. A table opened while one happened is returned
    /// but not cached: it may be the file that re-encryption just replaced
    /// (still readable through its own handle, under its own key), and
    /// caching it would keep serving the old file after the eviction.
    evictions: AtomicU64,
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
            evictions: AtomicU64::new(0),
        }
    }

    pub fn get(&self, f: &FileMeta) -> Result<Arc<Table>> {
        if let Some(t) = self.open.lock().get(&f.number) {
            return Ok(t.clone());
        }
        let evictions = self.evictions.load(Ordering::SeqCst);
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
        if self.evictions.load(Ordering::SeqCst) != evictions {
            return Ok(t);
        }
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
        let mut open = self.open.lock();
        open.remove(&number);
        // Under the map's lock, so that `get` sees it before inserting.
        self.evictions.fetch_add(1, Ordering::SeqCst);
    }
}
