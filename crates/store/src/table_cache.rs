//! Open tables by file number, so that index and filter are read once.
//! Every read looks a table up here, so a hit writes to no shared memory:
//! each shard's map is published through an `ArcSwap` and read in place
//! (no lock word, no reference count touched); opening and evicting, which
//! are rare, replace a shard's map under its writer lock.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::cache::BlockCache;
use crate::codec::BlockCodec;
use crate::env::FileSystem;
use crate::error::{Error, Result};
use crate::format::table_path;
use crate::lock_order::{Rank, RankedMutex};
use crate::table_reader::Table;
use crate::version::FileMeta;

/// One shard: the published map, and the lock its writers take.
struct Shard {
    map: ArcSwap<HashMap<u64, Arc<Table>>>,
    writer: RankedMutex<()>,
}

impl Default for Shard {
    fn default() -> Shard {
        Shard {
            map: ArcSwap::default(),
            writer: RankedMutex::new(Rank::TableCache, ()),
        }
    }
}

/// Table numbers are consecutive, so `number % SHARDS` spreads them evenly.
const SHARDS: usize = 16;

pub struct TableCache {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    codec: Arc<dyn BlockCodec>,
    blocks: Arc<BlockCache>,
    /// Open tables a shard may keep.
    max_open_per_shard: usize,
    shards: Vec<Shard>,
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
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            evictions: AtomicU64::new(0),
        }
    }

    fn shard(&self, number: u64) -> &Shard {
        &self.shards[number as usize % SHARDS]
    }

    pub fn get(&self, f: &FileMeta) -> Result<Arc<Table>> {
        self.with(f, |t| Ok(t.clone()))
    }

    /// Runs `op` on table `f`, opening it if it is not open; a hit borrows
    /// the cached table without touching its reference count.
    pub fn with<R>(&self, f: &FileMeta, op: impl FnOnce(&Arc<Table>) -> Result<R>) -> Result<R> {
        if let Some(t) = self.shard(f.number).map.load().get(&f.number) {
            return op(t);
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
        let shard = self.shard(f.number);
        let _w = shard.writer.lock();
        if self.evictions.load(Ordering::SeqCst) == evictions {
            let mut open = HashMap::clone(&shard.map.load());
            if open.len() >= self.max_open_per_shard {
                // Any entry will do: tables in use stay alive through their Arc.
                if let Some(&k) = open.keys().next() {
                    open.remove(&k);
                }
            }
            open.insert(f.number, t.clone());
            shard.map.store(Arc::new(open));
        }
        op(&t)
    }

    pub fn evict(&self, number: u64) {
        let shard = self.shard(number);
        let _w = shard.writer.lock();
        let mut open = HashMap::clone(&shard.map.load());
        if open.remove(&number).is_some() {
            shard.map.store(Arc::new(open));
        }
        // Under the writer lock, so that `with` sees it before inserting.
        self.evictions.fetch_add(1, Ordering::SeqCst);
    }
}
