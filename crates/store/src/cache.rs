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

pub struct BlockCache {
    capacity: usize,
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

impl BlockCache {
    pub fn new(capacity: usize) -> Self {
        let opts = quick_cache::OptionsBuilder::new()
            .shards(SHARDS)
            .estimated_items_capacity((capacity / TYPICAL_CHARGE).max(1))
            .weight_capacity(capacity as u64)
            .build()
            .expect("shards, items and weight are set");
        BlockCache {
            capacity,
            inner: quick_cache::sync::Cache::with_options(
                opts,
                ByCharge,
                Default::default(),
                Default::default(),
            ),
        }
    }

    pub fn get(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        match self.inner.get(&(file, offset))? {
            Entry::Block(b) => Some(b),
            Entry::Value(_) => None,
        }
    }

    pub fn insert(&self, file: u64, offset: u64, block: Arc<Block>) {
        if block.charge() > self.capacity {
            return;
        }
        self.inner.insert((file, offset), Entry::Block(block));
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
        len + 64 <= self.capacity / VALUE_SHARE
    }

    /// Caches the value of the value-log frame at `offset` of file `file`;
    /// the entry, or `None` for a value too large to keep.
    pub fn insert_value(
        &self,
        file: u64,
        offset: u64,
        key: &[u8],
        value: &[u8],
    ) -> Option<Arc<CachedValue>> {
        if !self.takes_value(key.len() + value.len()) {
            return None;
        }
        let v = Arc::new(CachedValue {
            key: key.into(),
            value: value.into(),
        });
        self.inner.insert((file, offset), Entry::Value(v.clone()));
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
        c.insert_value(2, 0, b"k", &[5; 1000]);
        assert!(c.get(2, 0).is_none());
        let v = c.get_value(2, 0).unwrap();
        assert_eq!((&*v.key, v.value.len()), (&b"k"[..], 1000));
        // Up to a sixteenth of the budget (4 KiB here), then not kept.
        assert!(c.takes_value(4000) && !c.takes_value(4033));
        c.insert_value(3, 0, b"k", &[5; 5000]);
        assert!(c.get_value(3, 0).is_none());
        for i in 0..200 {
            c.insert_value(4, i, b"k", &[5; 1000]);
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
}
