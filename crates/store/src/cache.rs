//! A cache of decoded blocks with a byte budget, keyed by (file number,
//! block offset). File numbers are never reused, so entries of deleted files
//! simply age out.
//!
//! Every read of every thread passes through it, so it must not serialise
//! them: it is `quick_cache`'s sharded cache (S3-FIFO eviction; a hit takes
//! one shard's read lock and sets a bit), not one LRU behind a mutex.

use std::sync::Arc;

use crate::block::Block;

type Key = (u64, u64);

#[derive(Clone)]
struct ByCharge;

impl quick_cache::Weighter<Key, Arc<Block>> for ByCharge {
    fn weight(&self, _: &Key, block: &Arc<Block>) -> u64 {
        block.charge() as u64
    }
}

pub struct BlockCache {
    capacity: usize,
    inner: quick_cache::sync::Cache<Key, Arc<Block>, ByCharge>,
}

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
        self.inner.get(&(file, offset))
    }

    pub fn insert(&self, file: u64, offset: u64, block: Arc<Block>) {
        if block.charge() > self.capacity {
            return;
        }
        self.inner.insert((file, offset), block);
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
    fn a_block_larger_than_the_cache_is_not_kept() {
        let c = BlockCache::new(100);
        c.insert(1, 0, block(1000));
        assert!(c.get(1, 0).is_none());
        assert_eq!(c.used_bytes(), 0);
    }
}
