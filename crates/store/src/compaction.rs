//! Leveled compaction, as LevelDB's. Level 0 holds flushed tables, which
//! may overlap; each deeper level is one sorted run of non-overlapping
//! tables, `level_size_multiplier` times larger than the level above. A
//! compaction merges the chosen tables with the overlapping ones one level
//! down, keeping only what a live snapshot can still see, so each byte is
//! rewritten about `multiplier` times per level: bounded write
//! amplification (docs/format.md works it out).

use std::sync::Arc;

use crate::codec::KeyPin;
use crate::db::DbInner;
use crate::error::{Error, IoContext, Result};
use crate::format::{parse_internal_key, table_path, ValuePointer, ValueType};
use crate::iterator::{InternalIterator, MergingIterator};
use crate::log_writer::FRAME_HEADER_LEN;
use crate::table_builder::{TableBuilder, TableOptions};
use crate::table_reader::TableIterator;
use crate::version::{FileMeta, Version, VersionEdit, NUM_LEVELS};

pub struct Compaction {
    /// Inputs come from `level` and `level + 1`; outputs go to `level + 1`.
    pub level: usize,
    pub inputs: [Vec<Arc<FileMeta>>; 2],
}

/// The size limit of `level` (1 or deeper) in version `v`.
///
/// At most `level1_max_bytes × multiplier^(level−1)`; and a level above
/// the deepest one that holds data may hold at most `multiplier^k` times
/// less than that deepest level (k levels down). Without the second
/// limit a store smaller than the static sizes (say 65 MB: level 1 up to
/// 32 MB over 33 MB in level 2) can hold a whole second copy of its data
/// in the upper levels after an overwrite; with it, the levels above the
/// deepest hold at most about 1/(multiplier−1) of it, which bounds space
/// amplification (docs/format.md §9).
pub fn max_bytes_for_level(inner: &DbInner, v: &Version, level: usize) -> u64 {
    let mult = inner.opts.level_size_multiplier;
    let mut b = inner.opts.level1_max_bytes;
    for _ in 1..level {
        b = b.saturating_mul(mult);
    }
    if let Some(deepest) = (level + 1..NUM_LEVELS)
        .rev()
        .find(|&l| !v.levels[l].is_empty())
    {
        let mut dynamic = v.level_bytes(deepest);
        for _ in level..deepest {
            dynamic /= mult;
        }
        b = b.min(dynamic.max(1));
    }
    b
}

/// The level most in need of compaction, with its score (>= 1 means due).
fn best_level(inner: &DbInner, v: &Version) -> (usize, f64) {
    let mut best = (
        0,
        v.levels[0].len() as f64 / inner.opts.l0_compaction_trigger as f64,
    );
    for level in 1..NUM_LEVELS - 1 {
        let score = v.level_bytes(level) as f64 / max_bytes_for_level(inner, v, level) as f64;
        if score > best.1 {
            best = (level, score);
        }
    }
    best
}

pub fn needs_compaction(inner: &DbInner, v: &Version) -> bool {
    best_level(inner, v).1 >= 1.0
}

pub(crate) fn key_range(files: &[Arc<FileMeta>]) -> (Vec<u8>, Vec<u8>) {
    let lo = files
        .iter()
        .map(|f| f.smallest_user())
        .min()
        .unwrap_or_default();
    let hi = files
        .iter()
        .map(|f| f.largest_user())
        .max()
        .unwrap_or_default();
    (lo.to_vec(), hi.to_vec())
}

pub fn pick(inner: &DbInner, v: &Version, compact_pointer: &[Vec<u8>]) -> Option<Compaction> {
    let (level, score) = best_level(inner, v);
    if score < 1.0 {
        return None;
    }
    pick_at(v, level, compact_pointer)
}

/// A compaction of `level` into the next: all of level 0, or the next
/// table of a deeper level (round robin), with what it overlaps below.
fn pick_at(v: &Version, level: usize, compact_pointer: &[Vec<u8>]) -> Option<Compaction> {
    let first = if level == 0 {
        v.levels[0].clone()
    } else {
        // Round-robin through the level's key space.
        let files = &v.levels[level];
        let f = files
            .iter()
            .find(|f| {
                compact_pointer[level].is_empty() || f.largest_user() > &compact_pointer[level][..]
            })
            .or(files.first())?;
        vec![f.clone()]
    };
    let (lo, hi) = key_range(&first);
    let below = v.overlapping(level + 1, Some(&lo), Some(&hi));
    Some(Compaction {
        level,
        inputs: [first, below],
    })
}

/// Builds tables from entries already in internal-key order.
pub struct OutputWriter<'a> {
    inner: &'a DbInner,
    builder: Option<TableBuilder>,
    outputs: Outputs,
}

