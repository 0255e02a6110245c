//! User-facing iteration: merges memtables and tables, hides entries newer
//! than the read's sequence number, collapses versions of one key to the
//! newest, skips deletions, and resolves value pointers. The cursor logic
//! follows LevelDB's DBIter, both directions included.

use std::sync::Arc;

use crate::db::{DbInner, ReadOptions, SeqGuard};
use crate::error::Result;
use crate::format::{internal_key, parse_internal_key, user_key, ValueType, TYPE_FOR_SEEK};
use crate::iterator::{InternalIterator, MergingIterator};
use crate::level_iterator::LevelIterator;
use crate::lock_order::{Rank, RankedMutex};
use crate::memtable::{MemTable, MemTableIterator};
use crate::pinned::{Pinned, PinnedValue};
use crate::read_ahead::{ReadAhead, ScoutSource};
use crate::table_reader::TableIterator;
use crate::version::Version;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Forward,
    Reverse,
}

/// A cursor over user keys at one sequence number.
pub struct DbIterator {
    inner: Arc<DbInner>,
    iter: MergingIterator,
    guard: SeqGuard,
    _version: Arc<Version>,
    direction: Direction,
    valid: bool,
    /// Reverse: the current key and its stored value and type.
    saved_key: Vec<u8>,
    saved_value: Vec<u8>,
    saved_type: ValueType,
    error: Option<crate::error::Error>,
    /// What the scout of the read-ahead iterates: the pinned memtables.
    mems: Vec<Arc<MemTable>>,
    /// Forward read-ahead of value-log values; only where opening spreads
    /// over cores (an encrypted store).
    /// The read-ahead, and how many cursors may read ahead at once.
    ahead: Option<(RankedMutex<ReadAhead>, usize)>,
    /// Counts this cursor among those that would read ahead.
    _scanning: Option<Scanning>,
}

