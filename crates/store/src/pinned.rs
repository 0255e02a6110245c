//! A value returned without a copy where the store already holds it in
//! memory (RocksDB's `PinnableSlice`): an inline value pins the cached
//! table block it lies in, a value-log value the cache entry it was opened
//! into. Only values from the memtable, or too large for the cache, are
//! owned copies.

use std::ops::Deref;
use std::sync::Arc;

use crate::block::Block;
use crate::cache::CachedValue;

/// A value read by [`crate::Store::get_pinned`]; derefs to its bytes.
/// Holding it keeps its block or cache entry alive (not in the cache's
/// budget once evicted), so hold it briefly.
pub struct PinnedValue(Pinned);

pub(crate) enum Pinned {
    Owned(Vec<u8>),
    InBlock(Arc<Block>, usize),
    Cached(Arc<CachedValue>),
}

impl PinnedValue {
    pub(crate) fn new(p: Pinned) -> Self {
        PinnedValue(p)
    }

    /// The value as an owned vector (a copy unless it was owned already).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Pinned::Owned(v) => v,
            _ => self.to_vec(),
        }
    }
}

impl Deref for PinnedValue {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Pinned::Owned(v) => v,
            Pinned::InBlock(b, i) => b.value(*i),
            Pinned::Cached(v) => &v.value,
        }
    }
}

impl AsRef<[u8]> for PinnedValue {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for PinnedValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedValue")
            .field("len", &self.len())
            .finish()
    }
}

impl PartialEq<[u8]> for PinnedValue {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}
