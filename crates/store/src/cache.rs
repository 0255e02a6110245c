//! A cache of decoded table blocks and opened value-log values with one
//! byte budget, keyed by (file number, offset). Tables and value-log files
//! share one sequence of file numbers, never reused, so the two kinds never
//! meet on a key and entries of deleted files simply age out.
//!
//! Every read of every thread passes through it, so it must not serialise
//! them: it is `quick_cache`'s sharded cache (S3-FIFO eviction; a hit takes
//! one shard's read lock and sets a bit), not one LRU behind a mutex.
//!
//! Values are cached opened and checked: a hit skips the file read, the
//! checksum or AEAD open and the frame parse, as RocksDB serves a large
//! value from the data block it cached.
//!
//! Which reads keep a value that missed is the caller's [`Fill`]: a get
//! always does; a scan only until the cache is full. Once it is full, a
//! scan over more data than it holds would otherwise insert every value it
//! reads and evict another for it (an allocation and a copy per value, a
//! shard's write lock, and the evicted value freed on whichever thread
//! evicts it, usually not the one that allocated it): the cost that kept
//! 16 scanning threads at 8x one (issue 30), for entries read once that
//! S3-FIFO evicts again before anything reads them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::block::Block;

type Key = (u64, u64);

/// A value-log value as read: the key its frame names (checked again on
/// every hit) and the value.
pub struct CachedValue {
    pub key: Box<[u8]>,
    pub value: Box<[u8]>,
}

impl CachedValue {
    fn charge(&self) -> usize {
        self.key.len() + self.value.len() + 64
    }
}

#[derive(Clone)]
enum Entry {
    Block(Arc<Block>),
    Value(Arc<CachedValue>),
}

impl Entry {
    fn charge(&self) -> usize {
        match self {
            Entry::Block(b) => b.charge(),
            Entry::Value(v) => v.charge(),
        }
    }
}

#[derive(Clone)]
struct ByCharge;

impl quick_cache::Weighter<Key, Entry> for ByCharge {
    fn weight(&self, _: &Key, entry: &Entry) -> u64 {
        entry.charge() as u64
    }
}

/// Whether a read that missed the cache keeps what it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// A point read (get): always, evicting colder entries if need be.
    Always,
    /// A bulk read (scan, read-ahead, GC's copy): only while the cache has
    /// room, so that reading more values than it holds does not churn it.
    WhileRoom,
}

pub struct BlockCache {
    /// The largest charge a block may have to be kept: quick_cache turns
    /// away (after the caller's allocation and copy) anything over its
    /// shard's hot share, 0.97 of the shard.
    max_block: usize,
    /// The same for a value (also at most a `VALUE_SHARE`th of the budget).
    max_value: usize,
    /// Bytes in use from which the cache counts as full.
    full_at: u64,
    /// Whether it is full: set once, by an insert that evicted and found
    /// `full_at` bytes in use. Nothing leaves the cache but by eviction, so
    /// it stays full.
    full: AtomicBool,
    /// Inserts that evicted while the cache was not yet full.
    evictions: AtomicU64,
    inner: quick_cache::sync::Cache<Key, Entry, ByCharge>,
}

/// A value is cached only up to this share of the budget: one huge value
/// read once would otherwise push out many hot blocks.
const VALUE_SHARE: usize = 16;

/// Shards of a large cache: more than cores, so two readers rarely meet on
/// one shard's lock word (a small cache gets fewer: quick_cache keeps at
/// least 32 entries a shard).
const SHARDS: usize = 64;

/// A block's typical charge, to size the shards' tables.
const TYPICAL_CHARGE: usize = 4 << 10;

/// The cache is full from this share of its budget in use (in eighths):
/// each shard evicts once it is full itself, and with few values a shard
/// the first fill well before the last (64 KiB values in 64 shards of
/// 1 MiB: the first eviction came at 56% of the budget).
const FULL_EIGHTHS: u64 = 7;

/// Summing the shards' weights takes every shard's lock: an insert that
/// evicts does it once per this many such inserts, until the cache is full.
const FULL_CHECK_EVERY: u64 = 16;

