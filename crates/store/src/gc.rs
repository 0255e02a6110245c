//! Value-log garbage collection. Only files wholly behind the replay
//! pointer are candidates (everything in them is already in tables). In
//! such a file only value frames can still be needed: its commit frames
//! (inline values, deletions, pointers) are all copied into tables, so they
//! are garbage. A value frame is live when the newest entry for its key
//! still points at it. If at most `1 - vlog_gc_discard_ratio` of the file's
//! bytes are live value frames, the live values are appended again at the
//! head (new sequence numbers, under the log lock so no user write
//! interleaves), and the file is dropped from the manifest. It is deleted
//! once no snapshot older than the rewrite remains; a file that never held
//! a value frame is deleted at once (no reader can need it).
//!
//! What this process knows of each file ([`LogUsage`]: the value frames it
//! appended, the live bytes a scan found, the pointers compaction dropped)
//! bounds its live bytes without reading it: a file with no value frame is
//! dropped as soon as the replay pointer passes it, and one whose bound
//! shows it qualifies is collected then too ([`Scope::Known`]). Other files
//! are read by the periodic pass and [`crate::Store::gc_value_log`]
//! ([`Scope::All`]).

use crate::codec::BlockKind;
use crate::db::DbInner;
use crate::error::{Error, IoContext, Result};
use crate::format::{vlog_path, FileKind, LogPosition, ValuePointer, ValueType, HEADER_LEN};
use crate::log_reader::{open_log_file, LogReader};
use crate::log_writer::FRAME_HEADER_LEN;
use crate::version::{Version, VersionEdit};
use crate::write_batch::{decode_commit, WriteBatch};

use std::collections::HashMap;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcReport {
    /// Files read to find their live values.
    pub files_scanned: u64,
    /// Files dropped (their live values, if any, rewritten first).
    pub files_dropped: u64,
    /// Bytes of the dropped files.
    pub bytes_dropped: u64,
    pub values_rewritten: u64,
    pub bytes_rewritten: u64,
}

/// Which files a pass considers (all of them behind the replay pointer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scope {
    /// Every file, read unless this process knows it holds no value frame;
    /// collected when at least `discard_ratio` of it is garbage.
    All { discard_ratio: f64 },
    /// No file read unless [`LogUsage`] shows it qualifies: one known to
    /// hold no value frame is dropped, and with `rewrite`, one whose live
    /// bytes are bounded by `1 - discard_ratio` of it is collected. Cheap
    /// enough to run after every flush and compaction.
    Known { rewrite: bool, discard_ratio: f64 },
}

/// What this process knows of value-log files' value frames, so that GC
/// reads only files worth collecting. Byte counts are of whole frames
/// (header and sealed block).
#[derive(Debug, Default)]
pub(crate) struct LogUsage {
    /// An upper bound on each listed file's live value bytes, as of when
    /// it was set: for a file this process created, every value frame
    /// appended (0: it holds none, which no later event changes); for a
    /// file a GC pass read and kept, the live bytes it found. Files not
    /// listed are unknown (bounded by their size).
    values: HashMap<u64, u64>,
    /// Bytes of value frames whose entries compaction dropped (shadowed
    /// for every reader) since `values` was set.
    dead: HashMap<u64, u64>,
}

impl LogUsage {
    pub fn created(&mut self, n: u64) {
        self.values.insert(n, 0);
    }

    pub fn appended(&mut self, n: u64, bytes: u64) {
        if let Some(v) = self.values.get_mut(&n) {
            *v += bytes;
        }
    }

    pub fn died(&mut self, n: u64, bytes: u64) {
        *self.dead.entry(n).or_default() += bytes;
    }

    /// Whether file `n` is known to hold no value frame at all.
    pub fn has_no_values(&self, n: u64) -> bool {
        self.values.get(&n) == Some(&0)
    }

    /// At most how many of the `frame_bytes` of file `n` are live.
    fn live_bound(&self, n: u64, frame_bytes: u64) -> u64 {
        let values = self.values.get(&n).copied().unwrap_or(frame_bytes);
        values.saturating_sub(self.dead.get(&n).copied().unwrap_or(0))
    }