impl DbIterator {
    pub(crate) fn new(inner: &Arc<DbInner>, opts: &ReadOptions<'_>) -> Result<DbIterator> {
        let guard = inner.pin_seq(opts.snapshot.map(|s| s.seq));
        let (mem, imms, version) = {
            let st = inner.lock_state();
            let imms: Vec<_> = st.imm.iter().map(|i| i.mem.clone()).collect();
            (st.mem.clone(), imms, st.current.clone())
        };
        let mut mems = vec![mem];
        mems.extend(imms);
        let iter = merging(inner, &mems, &version)?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let wanted = inner
            .opts
            .read_ahead
            .unwrap_or(cores >= crate::options::READ_AHEAD_MIN_CORES);
        // Read-ahead asked for explicitly has no limit.
        let places = match inner.opts.read_ahead {
            None => (cores / crate::options::CORES_PER_READ_AHEAD).max(1),
            Some(_) => usize::MAX,
        };
        // Read-ahead opens value-log frames: none in an index-only store.
        let scans = wanted && inner.vlog_codec.opens_in_parallel();
        let scanning = scans.then(|| Scanning::count(inner));
        let ahead = scans.then(|| (RankedMutex::new(Rank::ReadAhead, ReadAhead::new()), places));
        Ok(DbIterator {
            inner: inner.clone(),
            iter,
            guard,
            _version: version,
            direction: Direction::Forward,
            valid: false,
            saved_key: Vec::new(),
            saved_value: Vec::new(),
            saved_type: ValueType::Deletion,
            error: None,
            mems,
            ahead,
            _scanning: scanning,
        })
    }

    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The first error met while moving, if any; an iterator that stops
    /// early because of damage says so here.
    pub fn status(&self) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        self.iter.status()
    }

    pub fn key(&self) -> &[u8] {
        match self.direction {
            Direction::Forward => user_key(self.iter.key()),
            Direction::Reverse => &self.saved_key,
        }
    }

    /// The current value, read from the value log if it lives there.
    pub fn value(&self) -> Result<Vec<u8>> {
        let (t, stored) = match self.direction {
            Direction::Forward => {
                let t = parse_internal_key(self.iter.key()).map(|p| p.value_type);
                (t.unwrap_or(ValueType::Deletion), self.iter.value())
            }
            Direction::Reverse => (self.saved_type, &self.saved_value[..]),
        };
        if let (Direction::Forward, ValueType::Pointer, Some((ahead, places))) =
            (self.direction, t, &self.ahead)
        {
            let mut ahead = ahead.lock();
            if self.inner.scanning_cursors() > *places {
                // More cursors scan than the cores can feed workers for:
                // stop this one's worker and read inline until they leave.
                ahead.reset();
            } else if let Some(v) =
                ahead.value(&self.inner, self.guard.seq, self.iter.key(), stored, || {
                    self.scout_source()
                })
            {
                return v;
            }
        }
        self.inner.resolve(self.key(), t, stored)
    }

    /// [`Self::value`] without a copy where the value is cached (a
    /// value-log value the block cache holds opened); other values come as
    /// owned copies.
    pub fn value_pinned(&self) -> Result<PinnedValue> {
        if self.direction == Direction::Forward
            && parse_internal_key(self.iter.key()).map(|p| p.value_type) == Some(ValueType::Pointer)
        {
            if let Some(v) = self.inner.cached_value(self.key(), self.iter.value())? {
                return Ok(v);
            }
        }
        self.value().map(|v| PinnedValue::new(Pinned::Owned(v)))
    }

    /// Values this cursor took from read-ahead batches rather than reading
    /// them itself (0 where read-ahead is off).
    #[doc(hidden)]
    pub fn read_ahead_hits(&self) -> u64 {
        self.ahead.as_ref().map_or(0, |(a, _)| a.lock().hits())
    }

    /// What the read-ahead worker builds its own cursor from.
    fn scout_source(&self) -> ScoutSource {
        let (inner, mems, version) = (self.inner.clone(), self.mems.clone(), self._version.clone());
        Box::new(move || merging(&inner, &mems, &version))
    }

    /// Read ahead no more (the cursor jumped or turned).
    fn reset_ahead(&mut self) {
        if let Some((a, _)) = &self.ahead {
            a.lock().reset();
        }
    }

    pub fn seek_to_first(&mut self) {
        self.reset_ahead();
        self.direction = Direction::Forward;
        self.iter.seek_to_first();
        self.find_next_user_entry(false);
    }

    pub fn seek_to_last(&mut self) {
        self.reset_ahead();
        self.direction = Direction::Reverse;
        self.iter.seek_to_last();
        self.find_prev_user_entry();
    }

    /// Positions at the first key >= `target`.
    pub fn seek(&mut self, target: &[u8]) {
        self.reset_ahead();
        self.direction = Direction::Forward;
        self.iter
            .seek(&internal_key(target, self.guard.seq, TYPE_FOR_SEEK));
        self.find_next_user_entry(false);
    }

    /// Positions at the last key < `target`.
    pub fn seek_before(&mut self, target: &[u8]) {
        self.seek(target);
        if self.valid {
            self.prev();
        } else if self.status().is_ok() {
            self.seek_to_last();
        }
    }

    pub fn next(&mut self) {
        if !self.valid {
            return;
        }
        if self.direction == Direction::Reverse {
            self.reset_ahead();
            // The merged iterator sits before this key's entries: step in.
            self.direction = Direction::Forward;
            if self.iter.valid() {
                self.iter.next();
            } else {
                self.iter.seek_to_first();
            }
            if !self.iter.valid() {
                self.valid = false;
                return;
            }
        } else {
            self.saved_key = user_key(self.iter.key()).to_vec();
            self.iter.next();
        }
        self.find_next_user_entry(true);
    }

    pub fn prev(&mut self) {
        self.reset_ahead();
        if !self.valid {
            return;
        }
        if self.direction == Direction::Forward {
            // Step back over every entry of the current key.
            self.saved_key = user_key(self.iter.key()).to_vec();
            loop {
                self.iter.prev();
                if !self.iter.valid() {
                    self.valid = false;
                    self.saved_key.clear();
                    return;
                }
                if user_key(self.iter.key()) < &self.saved_key[..] {
                    break;
                }
            }
            self.direction = Direction::Reverse;
        }
        self.find_prev_user_entry();
    }

    /// Forward: the first visible, undeleted entry from here; with
    /// `skipping`, entries of keys <= saved_key are hidden.
    fn find_next_user_entry(&mut self, mut skipping: bool) {
        while self.iter.valid() {
            match parse_internal_key(self.iter.key()) {
                None => {
                    self.fail("malformed internal key");
                    return;
                }
                Some(p) if p.seq <= self.guard.seq => match p.value_type {
                    ValueType::Deletion => {
                        self.saved_key = p.user_key.to_vec();
                        skipping = true;
                    }
                    _ => {
                        if !(skipping && p.user_key <= &self.saved_key[..]) {
                            self.valid = true;
                            self.saved_key.clear();
                            return;
                        }
                    }
                },
                Some(_) => {}
            }
            self.iter.next();
        }
        self.valid = false;
        self.saved_key.clear();
    }

    /// Reverse: walks back over the entries of one user key, keeping the
    /// newest visible one (which comes last in this direction).
    fn find_prev_user_entry(&mut self) {
        let mut value_type = ValueType::Deletion;
        while self.iter.valid() {
            let Some(p) = parse_internal_key(self.iter.key()) else {
                self.fail("malformed internal key");
                return;
            };
            if p.seq <= self.guard.seq {
                if value_type != ValueType::Deletion && p.user_key < &self.saved_key[..] {
                    break; // reached the previous key; saved entry stands
                }
                value_type = p.value_type;
                if value_type == ValueType::Deletion {
                    self.saved_key.clear();
                    self.saved_value.clear();
                } else {
                    self.saved_key = p.user_key.to_vec();
                    self.saved_value = self.iter.value().to_vec();
                    self.saved_type = value_type;
                }
            }
            self.iter.prev();
        }
        if self.iter.status().is_err() {
            // The walk stopped at damage, perhaps before a newer entry.
            self.valid = false;
            return;
        }
        if value_type == ValueType::Deletion {
            self.valid = false;
            self.saved_key.clear();
            self.saved_value.clear();
            self.direction = Direction::Forward;
        } else {
            self.valid = true;
        }
    }

    fn fail(&mut self, reason: &str) {
        self.valid = false;
        if self.error.is_none() {
            self.error = Some(crate::error::Error::corruption(
                &self.inner.dir,
                "iteration",
                reason,
            ));
        }
    }
}