impl BlockCache {
    pub fn new(capacity: usize) -> Self {
        let opts = quick_cache::OptionsBuilder::new()
            .shards(SHARDS)
            .estimated_items_capacity((capacity / TYPICAL_CHARGE).max(1))
            .weight_capacity(capacity as u64)
            .build()
            .expect("shards, items and weight are set");
        let inner = quick_cache::sync::Cache::with_options(
            opts,
            ByCharge,
            Default::default(),
            Default::default(),
        );
        let shard = inner.shard_capacity() as usize;
        let max_block = shard - shard / 32;
        BlockCache {
            max_block,
            max_value: max_block.min(capacity / VALUE_SHARE),
            full_at: capacity as u64 / 8 * FULL_EIGHTHS,
            full: AtomicBool::new(false),
            evictions: AtomicU64::new(0),
            inner,
        }
    }

    /// Inserts `entry`; an insert that evicts may find the cache full.
    fn put(&self, key: Key, entry: Entry) {
        // What the insert evicted, dropped at the end (after the shard's
        // lock), as quick_cache's `insert` does.
        let mut evicted: [Option<(Key, Entry)>; 2] = Default::default();
        self.inner.insert_with_lifecycle(key, entry, &mut evicted);
        if evicted[0].is_some() && !self.is_full() {
            self.check_full();
        }
    }

    #[cold]
    fn check_full(&self) {
        let n = self.evictions.fetch_add(1, Ordering::Relaxed);
        if n.is_multiple_of(FULL_CHECK_EVERY) && self.inner.weight() >= self.full_at {
            self.full.store(true, Ordering::Relaxed);
        }
    }

    pub fn get(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        match self.inner.get(&(file, offset))? {
            Entry::Block(b) => Some(b),
            Entry::Value(_) => None,
        }
    }

    pub fn insert(&self, file: u64, offset: u64, block: Arc<Block>) {
        if block.charge() > self.max_block {
            return;
        }
        self.put((file, offset), Entry::Block(block));
    }

    /// The value of the value-log frame at `offset` of file `file`.
    pub fn get_value(&self, file: u64, offset: u64) -> Option<Arc<CachedValue>> {
        match self.inner.get(&(file, offset))? {
            Entry::Value(v) => Some(v),
            Entry::Block(_) => None,
        }
    }

    /// Whether a value of `len` bytes (key and value) would be kept.
    fn takes_value(&self, len: usize) -> bool {
        len + 64 <= self.max_value
    }