    /// A pass read file `n`, found `live` (> 0) bytes live, and kept it.
    fn scanned(&mut self, n: u64, live: u64) {
        self.values.insert(n, live);
        self.dead.remove(&n);
    }

    pub fn forget(&mut self, n: u64) {
        self.values.remove(&n);
        self.dead.remove(&n);
    }

    /// Drops what is known of files `v` no longer lists (a compaction may
    /// report values dead in a file already dropped). Files newer than the
    /// head may be being created and are kept.
    fn prune(&mut self, v: &Version) {
        let head = v.head_log().unwrap_or(0);
        let gone = |n: &u64| *n < head && !v.logs.contains_key(n);
        self.values.retain(|n, _| !gone(n));
        self.dead.retain(|n, _| !gone(n));
    }
}

struct Candidate {
    key: Vec<u8>,
    seq: u64,
    ptr: ValuePointer,
}

/// Runs one GC pass over the files `scope` names. With `wait` false (the
/// background thread), a file is skipped rather than wait for the log
/// lock: a writer holding it may be waiting for this very thread to flush.
pub(crate) fn collect(inner: &DbInner, wait: bool, scope: Scope) -> Result<GcReport> {
    let mut report = GcReport::default();
    let version = inner.current();
    let files: Vec<_> = version
        .logs
        .values()
        .filter(|l| l.number < version.replay.file)
        .copied()
        .collect();
    inner.log_usage().prune(&version);
    let discard_ratio = match scope {
        Scope::All { discard_ratio } => discard_ratio,
        Scope::Known { discard_ratio, .. } => discard_ratio,
    };
    for meta in files {
        // Files behind the replay pointer are sealed; their frames are
        // everything after the header.
        let frame_bytes = meta
            .sealed
            .map(|(size, _)| size.saturating_sub(HEADER_LEN as u64));
        let (no_values, live_bound) = {
            let usage = inner.log_usage();
            let n = meta.number;
            let bound = frame_bytes.map(|size| usage.live_bound(n, size));
            (usage.has_no_values(n), bound)
        };
        match (scope, no_values, frame_bytes, live_bound) {
            (_, true, Some(size), _) => {
                rewrite_and_drop(inner, meta.number, size, None, wait, &mut report)?;
                continue;
            }
            (Scope::Known { rewrite: true, .. }, _, Some(size), Some(live))
                if live as f64 <= (1.0 - discard_ratio) * size as f64 => {}
            (Scope::Known { .. }, ..) => continue,
            (Scope::All { .. }, ..) => {}
        }
        report.files_scanned += 1;
        let (pointers, total) = match scan(inner, meta.number, meta.sealed.map(|s| s.0)) {
            Ok(found) => found,
            // Another pass (background GC next to an explicit one) dropped
            // and deleted the file since the snapshot above.
            Err(_) if !inner.has_log(meta.number) => continue,
            Err(e) => return Err(e),
        };
        let has_values = !pointers.is_empty();
        let live = live_values(inner, pointers)?;
        let live_bytes: u64 = live
            .iter()
            .map(|c| FRAME_HEADER_LEN as u64 + u64::from(c.ptr.frame.len))
            .sum();
        let keep_limit = (1.0 - discard_ratio) * total as f64;
        if live_bytes > 0 && live_bytes as f64 > keep_limit {
            // Kept: remember what was found, so that the file is read
            // again only once enough more of it has died.
            inner.log_usage().scanned(meta.number, live_bytes);
            continue;
        }
        let live = has_values.then_some(live);
        rewrite_and_drop(inner, meta.number, total, live, wait, &mut report)?;
    }
    inner.delete_obsolete_files();
    Ok(report)
}

