//! Data and index blocks, as LevelDB's block_builder / block: entries with
//! keys prefix-compressed against the previous key, a full key every
//! `restart_interval` entries (a restart point), then the restart offsets
//! and their count. A block is decoded once when loaded into the cache, into
//! full keys and value ranges, so that iteration in both directions and
//! binary search need no further parsing.

use std::cmp::Ordering;
use std::ops::Range;
use std::sync::Arc;

use crate::coding::{put_u32, put_varint, Decoder};
use crate::error::Result;
use crate::format::compare_internal;
use crate::iterator::InternalIterator;

pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    counter: usize,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            counter: 0,
            last_key: Vec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn estimated_size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// Keys must be added in increasing order.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter < self.restart_interval {
            key.iter()
                .zip(&self.last_key)
                .take_while(|(a, b)| a == b)
                .count()
        } else {
            self.restarts.push(self.buf.len() as u32);
            self.counter = 0;
            0
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.counter += 1;
    }

    pub fn finish(mut self) -> Vec<u8> {
        for r in &self.restarts {
            put_u32(&mut self.buf, *r);
        }
        put_u32(&mut self.buf, self.restarts.len() as u32);
        self.buf
    }
}

/// A decoded block.
pub struct Block {
    data: Vec<u8>,
    keys: Vec<u8>,
    entries: Vec<(Range<usize>, Range<usize>)>,
}

impl Block {
    /// Parses a block, checking every length and restart offset; never
    /// panics on malformed input.
    pub fn decode(data: Vec<u8>) -> std::result::Result<Block, String> {
        let bad = |what: &str| Err(format!("malformed block: {what}"));
        if data.len() < 4 {
            return bad("shorter than its restart count");
        }
        let n = data.len();
        let num_restarts = u32::from_le_bytes(data[n - 4..].try_into().expect("4 bytes")) as usize;
        let Some(restart_bytes) = num_restarts.checked_mul(4) else {
            return bad("restart count overflows");
        };
        if num_restarts == 0 || restart_bytes > n - 4 {
            return bad("restart count does not fit");
        }
        let limit = n - 4 - restart_bytes;
        let mut restarts = Decoder::new(&data[limit..n - 4]);
        let mut next_restart = restarts.u32();
        let mut keys = Vec::new();
        let mut entries = Vec::new();
        let mut last: Range<usize> = 0..0;
        let mut pos = 0usize;
        while pos < limit {
            let mut d = Decoder::new(&data[pos..limit]);
            let (Some(shared), Some(non_shared), Some(vlen)) = (d.varint(), d.varint(), d.varint())
            else {
                return bad("entry header cut short");
            };
            let at_restart = next_restart == Some(pos as u32);
            if at_restart {
                next_restart = restarts.u32();
                if shared != 0 {
                    return bad("restart entry shares a prefix");
                }
            }
            if shared as usize > last.len() {
                return bad("entry shares more than the previous key");
            }
            let header = limit - pos - d.remaining();
            let key_start = pos + header;
            let (Some(key_end), Some(val_end)) = (
                key_start.checked_add(non_shared as usize),
                key_start
                    .checked_add(non_shared as usize)
                    .and_then(|e| e.checked_add(vlen as usize)),
            ) else {
                return bad("entry length overflows");
            };
            if val_end > limit {
                return bad("entry runs past the restart array");
            }
            let start = keys.len();
            keys.extend_from_within(last.start..last.start + shared as usize);
            keys.extend_from_slice(&data[key_start..key_end]);
            last = start..keys.len();
            entries.push((last.clone(), key_end..val_end));
            pos = val_end;
        }
        if next_restart.is_some_and(|r| r != 0 || !entries.is_empty()) {
            return bad("restart offset does not start an entry");
        }
        Ok(Block {
            data,
            keys,
            entries,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn key(&self, i: usize) -> &[u8] {
        &self.keys[self.entries[i].0.clone()]
    }

    pub fn value(&self, i: usize) -> &[u8] {
        &self.data[self.entries[i].1.clone()]
    }

    /// Index of the first entry with key >= `target` (internal order).
    pub fn seek(&self, target: &[u8]) -> usize {
        self.entries.partition_point(|e| {
            compare_internal(&self.keys[e.0.clone()], target) == Ordering::Less
        })
    }

    /// Bytes held, charged against the block cache.
    pub fn charge(&self) -> usize {
        self.data.len() + self.keys.len() + self.entries.len() * 32 + 64
    }

    /// Whether keys are strictly increasing (for `verify`).
    pub fn is_sorted(&self) -> bool {
        (1..self.len()).all(|i| compare_internal(self.key(i - 1), self.key(i)) == Ordering::Less)
    }
}

/// Iterates one block; `pos == len` means not valid.
pub struct BlockIterator {
    block: Arc<Block>,
    pos: usize,
}

impl BlockIterator {
    pub fn new(block: Arc<Block>) -> Self {
        let pos = block.len();
        BlockIterator { block, pos }
    }
}

impl InternalIterator for BlockIterator {
    fn valid(&self) -> bool {
        self.pos < self.block.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
    }
    fn seek_to_last(&mut self) {
        self.pos = self.block.len().saturating_sub(1);
    }
    fn seek(&mut self, target: &[u8]) {
        self.pos = self.block.seek(target);
    }
    fn next(&mut self) {
        self.pos = (self.pos + 1).min(self.block.len());
    }
    fn prev(&mut self) {
        self.pos = self.pos.checked_sub(1).unwrap_or(self.block.len());
    }
    fn key(&self) -> &[u8] {
        self.block.key(self.pos)
    }
    fn value(&self) -> &[u8] {
        self.block.value(self.pos)
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::internal_key;

    #[test]
    fn build_decode_seek() {
        let mut b = BlockBuilder::new(3);
        let keys: Vec<Vec<u8>> = (0..20)
            .map(|i| internal_key(format!("key{i:03}").as_bytes(), 1, 1))
            .collect();
        for (i, k) in keys.iter().enumerate() {
            b.add(k, format!("v{i}").as_bytes());
        }
        let block = Block::decode(b.finish()).unwrap();
        assert_eq!(block.len(), 20);
        assert!(block.is_sorted());
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(block.key(i), &k[..]);
            assert_eq!(block.value(i), format!("v{i}").as_bytes());
            assert_eq!(block.seek(k), i);
        }
        assert_eq!(block.seek(&internal_key(b"zzz", 1, 1)), 20);
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        let mut b = BlockBuilder::new(2);
        for i in 0..10u8 {
            b.add(&internal_key(&[b'a', i], 1, 1), &[i; 3]);
        }
        let good = b.finish();
        for cut in 0..good.len() {
            let _ = Block::decode(good[..cut].to_vec());
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                let _ = Block::decode(bad);
            }
        }
    }
}
