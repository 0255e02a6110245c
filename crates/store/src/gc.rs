//! Value-log garbage collection. Only files wholly behind the replay
//! pointer are candidates (everything in them is already in tables). A
//! value in such a file is live when the newest entry for its key still
//! points at it; if enough of a file is garbage, its live values are
//! appended again at the head (new sequence numbers, under the log lock so
//! no user write interleaves), and the file is dropped from the manifest.
//! It is deleted once no snapshot older than the rewrite remains.

use std::sync::atomic::Ordering;

use crate::codec::BlockKind;
use crate::db::DbInner;
use crate::error::{Error, IoContext, Result};
use crate::format::{vlog_path, FileKind, LogPosition, ValuePointer, ValueType, HEADER_LEN};
use crate::log_reader::{open_log_file, LogReader};
use crate::version::VersionEdit;
use crate::write_batch::{decode_commit, WriteBatch};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct GcReport {
    pub files_scanned: u64,
    pub files_dropped: u64,
    pub values_rewritten: u64,
    pub bytes_rewritten: u64,
}

struct Candidate {
    key: Vec<u8>,
    seq: u64,
    ptr: ValuePointer,
}

/// Runs one GC pass. With `wait` false (the background thread), a file is
/// skipped rather than wait for the log lock: a writer holding it may be
/// waiting for this very thread to flush.
pub fn collect(inner: &DbInner, wait: bool) -> Result<GcReport> {
    let mut report = GcReport::default();
    let version = inner.state.lock().current.clone();
    let files: Vec<_> = version
        .logs
        .values()
        .filter(|l| l.number < version.replay.file)
        .copied()
        .collect();
    for meta in files {
        report.files_scanned += 1;
        let (pointers, total) = match scan(inner, meta.number, meta.sealed.map(|s| s.0)) {
            Ok(found) => found,
            // Another pass (background GC next to an explicit one) dropped
            // and deleted the file since the snapshot above.
            Err(_) if !inner.state.lock().current.logs.contains_key(&meta.number) => continue,
            Err(e) => return Err(e),
        };
        let live = live_values(inner, pointers)?;
        let live_bytes: u64 = live.iter().map(|c| u64::from(c.ptr.frame.len)).sum();
        let keep_limit = (1.0 - inner.opts.vlog_gc_discard_ratio) * total as f64;
        if total > 0 && live_bytes > 0 && live_bytes as f64 > keep_limit {
            continue;
        }
        rewrite_and_drop(inner, meta.number, live, wait, &mut report)?;
    }
    inner.delete_obsolete_files();
    Ok(report)
}

/// Every value pointer the file's commit records hold, and the bytes of
/// value frames in it.
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
        match frame.kind {
            BlockKind::LogValue => total += u64::from(frame.handle.len),
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
    let seq = inner.visible_seq.load(Ordering::SeqCst);
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

fn rewrite_and_drop(
    inner: &DbInner,
    n: u64,
    live: Vec<Candidate>,
    wait: bool,
    report: &mut GcReport,
) -> Result<()> {
    const CHUNK_BYTES: usize = 4 << 20;
    let mut guard = match wait {
        true => inner.log.lock(),
        false => match inner.log.try_lock() {
            Some(g) => g,
            None => return Ok(()),
        },
    };
    let Some(log) = guard.as_mut() else {
        return Err(Error::Closed("store is closed".into()));
    };
    {
        let st = inner.state.lock();
        if let Some(e) = &st.bg_error {
            return Err(Error::Closed(e.to_string()));
        }
        if !st.current.logs.contains_key(&n) {
            return Ok(()); // another pass dropped it meanwhile
        }
    }
    let mut batch = WriteBatch::new();
    for c in live {
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
    let from_seq = inner.visible_seq.load(Ordering::SeqCst);
    inner.state.lock().obsolete_logs.push((n, from_seq));
    report.files_dropped += 1;
    Ok(())
}