/// A merged cursor over the pinned memtables and the tables of `version`.
fn merging(
    inner: &Arc<DbInner>,
    mems: &[Arc<MemTable>],
    version: &Version,
) -> Result<MergingIterator> {
    let mut children: Vec<Box<dyn InternalIterator>> = mems
        .iter()
        .map(|m| Box::new(MemTableIterator::new(m.clone())) as Box<dyn InternalIterator>)
        .collect();
    for f in &version.levels[0] {
        children.push(Box::new(TableIterator::new(inner.tables.get(f)?)));
    }
    for level in &version.levels[1..] {
        if !level.is_empty() {
            children.push(Box::new(LevelIterator::new(inner.clone(), level.clone())));
        }
    }
    Ok(MergingIterator::new(children))
}

/// A range scan as a Rust iterator: keys in [start, end), forward or
/// backward, each with its value.
pub struct Scan {
    cursor: DbIterator,
    start: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    reverse: bool,
    started: bool,
    done: bool,
}

impl Scan {
    pub(crate) fn new(
        cursor: DbIterator,
        start: Option<Vec<u8>>,
        end: Option<Vec<u8>>,
        reverse: bool,
    ) -> Self {
        Scan {
            cursor,
            start,
            end,
            reverse,
            started: false,
            done: false,
        }
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let c = &mut self.cursor;
        if !self.started {
            self.started = true;
            match (self.reverse, &self.start, &self.end) {
                (false, Some(s), _) => c.seek(s),
                (false, None, _) => c.seek_to_first(),
                (true, _, Some(e)) => c.seek_before(e),
                (true, _, None) => c.seek_to_last(),
            }
        } else if self.reverse {
            c.prev();
        } else {
            c.next();
        }
        if !c.valid() {
            self.done = true;
            return c.status().err().map(Err);
        }
        let k = c.key();
        let in_range = if self.reverse {
            self.start.as_deref().is_none_or(|s| k >= s)
        } else {
            self.end.as_deref().is_none_or(|e| k < e)
        };
        if !in_range {
            self.done = true;
            return None;
        }
        let key = k.to_vec();
        Some(match c.value() {
            Ok(v) => Ok((key, v)),
            Err(e) => {
                self.done = true;
                Err(e)
            }
        })
    }
}

/// A cursor that would read ahead, counted while it lives.
struct Scanning(Arc<DbInner>);

impl Scanning {
    fn count(inner: &Arc<DbInner>) -> Scanning {
        inner.count_scanning_cursor(true);
        Scanning(inner.clone())
    }
}

impl Drop for Scanning {
    fn drop(&mut self) {
        self.0.count_scanning_cursor(false);
    }
}
