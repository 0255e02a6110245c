//! The memtable: sorted internal keys in a lock-free skiplist, so writers
//! insert while readers and the flusher read. One is active; full ones become
//! immutable and wait for a flush (the seed's active and merge trees).

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;

use crate::error::Result;
use crate::format::{
    compare_internal, internal_key, internal_key_into, parse_internal_key, ValueType, TYPE_FOR_SEEK,
};
use crate::iterator::InternalIterator;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InternalKey(pub Vec<u8>);

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(&self.0, &other.0)
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// What a lookup found for a user key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub seq: u64,
    pub value_type: ValueType,
    /// Inline value, encoded pointer, or empty for a deletion.
    pub value: Vec<u8>,
}

/// A memtable entry, borrowed from the skiplist.
pub type MemEntry<'a> = crossbeam_skiplist::map::Entry<'a, InternalKey, Vec<u8>>;

thread_local! {
    /// The seek key of this thread's lookups, reused: a get allocates none.
    static SEEK_KEY: std::cell::RefCell<InternalKey> = const { std::cell::RefCell::new(InternalKey(Vec::new())) };
}

#[derive(Default)]
pub struct MemTable {
    map: SkipMap<InternalKey, Vec<u8>>,
    bytes: AtomicUsize,
}

impl MemTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&self, seq: u64, t: ValueType, key: &[u8], value: &[u8]) {
        self.bytes
            .fetch_add(key.len() + value.len() + 48, AtomicOrdering::Relaxed);
        self.map
            .insert(InternalKey(internal_key(key, seq, t as u8)), value.to_vec());
    }

    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The newest entry for `key` with sequence <= `seq`, in place: its
    /// sequence number, type and the skiplist entry holding its value.
    pub fn get(&self, key: &[u8], seq: u64) -> Option<(u64, ValueType, MemEntry<'_>)> {
        let e = SEEK_KEY.with_borrow_mut(|seek| {
            internal_key_into(&mut seek.0, key, seq, TYPE_FOR_SEEK);
            self.map.lower_bound(Bound::Included(&*seek))
        })?;
        let p = parse_internal_key(&e.key().0)?;
        (p.user_key == key).then_some((p.seq, p.value_type, e))
    }
}

/// Iterates a memtable; keeps a copy of the current entry and re-seeks for
/// each step, because skiplist entries borrow the map.
pub struct MemTableIterator {
    mem: Arc<MemTable>,
    current: Option<(Vec<u8>, Vec<u8>)>,
}

impl MemTableIterator {
    pub fn new(mem: Arc<MemTable>) -> Self {
        MemTableIterator { mem, current: None }
    }

    fn set(&mut self, e: Option<crossbeam_skiplist::map::Entry<'_, InternalKey, Vec<u8>>>) {
        self.current = e.map(|e| (e.key().0.clone(), e.value().clone()));
    }
}

impl InternalIterator for MemTableIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) {
        let mem = self.mem.clone();
        self.set(mem.map.front());
    }
    fn seek_to_last(&mut self) {
        let mem = self.mem.clone();
        self.set(mem.map.back());
    }
    fn seek(&mut self, target: &[u8]) {
        let mem = self.mem.clone();
        let t = InternalKey(target.to_vec());
        self.set(mem.map.lower_bound(Bound::Included(&t)));
    }
    fn next(&mut self) {
        let Some((k, _)) = self.current.take() else {
            return;
        };
        let mem = self.mem.clone();
        let t = InternalKey(k);
        self.set(mem.map.lower_bound(Bound::Excluded(&t)));
    }
    fn prev(&mut self) {
        let Some((k, _)) = self.current.take() else {
            return;
        };
        let mem = self.mem.clone();
        let t = InternalKey(k);
        self.set(mem.map.upper_bound(Bound::Excluded(&t)));
    }
    fn key(&self) -> &[u8] {
        &self.current.as_ref().expect("valid iterator").0
    }
    fn value(&self) -> &[u8] {
        &self.current.as_ref().expect("valid iterator").1
    }
    fn status(&self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_sees_newest_visible_version() {
        let m = MemTable::new();
        m.add(1, ValueType::Inline, b"k", b"v1");
        m.add(3, ValueType::Inline, b"k", b"v3");
        m.add(4, ValueType::Deletion, b"k", b"");
        m.add(2, ValueType::Inline, b"j", b"x");
        assert_eq!(m.get(b"k", 2).unwrap().2.value(), b"v1");
        assert_eq!(m.get(b"k", 3).unwrap().2.value(), b"v3");
        assert_eq!(m.get(b"k", 9).unwrap().1, ValueType::Deletion);
        assert!(m.get(b"k", 0).is_none());
        assert!(m.get(b"kk", 9).is_none());
    }
}
