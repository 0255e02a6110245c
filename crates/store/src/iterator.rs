//! Internal iterators over internal keys (memtables, blocks, tables, levels)
//! and the merging iterator that combines them, as LevelDB's. All of them
//! move both ways; an error makes an iterator invalid and is kept in
//! `status`.

use std::cmp::Ordering;

use crate::error::Result;
use crate::format::compare_internal;

pub trait InternalIterator: Send {
    fn valid(&self) -> bool;
    fn seek_to_first(&mut self);
    fn seek_to_last(&mut self);
    /// Positions at the first entry whose key is >= `target`.
    fn seek(&mut self, target: &[u8]);
    fn next(&mut self);
    fn prev(&mut self);
    fn key(&self) -> &[u8];
    fn value(&self) -> &[u8];
    fn status(&self) -> Result<()>;
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// Yields the union of its children in internal-key order.
pub struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
    direction: Direction,
}

impl MergingIterator {
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator {
            children,
            current: None,
            direction: Direction::Forward,
        }
    }

    /// A child that failed may have skipped entries that would hide older
    /// ones in other children: stop rather than yield stale data.
    fn failed(&self) -> bool {
        self.children
            .iter()
            .any(|c| !c.valid() && c.status().is_err())
    }

    fn find_smallest(&mut self) {
        if self.failed() {
            self.current = None;
            return;
        }
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            match best {
                Some(b) if compare_internal(c.key(), self.children[b].key()) != Ordering::Less => {}
                _ => best = Some(i),
            }
        }
        self.current = best;
    }

    fn find_largest(&mut self) {
        if self.failed() {
            self.current = None;
            return;
        }
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate().rev() {
            if !c.valid() {
                continue;
            }
            match best {
                Some(b)
                    if compare_internal(c.key(), self.children[b].key()) != Ordering::Greater => {}
                _ => best = Some(i),
            }
        }
        self.current = best;
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn seek_to_first(&mut self) {
        for c in &mut self.children {
            c.seek_to_first();
        }
        self.find_smallest();
        self.direction = Direction::Forward;
    }

    fn seek_to_last(&mut self) {
        for c in &mut self.children {
            c.seek_to_last();
        }
        self.find_largest();
        self.direction = Direction::Reverse;
    }

    fn seek(&mut self, target: &[u8]) {
        for c in &mut self.children {
            c.seek(target);
        }
        self.find_smallest();
        self.direction = Direction::Forward;
    }

    fn next(&mut self) {
        let Some(cur) = self.current else { return };
        if self.direction != Direction::Forward {
            // Every other child is positioned before key(); move them to the
            // first entry after it.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key);
                if c.valid() && compare_internal(&key, c.key()) == Ordering::Equal {
                    c.next();
                }
            }
            self.direction = Direction::Forward;
        }
        self.children[cur].next();
        self.find_smallest();
    }

    fn prev(&mut self) {
        let Some(cur) = self.current else { return };
        if self.direction != Direction::Reverse {
            // Every other child is positioned after key(); move them to the
            // last entry before it.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i == cur {
                    continue;
                }
                c.seek(&key);
                if c.valid() {
                    c.prev();
                } else {
                    c.seek_to_last();
                }
            }
            self.direction = Direction::Reverse;
        }
        self.children[cur].prev();
        self.find_largest();
    }

    fn key(&self) -> &[u8] {
        self.children[self.current.expect("valid iterator")].key()
    }

    fn value(&self) -> &[u8] {
        self.children[self.current.expect("valid iterator")].value()
    }

    fn status(&self) -> Result<()> {
        for c in &self.children {
            c.status()?;
        }
        Ok(())
    }
}

/// An iterator over a sorted in-memory vector; used by tests and as the
/// shape every bidirectional child follows.
#[cfg(test)]
pub struct VecIterator {
    entries: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
}

#[cfg(test)]
impl VecIterator {
    pub fn new(mut entries: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        entries.sort_by(|a, b| compare_internal(&a.0, &b.0));
        let pos = entries.len();
        VecIterator { entries, pos }
    }
}

#[cfg(test)]
impl InternalIterator for VecIterator {
    fn valid(&self) -> bool {
        self.pos < self.entries.len()
    }
    fn seek_to_first(&mut self) {
        self.pos = 0;
    }
    fn seek_to_last(&mut self) {
        self.pos = self
            .entries
            .len()
            .checked_sub(1)
            .unwrap_or(self.entries.len());
    }
    fn seek(&mut self, target: &[u8]) {
        self.pos = self
            .entries
            .partition_point(|e| compare_internal(&e.0, target) == Ordering::Less);
    }
    fn next(&mut self) {
        self.pos += 1;
    }
    fn prev(&mut self) {
        self.pos = self.pos.checked_sub(1).unwrap_or(self.entries.len());
    }
    fn key(&self) -> &[u8] {
        &self.entries[self.pos].0
    }
    fn value(&self) -> &[u8] {
        &self.entries[self.pos].1
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
    fn merges_both_ways_and_switches_direction() {
        let k = |u: &str, s: u64| (internal_key(u.as_bytes(), s, 1), u.as_bytes().to_vec());
        let a = VecIterator::new(vec![k("a", 1), k("c", 1), k("e", 1)]);
        let b = VecIterator::new(vec![k("b", 1), k("c", 2), k("d", 1)]);
        let mut m = MergingIterator::new(vec![Box::new(a), Box::new(b)]);
        m.seek_to_first();
        let mut fwd = Vec::new();
        while m.valid() {
            fwd.push(m.key().to_vec());
            m.next();
        }
        assert_eq!(fwd.len(), 6);
        m.seek_to_last();
        let mut back = Vec::new();
        while m.valid() {
            back.push(m.key().to_vec());
            m.prev();
        }
        back.reverse();
        assert_eq!(fwd, back);
        // Zig-zag.
        m.seek(&internal_key(b"c", u64::MAX >> 8, 0xff));
        assert_eq!(m.key(), &internal_key(b"c", 2, 1)[..]);
        m.next();
        assert_eq!(m.key(), &internal_key(b"c", 1, 1)[..]);
        m.prev();
        assert_eq!(m.key(), &internal_key(b"c", 2, 1)[..]);
        m.prev();
        assert_eq!(m.key(), &internal_key(b"b", 1, 1)[..]);
        m.next();
        assert_eq!(m.key(), &internal_key(b"c", 2, 1)[..]);
    }
}
