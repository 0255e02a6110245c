//! The memtable: sorted internal keys in a lock-free skiplist, so writers
//! insert while readers and the flusher read. One is active; full ones become
//! immutable and wait for a flush (the seed's active and merge trees).

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use crossbeam_skiplist::SkipSet;

use crate::error::Result;
use crate::format::{
    compare_internal, internal_key_into, parse_internal_key, ValueType, TYPE_FOR_SEEK,
};
use crate::iterator::InternalIterator;

/// One memtable entry: its internal key and then its value, in one
/// allocation (a write allocates the skiplist node and this, nothing else).
/// Ordered by the internal key alone.
#[derive(Debug)]
pub struct MemRecord {
    data: Vec<u8>,
    key_len: usize,
}

impl MemRecord {
    /// No key, no value: a seek key or iterator copy before first use.
    const fn empty() -> Self {
        MemRecord {
            data: Vec::new(),
            key_len: 0,
        }
    }

    fn new(user_key: &[u8], seq: u64, t: ValueType, value: &[u8]) -> Self {
        let mut data = Vec::with_capacity(user_key.len() + 8 + value.len());
        internal_key_into(&mut data, user_key, seq, t as u8);
        let key_len = data.len();
        data.extend_from_slice(value);
        MemRecord { data, key_len }
    }

    /// Makes this a seek key (no value), reusing its buffer.
    fn set_seek(&mut self, internal_key: impl FnOnce(&mut Vec<u8>)) {
        internal_key(&mut self.data);
        self.key_len = self.data.len();
    }

    /// The internal key.
    pub fn key(&self) -> &[u8] {
        &self.data[..self.key_len]
    }

    pub fn value(&self) -> &[u8] {
        &self.data[self.key_len..]
    }
}

impl PartialEq for MemRecord {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for MemRecord {}

impl Ord for MemRecord {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal(self.key(), other.key())
    }
}

impl PartialOrd for MemRecord {
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

/// A memtable entry, borrowed from the skiplist (`value()` is the record).
pub type MemEntry<'a> = crossbeam_skiplist::set::Entry<'a, MemRecord>;

thread_local! {
    /// The seek key of this thread's lookups, reused: a get allocates none.
    static SEEK_KEY: std::cell::RefCell<MemRecord> =
        const { std::cell::RefCell::new(MemRecord::empty()) };
}

#[derive(Default)]
pub struct MemTable {
    map: SkipSet<MemRecord>,
    bytes: AtomicUsize,
}

impl MemTable {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&self, seq: u64, t: ValueType, key: &[u8], value: &[u8]) {
        self.bytes
            .fetch_add(key.len() + value.len() + 48, AtomicOrdering::Relaxed);
        self.map.insert(MemRecord::new(key, seq, t, value));
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
            seek.set_seek(|k| internal_key_into(k, key, seq, TYPE_FOR_SEEK));
            self.map.lower_bound(Bound::Included(&*seek))
        })?;
        let p = parse_internal_key(e.value().key())?;
        (p.user_key == key).then_some((p.seq, p.value_type, e))
    }
}

/// Iterates a memtable; keeps a copy of the current entry and re-seeks for
/// each step, because skiplist entries borrow the map. The copy and the
/// seek key reuse their buffers: a step allocates nothing.
pub struct MemTableIterator {
    mem: Arc<MemTable>,
    /// The current entry (internal key, then value), valid or not.
    current: MemRecord,
    valid: bool,
}

impl MemTableIterator {
    pub fn new(mem: Arc<MemTable>) -> Self {
        MemTableIterator {
            mem,
            current: MemRecord::empty(),
            valid: false,
        }
    }

    /// Moves to the entry `find` picks from the map.
    fn set(
        &mut self,
        find: impl for<'m> FnOnce(&'m SkipSet<MemRecord>, &MemRecord) -> Option<MemEntry<'m>>,
    ) {
        let mem = self.mem.clone();
        let e = find(&mem.map, &self.current);
        self.valid = e.is_some();
        if let Some(e) = e {
            let r = e.value();
            self.current.data.clear();
            self.current.data.extend_from_slice(&r.data);
            self.current.key_len = r.key_len;
        }
    }
}

impl InternalIterator for MemTableIterator {
    fn valid(&self) -> bool {
        self.valid
    }
    fn seek_to_first(&mut self) {
        self.set(|m, _| m.front());
    }
    fn seek_to_last(&mut self) {
        self.set(|m, _| m.back());
    }
    fn seek(&mut self, target: &[u8]) {
        self.current.set_seek(|k| {
            k.clear();
            k.extend_from_slice(target)
        });
        self.set(|m, t| m.lower_bound(Bound::Included(t)));
    }
    fn next(&mut self) {
        if self.valid {
            self.set(|m, t| m.lower_bound(Bound::Excluded(t)));
        }
    }
    fn prev(&mut self) {
        if self.valid {
            self.set(|m, t| m.upper_bound(Bound::Excluded(t)));
        }
    }
    fn key(&self) -> &[u8] {
        assert!(self.valid, "valid iterator");
        self.current.key()
    }
    fn value(&self) -> &[u8] {
        assert!(self.valid, "valid iterator");
        self.current.value()
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
        assert_eq!(m.get(b"k", 2).unwrap().2.value().value(), b"v1");
        assert_eq!(m.get(b"k", 3).unwrap().2.value().value(), b"v3");
        assert_eq!(m.get(b"k", 9).unwrap().1, ValueType::Deletion);
        assert!(m.get(b"k", 0).is_none());
        assert!(m.get(b"kk", 9).is_none());
    }
}
