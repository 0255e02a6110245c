//! Read-ahead of value-log values for a forward iteration of an encrypted
//! store. A second cursor (the scout) over the same pinned tables and
//! memtables walks ahead of the user's cursor and collects the value
//! pointers of the next entries; their frames are read and opened in one
//! batch, which the codec spreads over cores, instead of one frame at a
//! time on the iterating thread.
//!
//! Correctness does not rest on the window being in step with the cursor:
//! a window entry is found by its exact pointer bytes and user key, a
//! pointer names an immutable frame, and the frame is checked against the
//! key, so a hit returns exactly what a direct read would. Each entry keeps
//! its own result, so a damaged frame ahead fails only its own entry.

use std::collections::VecDeque;
use std::ops::Range;

use crate::db::DbInner;
use crate::error::Result;
use crate::format::{parse_internal_key, ValuePointer, ValueType};
use crate::iterator::{InternalIterator, MergingIterator};

/// Frame bytes of the first batch after a seek; each further batch
/// doubles up to `MAX_BATCH_BYTES`, so a short scan reads little ahead.
const FIRST_BATCH_BYTES: usize = 128 << 10;
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Values per batch at most (bounds the bookkeeping of tiny values).
const MAX_BATCH_VALUES: usize = 512;
/// Internal entries the scout looks at per batch at most (inline values,
/// deletions and hidden versions take no room in a batch).
const MAX_SCOUTED: usize = 4 * MAX_BATCH_VALUES;

/// Batches whose frames average less than this are not worth the scout:
/// it walks the tables a second time (~1 µs an entry on the development
/// host), more than a small value's decryption saves (4 KiB: ~0.7 µs).
const MIN_AVERAGE_FRAME_BYTES: usize = 16 << 10;
/// Entries read directly after a batch of small frames, before the next
/// batch looks again.
const SMALL_FRAMES_BACK_OFF: usize = 4096;

struct Ahead {
    /// The entry's stored value: the encoded pointer.
    pointer: Vec<u8>,
    user_key: Vec<u8>,
    /// Where the value lies in the batch buffer.
    value: Result<Range<usize>>,
}

pub(crate) struct ReadAhead {
    scout: Option<MergingIterator>,
    window: VecDeque<Ahead>,
    /// The frames of the current batch, opened; reused from batch to batch.
    buf: Vec<u8>,
    batch_bytes: usize,
    /// (pointer, user key) of the entry last handed out: asking for it again
    /// reads it directly instead of starting a batch at it.
    last: Option<(Vec<u8>, Vec<u8>)>,
    /// Entries still to read directly (after a batch of small frames).
    direct: usize,
}

impl ReadAhead {
    pub fn new() -> Self {
        ReadAhead {
            scout: None,
            window: VecDeque::new(),
            buf: Vec::new(),
            batch_bytes: FIRST_BATCH_BYTES,
            last: None,
            direct: 0,
        }
    }

    /// Drops what was read ahead (a seek, a step back, a change of
    /// direction): the next batch starts small again.
    pub fn reset(&mut self) {
        self.window.clear();
        self.batch_bytes = FIRST_BATCH_BYTES;
        self.last = None;
        self.direct = 0;
    }

    /// The value of the pointer entry under the user's cursor, whose
    /// internal key is `ikey`. `scout` builds the second cursor on first use.
    pub fn value(
        &mut self,
        inner: &DbInner,
        seq: u64,
        ikey: &[u8],
        user_key: &[u8],
        pointer: &[u8],
        scout: impl FnOnce() -> Result<MergingIterator>,
    ) -> Result<Vec<u8>> {
        if let Some(v) = self.take(user_key, pointer) {
            return v;
        }
        let again = self
            .last
            .as_ref()
            .is_some_and(|(p, k)| p == pointer && k == user_key);
        if self.direct > 0 && self.window.is_empty() {
            self.direct -= 1;
        } else if !again {
            if self.scout.is_none() {
                self.scout = Some(scout()?);
            }
            self.fill(inner, seq, ikey);
            if let Some(v) = self.take(user_key, pointer) {
                return v;
            }
        }
        inner.resolve(user_key, ValueType::Pointer, pointer)
    }

    /// Takes the window's entry for (key, pointer), dropping the entries
    /// before it (the cursor passed them, or they were hidden versions).
    fn take(&mut self, user_key: &[u8], pointer: &[u8]) -> Option<Result<Vec<u8>>> {
        let pos = self
            .window
            .iter()
            .position(|a| a.pointer == pointer && a.user_key == user_key)?;
        self.window.drain(..pos);
        let a = self.window.pop_front()?;
        self.last = Some((a.pointer, a.user_key));
        Some(a.value.map(|r| self.buf[r].to_vec()))
    }

    /// Reads a batch of values starting at the entry `ikey`.
    fn fill(&mut self, inner: &DbInner, seq: u64, ikey: &[u8]) {
        let Some(scout) = self.scout.as_mut() else {
            return;
        };
        if !(scout.valid() && scout.key() == ikey) {
            scout.seek(ikey);
        }
        let mut wanted: Vec<(ValuePointer, Vec<u8>, Vec<u8>)> = Vec::new();
        let (mut bytes, mut scouted) = (0usize, 0usize);
        // At least two values per batch, or a batch of one big value
        // would have nothing to spread over cores.
        while scout.valid()
            && scouted < MAX_SCOUTED
            && wanted.len() < MAX_BATCH_VALUES
            && (bytes < self.batch_bytes || wanted.len() < 2)
        {
            scouted += 1;
            if let Some(p) = parse_internal_key(scout.key()) {
                if p.seq <= seq && p.value_type == ValueType::Pointer {
                    // A malformed pointer is left to the cursor to report.
                    if let Some(ptr) = ValuePointer::decode(scout.value()) {
                        bytes += ptr.frame.len as usize;
                        wanted.push((ptr, scout.value().to_vec(), p.user_key.to_vec()));
                    }
                }
            }
            scout.next();
        }
        // The scout's own errors are not reported: the cursor meets the
        // same damage when it gets there.
        let requests: Vec<(ValuePointer, &[u8])> =
            wanted.iter().map(|(p, _, k)| (*p, &k[..])).collect();
        let values = inner.vlog.read_many(&requests, &mut self.buf);
        drop(requests);
        self.window.clear();
        for ((_, pointer, user_key), value) in wanted.into_iter().zip(values) {
            self.window.push_back(Ahead {
                pointer,
                user_key,
                value,
            });
        }
        self.batch_bytes = (self.batch_bytes * 2).min(MAX_BATCH_BYTES);
        if bytes < MIN_AVERAGE_FRAME_BYTES * self.window.len() {
            self.direct = SMALL_FRAMES_BACK_OFF;
        }
    }
}