/// Every value pointer the file's commit records hold, and the bytes of
/// all its frames (headers included): what dropping it frees.
fn scan(inner: &DbInner, n: u64, sealed: Option<u64>) -> Result<(Vec<Candidate>, u64)> {
    let path = vlog_path(&inner.dir, n);
    let file = open_log_file(&*inner.fs, &path, FileKind::ValueLog, n, &*inner.vlog_codec)?;
    let end = match sealed {
        Some(s) => s,
        None => file
            .len()
            .ctx(|| format!("reading size of {}", path.display()))?,
    };
    let start = LogPosition {
        file: n,
        offset: HEADER_LEN as u64,
        block: 0,
    };
    let mut reader = LogReader::new(file, &path, start, end, inner.vlog_codec.clone());
    let mut out = Vec::new();
    let mut total = 0u64;
    loop {
        let frame = match reader.next()? {
            Ok(None) => break,
            Ok(Some(f)) => f,
            Err(bad) => {
                return Err(Error::corruption(
                    &path,
                    format!("block {} at offset {}", bad.block, bad.offset),
                    bad.reason,
                ))
            }
        };
        total += FRAME_HEADER_LEN as u64 + u64::from(frame.handle.len);
        match frame.kind {
            BlockKind::LogValue => {}
            BlockKind::LogCommit => {
                let recs = decode_commit(&frame.payload).ok_or_else(|| {
                    Error::corruption(
                        &path,
                        format!(
                            "block {} at offset {}",
                            frame.handle.block, frame.handle.offset
                        ),
                        "malformed commit record",
                    )
                })?;
                for r in recs {
                    if let Some(h) = r.frame {
                        out.push(Candidate {
                            key: r.key.to_vec(),
                            seq: r.seq,
                            ptr: ValuePointer { file: n, frame: h },
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok((out, total))
}

fn is_live(inner: &DbInner, c: &Candidate) -> Result<bool> {
    let seq = inner.visible_seq();
    Ok(inner.get_entry(&c.key, seq)?.is_some_and(|f| {
        f.seq == c.seq && f.value_type == ValueType::Pointer && f.value == c.ptr.encode()
    }))
}

fn live_values(inner: &DbInner, all: Vec<Candidate>) -> Result<Vec<Candidate>> {
    let mut live = Vec::new();
    for c in all {
        if is_live(inner, &c)? {
            live.push(c);
        }
    }
    Ok(live)
}

/// Rewrites the `live` values of file `n` (`bytes` of frames) at the head
/// and drops the file. `live` None: the file holds no value frame, so no
/// reader can need it and it is deleted at once.
fn rewrite_and_drop(
    inner: &DbInner,
    n: u64,
    bytes: u64,
    live: Option<Vec<Candidate>>,
    wait: bool,
    report: &mut GcReport,
) -> Result<()> {
    const CHUNK_BYTES: usize = 4 << 20;
    let mut guard = match wait {
        true => inner.lock_log(),
        false => match inner.try_lock_log() {
            Some(g) => g,
            None => return Ok(()),
        },
    };
    let Some(log) = guard.as_mut() else {
        return Err(Error::Closed("store is closed".into()));
    };
    {
        let st = inner.lock_state();
        if let Some(e) = &st.bg_error {
            return Err(Error::Closed(e.to_string()));
        }
        if !st.current.logs.contains_key(&n) {
            return Ok(()); // another pass dropped it meanwhile
        }
    }
    let has_values = live.is_some();
    let mut batch = WriteBatch::new();
    for c in live.into_iter().flatten() {
        // Holding the log lock, no write can slip in between check and copy.
        if !is_live(inner, &c)? {
            continue;
        }
        let value = inner.vlog.read(&c.ptr, &c.key)?;
        report.values_rewritten += 1;
        report.bytes_rewritten += value.len() as u64;
        batch.put(&c.key, &value);
        if batch.approximate_bytes() >= CHUNK_BYTES {
            inner.append_batches(log, &[&batch], true)?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        inner.append_batches(log, &[&batch], true)?;
    }
    inner.log_and_apply(VersionEdit {
        deleted_logs: vec![n],
        ..Default::default()
    })?;
    inner.log_usage().forget(n);
    // A reader at an older snapshot may still follow a pointer into the
    // file; with no value frame in it, none can.
    let from_seq = match has_values {
        true => inner.visible_seq(),
        false => 0,
    };
    inner.retire_log(n, from_seq);
    report.files_dropped += 1;
    report.bytes_dropped += HEADER_LEN as u64 + bytes;
    Ok(())
}