/// Tables written and not yet installed, with the data keys they are
/// sealed under: the caller keeps `keys` until the edit that adds `files`
/// is applied, so that no re-encryption pass retires a key meanwhile.
#[derive(Default)]
pub struct Outputs {
    pub files: Vec<FileMeta>,
    pub keys: Vec<KeyPin>,
}

impl<'a> OutputWriter<'a> {
    pub fn new(inner: &'a DbInner) -> Self {
        OutputWriter {
            inner,
            builder: None,
            outputs: Outputs::default(),
        }
    }

    pub fn add(&mut self, ikey: &[u8], value: &[u8]) {
        let opts = &self.inner.opts;
        self.builder
            .get_or_insert_with(|| {
                TableBuilder::new(TableOptions {
                    block_size: opts.block_size,
                    restart_interval: opts.block_restart_interval,
                    bloom_bits_per_key: opts.bloom_bits_per_key,
                })
            })
            .add(ikey, value);
    }

    /// Whether the current table is full; callers cut only between user keys.
    pub fn is_full(&self) -> bool {
        self.builder
            .as_ref()
            .is_some_and(|b| b.estimated_size() as u64 >= self.inner.opts.table_file_size)
    }

    /// Seals the current table (all its blocks as one batch) and writes it.
    pub fn finish_table(&mut self) -> Result<()> {
        let Some(b) = self.builder.take() else {
            return Ok(());
        };
        if b.is_empty() {
            return Ok(());
        }
        let number = self.inner.new_file_number();
        let path = table_path(&self.inner.dir, number);
        let built = b
            .finish(number, &*self.inner.codec)
            .map_err(|e| Error::Seal(format!("{}: {e}", path.display())))?;
        let mut f = self
            .inner
            .fs
            .create(&path)
            .ctx(|| format!("creating table {}", path.display()))?;
        f.append(&built.bytes)
            .and_then(|_| f.sync())
            .ctx(|| format!("writing table {}", path.display()))?;
        self.outputs.files.push(FileMeta {
            number,
            size: built.bytes.len() as u64,
            smallest: built.smallest,
            largest: built.largest,
        });
        self.outputs.keys.push(built.key);
        Ok(())
    }

    /// Finishes the last table and makes the new directory entries durable.
    ///
    /// After a failure, tables already written stay on disk until the next
    /// open removes them: their numbers are then above the counter the new
    /// manifest records, so no file number (half of a block nonce) is ever
    /// used twice.
    pub fn finish(mut self) -> Result<Outputs> {
        self.finish_table()?;
        self.inner
            .fs
            .sync_dir(&self.inner.dir)
            .ctx(|| format!("syncing directory {}", self.inner.dir.display()))?;
        Ok(std::mem::take(&mut self.outputs))
    }
}

/// Runs one compaction; the caller holds the compaction lock.
pub fn run(inner: &DbInner, c: &Compaction) -> Result<()> {
    let version = inner.current();
    let out_level = c.level + 1;
    let mut edit = VersionEdit::default();
    for (i, files) in c.inputs.iter().enumerate() {
        for f in files {
            edit.deleted_tables.push((c.level + i, f.number));
        }
    }
    if c.level > 0 && c.inputs[0].len() == 1 && c.inputs[1].is_empty() {
        // Nothing to merge with: move the table down without rewriting it.
        edit.added_tables
            .push((out_level, (*c.inputs[0][0]).clone()));
        inner.log_and_apply(edit)?;
        remember_pointer(inner, c);
        return Ok(());
    }

    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    for f in c.inputs.iter().flatten() {
        children.push(Box::new(TableIterator::new(inner.tables.get(f)?)));
    }
    let mut iter = MergingIterator::new(children);
    let smallest_snapshot = inner.smallest_snapshot();

    let mut out = OutputWriter::new(inner);
    let mut current_user: Option<Vec<u8>> = None;
    let mut last_seq_for_key = u64::MAX;
    // Value frames whose pointers are dropped: dead for every reader, GC's
    // hint once the edit is in.
    let mut dead_values: Vec<(u64, u64)> = Vec::new();
    iter.seek_to_first();
    let result = (|| -> Result<()> {
        while iter.valid() {
            let key = iter.key();
            let Some(p) = parse_internal_key(key) else {
                return Err(Error::corruption(
                    &inner.dir,
                    "compaction input",
                    "malformed internal key",
                ));
            };
            let new_key = current_user.as_deref() != Some(p.user_key);
            if new_key {
                if out.is_full() {
                    out.finish_table()?;
                }
                current_user = Some(p.user_key.to_vec());
                last_seq_for_key = u64::MAX;
            }
            // A newer entry visible to every snapshot hides this one; a
            // deletion that every snapshot sees, with nothing older below
            // the output level, has nothing left to hide.
            let drop = last_seq_for_key <= smallest_snapshot
                || (p.value_type == ValueType::Deletion
                    && p.seq <= smallest_snapshot
                    && is_base_level_for_key(&version, out_level, p.user_key));
            last_seq_for_key = p.seq;
            if !drop {
                out.add(key, iter.value());
            } else if p.value_type == ValueType::Pointer {
                if let Some(ptr) = ValuePointer::decode(iter.value()) {
                    let bytes = FRAME_HEADER_LEN as u64 + u64::from(ptr.frame.len);
                    dead_values.push((ptr.file, bytes));
                }
            }
            iter.next();
        }
        iter.status()
    })();
    result?; // partial outputs stay for the next open to remove
    let outputs = out.finish()?;
    for f in &outputs.files {
        edit.added_tables.push((out_level, f.clone()));
    }
    inner.log_and_apply(edit)?;
    drop(outputs.keys); // the tables are in the version now
    {
        let mut usage = inner.log_usage();
        for (file, bytes) in dead_values {
            usage.died(file, bytes);
        }
    }
    inner.retire_tables(c.inputs.iter().flatten().map(|f| f.number));
    remember_pointer(inner, c);
    inner.delete_obsolete_files();
    Ok(())
}