    /// Whether the cache is full (and so stays): an insert evicted with
    /// 7/8 of the budget in use.
    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }

    /// Caches the value of the value-log frame at `offset` of file `file`
    /// as `fill` allows; the entry, or `None` for a value too large to keep
    /// or one a bulk read does not keep.
    pub(crate) fn insert_value(
        &self,
        file: u64,
        offset: u64,
        key: &[u8],
        value: &[u8],
        fill: Fill,
    ) -> Option<Arc<CachedValue>> {
        if fill == Fill::WhileRoom && self.is_full() {
            return None;
        }
        if !self.takes_value(key.len() + value.len()) {
            return None;
        }
        let v = Arc::new(CachedValue {
            key: key.into(),
            value: value.into(),
        });
        self.put((file, offset), Entry::Value(v.clone()));
        Some(v)
    }

    pub fn used_bytes(&self) -> usize {
        self.inner.weight() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block::BlockBuilder;

    fn block(n: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(16);
        b.add(&[0; 9], &vec![7; n]);
        Arc::new(Block::decode(b.finish()).unwrap())
    }

    #[test]
    fn keeps_hot_blocks_within_budget() {
        let one = block(1000).charge();
        let c = BlockCache::new(one * 40);
        c.insert(1, 0, block(1000));
        for round in 0..10 {
            assert!(
                c.get(1, 0).is_some(),
                "a block read every round was evicted"
            );
            for i in 0..20 {
                c.insert(2, round * 100 + i, block(1000));
            }
            assert!(c.used_bytes() <= one * 40);
        }
        // A block read again soon after it came in stays through a scan of
        // blocks read once.
        c.insert(3, 0, block(1000));
        for round in 0..10 {
            assert!(c.get(3, 0).is_some(), "round {round}");
            for i in 0..20 {
                c.insert(4, round * 100 + i, block(1000));
            }
        }
        let cold = (0..10u64)
            .flat_map(|r| (0..20).map(move |i| r * 100 + i))
            .filter(|&k| c.get(4, k).is_some())
            .count();
        assert!(cold < 40, "{cold} blocks read once all stayed");
    }

    #[test]
    fn values_and_blocks_share_the_budget_and_never_alias() {
        let c = BlockCache::new(64 << 10);
        c.insert(1, 0, block(1000));
        assert!(c.get_value(1, 0).is_none());
        c.insert_value(2, 0, b"k", &[5; 1000], Fill::Always);
        assert!(c.get(2, 0).is_none());
        let v = c.get_value(2, 0).unwrap();
        assert_eq!((&*v.key, v.value.len()), (&b"k"[..], 1000));
        // Up to a sixteenth of the budget (4 KiB here), then not kept.
        assert!(c.takes_value(4000) && !c.takes_value(4033));
        c.insert_value(3, 0, b"k", &[5; 5000], Fill::Always);
        assert!(c.get_value(3, 0).is_none());
        for i in 0..200 {
            c.insert_value(4, i, b"k", &[5; 1000], Fill::Always);
        }
        assert!(c.used_bytes() <= 64 << 10);
    }

    #[test]
    fn a_block_larger_than_the_cache_is_not_kept() {
        let c = BlockCache::new(100);
        c.insert(1, 0, block(1000));
        assert!(c.get(1, 0).is_none());
        assert_eq!(c.used_bytes(), 0);
    }

    #[test]
    fn bulk_reads_fill_only_while_there_is_room() {
        let c = BlockCache::new(64 << 10);
        let one = CachedValue {
            key: b"k"[..].into(),
            value: vec![5; 1000].into(),
        }
        .charge();
        // Room: a scan's value is kept, and a get's.
        assert!(c
            .insert_value(1, 0, b"k", &[5; 1000], Fill::WhileRoom)
            .is_some());
        assert!(c
            .insert_value(1, 1, b"k", &[5; 1000], Fill::Always)
            .is_some());
        assert!(!c.is_full());
        let mut i = 2;
        while !c.is_full() {
            assert!(c
                .insert_value(1, i, b"k", &[5; 1000], Fill::WhileRoom)
                .is_some());
            i += 1;
        }
        // It filled up before it evicted.
        assert!(i as usize * one > (64 << 10) * 9 / 10, "{i} values");
        let used = c.used_bytes();
        for j in 0..100 {
            assert!(c
                .insert_value(2, j, b"k", &[5; 1000], Fill::WhileRoom)
                .is_none());
            assert!(c.get_value(2, j).is_none());
        }
        assert_eq!(c.used_bytes(), used);
        // A get's value still goes in, evicting.
        assert!(c
            .insert_value(3, 0, b"k", &[5; 1000], Fill::Always)
            .is_some());
        assert!(c.get_value(3, 0).is_some());
    }

    #[test]
    fn nothing_turned_away_reads_as_full() {
        // Kept sizes stay within a shard's hot share, so quick_cache never
        // turns an entry away (which would call the eviction hook).
        for capacity in [4 << 10, 64 << 10, 1 << 20, 67 << 20] {
            let c = BlockCache::new(capacity);
            let shard = c.inner.shard_capacity() as usize;
            assert!(c.max_block <= shard * 97 / 100, "{capacity}");
            assert!(c.max_value <= c.max_block && c.max_value <= capacity / VALUE_SHARE);
            c.insert(1, 0, block(c.max_block - 200));
            assert!(c.get(1, 0).is_some() && !c.is_full(), "{capacity}");
            let c = BlockCache::new(capacity);
            let v = vec![0; c.max_value - 64 - 1];
            assert!(c.insert_value(2, 0, b"k", &v, Fill::WhileRoom).is_some());
            assert!(c.get_value(2, 0).is_some() && !c.is_full(), "{capacity}");
        }
    }
}
