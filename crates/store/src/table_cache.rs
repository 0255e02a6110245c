//! Open tables by file number, so that index and filter are read once.
//! Every read looks a table up here: the map is split into shards behind
//! read-write locks, so concurrent hits share locks instead of queueing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::cache::BlockCache;
use crate::codec::BlockCodec;
use crate::env::FileSystem;
use crate::error::{Error, Result};
use crate::format::table_path;
use crate::table_reader::Table;
use crate::version::FileMeta;

/// Table numbers are consecutive, so `number % SHARDS` spreads them evenly.
const SHARDS: usize = 16;

pub struct TableCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    codec: Arc<dyn BlockCodec>,
    blocks: Arc<BlockCache>,
    /// Open tables a shard may keep.
    max_open_per_shard: usize,
    shards: Vec<RwLock<HashMap<u64, Arc<Table>>>>,
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
            max_open_per_shard: max_open.max(1).div_ceil(SHARDS),
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            evictions: AtomicU64::new(0),
        }
    }

    fn shard(&self, number: u64) -> &RwLock<HashMap<u64, Arc<Table>>> {
        &self.shards[number as usize % SHARDS]
    }

    pub fn get(&self, f: &FileMeta) -> Result<Arc<Table>> {
        if let Some(t) = self.shard(f.number).read().get(&f.number) {
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
        let mut open = self.shard(f.number).write();
        if self.evictions.load(Ordering::SeqCst) != evictions {
            return Ok(t);
        }
        if open.len() >= self.max_open_per_shard {
            // Any entry will do: tables in use stay alive through their Arc.
            if let Some(&k) = open.keys().next() {
                open.remove(&k);
            }
        }
        open.insert(f.number, t.clone());
        Ok(t)
    }

    pub fn evict(&self, number: u64) {
        let mut open = self.shard(number).write();
        open.remove(&number);
        // Under the map's lock, so that `get` sees it before inserting.
        self.evictions.fetch_add(1, Ordering::SeqCst);
    }
}
