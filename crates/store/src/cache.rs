//! An LRU cache of decoded blocks with a byte budget, keyed by (file number,
//! block offset). File numbers are never reused, so entries of deleted files
//! simply age out.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::block::Block;

type Key = (u64, u64);

pub struct BlockCache {
    capacity: usize,
    inner: Mutex<Lru>,
}

#[derive(Default)]
struct Lru {
    map: HashMap<Key, (Arc<Block>, u64)>,
    /// Recency order: tick -> key; the smallest tick is evicted first.
    order: BTreeMap<u64, Key>,
    used: usize,
    tick: u64,
}

impl BlockCache {
    pub fn new(capacity: usize) -> Self {
        BlockCache {
            capacity,
            inner: Mutex::new(Lru::default()),
        }
    }

    pub fn get(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        let mut lru = self.inner.lock();
        lru.tick += 1;
        let tick = lru.tick;
        let (block, old) = {
            let e = lru.map.get_mut(&(file, offset))?;
            let old = std::mem::replace(&mut e.1, tick);
            (e.0.clone(), old)
        };
        lru.order.remove(&old);
        lru.order.insert(tick, (file, offset));
        Some(block)
    }

    pub fn insert(&self, file: u64, offset: u64, block: Arc<Block>) {
        let charge = block.charge();
        if charge > self.capacity {
            return;
        }
        let mut lru = self.inner.lock();
        lru.tick += 1;
        let tick = lru.tick;
        if let Some((old, old_tick)) = lru.map.insert((file, offset), (block, tick)) {
            lru.order.remove(&old_tick);
            lru.used -= old.charge();
        }
        lru.order.insert(tick, (file, offset));
        lru.used += charge;
        while lru.used > self.capacity {
            let Some((_, key)) = lru.order.pop_first() else {
                break;
            };
            if let Some((b, _)) = lru.map.remove(&key) {
                lru.used -= b.charge();
            }
        }
    }

    pub fn used_bytes(&self) -> usize {
        self.inner.lock().used
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
    fn evicts_least_recently_used_within_budget() {
        let one = block(1000).charge();
        let c = BlockCache::new(one * 2);
        c.insert(1, 0, block(1000));
        c.insert(1, 1, block(1000));
        assert!(c.get(1, 0).is_some()); // now 1,1 is the oldest
        c.insert(1, 2, block(1000));
        assert!(c.get(1, 1).is_none());
        assert!(c.get(1, 0).is_some());
        assert!(c.get(1, 2).is_some());
        assert!(c.used_bytes() <= one * 2);
    }
}