fn remember_pointer(inner: &DbInner, c: &Compaction) {
    if c.level > 0 {
        let (_, hi) = key_range(&c.inputs[0]);
        inner.set_compact_pointer(c.level, hi);
    }
}

/// No level below `out_level` may hold an older version of the key.
fn is_base_level_for_key(v: &Version, out_level: usize, key: &[u8]) -> bool {
    v.levels[out_level + 1..]
        .iter()
        .all(|files| files.iter().all(|f| !f.overlaps(Some(key), Some(key))))
}

/// Runs the compaction most due, if any is; false when none is.
pub fn compact_once(inner: &DbInner) -> Result<bool> {
    let _guard = inner.lock_compaction();
    let c = {
        let st = inner.lock_state();
        if let Some(e) = &st.bg_error {
            return Err(e.clone());
        }
        pick(inner, &st.current, &st.compact_pointer)
    };
    match c {
        Some(c) => run(inner, &c).map(|()| true),
        None => Ok(false),
    }
}

/// Runs compactions until none is due: level 0 below
/// `l0_compaction_trigger`, every deeper level within its size. What an
/// open that finds level 0 over its trigger does, since short-lived
/// processes' background threads may never catch up.
pub fn settle(inner: &DbInner) -> Result<()> {
    while compact_once(inner)? {}
    Ok(())
}

/// Level 0 may hold at most this fraction of the bytes below it when a
/// store closes.
const L0_SHARE_AT_CLOSE: f64 = 0.1;

/// What `Store::close` runs: [`settle`], and then, if level 0 holds more
/// than a tenth of the bytes below it, compacts it too. Level 0 holds up to
/// `l0_compaction_trigger − 1` memtables, which in a small store may all be
/// overwrites of data below (space amplification); a large store's level 0
/// is a small share and is left to the trigger.
pub fn settle_for_close(inner: &DbInner) -> Result<()> {
    settle(inner)?;
    let guard = inner.lock_compaction();
    let c = {
        let st = inner.lock_state();
        if let Some(e) = &st.bg_error {
            return Err(e.clone());
        }
        let v = &st.current;
        let below: u64 = (1..NUM_LEVELS).map(|l| v.level_bytes(l)).sum();
        let l0 = v.level_bytes(0);
        if l0 == 0 || (l0 as f64) <= L0_SHARE_AT_CLOSE * below as f64 {
            return Ok(());
        }
        pick_at(v, 0, &st.compact_pointer)
    };
    if let Some(c) = c {
        run(inner, &c)?;
    }
    drop(guard);
    settle(inner)
}

/// Manual compaction of [lo, hi] through every level holding data there.
pub fn compact_range(inner: &Arc<DbInner>, lo: Option<&[u8]>, hi: Option<&[u8]>) -> Result<()> {
    let _guard = inner.lock_compaction();
    let deepest = {
        let v = inner.current();
        (0..NUM_LEVELS)
            .rev()
            .find(|&l| !v.overlapping(l, lo, hi).is_empty())
    };
    let Some(deepest) = deepest else {
        return Ok(());
    };
    for level in 0..deepest.max(1) {
        let v = inner.current();
        let first = v.overlapping(level, lo, hi);
        if first.is_empty() {
            continue;
        }
        let first = if level == 0 {
            v.levels[0].clone()
        } else {
            first
        };
        let (klo, khi) = key_range(&first);
        let below = v.overlapping(level + 1, Some(&klo), Some(&khi));
        run(
            inner,
            &Compaction {
                level,
                inputs: [first, below],
            },
        )?;
    }
    Ok(())
}
