//! The background threads. One flushes immutable memtables to level-0
//! tables (oldest first, advancing the replay pointer) and runs every
//! value-log GC pass: after each flush over the files it let go
//! (`gc::Scope::Known`), after a compaction that may have found values dead,
//! and a full pass every few flushes. The other runs compactions. Apart, a
//! flush never waits behind a long compaction, so writers stall only when
//! flushing itself falls behind (RocksDB keeps flushes and compactions in
//! separate pools); GC stays on one thread, so two background passes never
//! make each other skip a busy file. The compaction lock and the manifest
//! order the two threads as they order a `compact_range` on a caller's
//! thread and the background.
//! A failure is recorded as the store's background error, which turns
//! later writes into errors instead of silently losing data.

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::compaction::{self, OutputWriter};
use crate::db::DbInner;
use crate::error::Result;
use crate::gc::{self, Scope};
use crate::iterator::InternalIterator;
use crate::memtable::MemTableIterator;
use crate::version::VersionEdit;

/// Starts the flush thread and the compaction thread. If the second cannot
/// start, the first is stopped before the error returns.
pub fn start(inner: &Arc<DbInner>) -> std::io::Result<Vec<JoinHandle<()>>> {
    let i = inner.clone();
    let flusher = std::thread::Builder::new()
        .name("gvault-store-flush".into())
        .spawn(move || run_flushes(i))?;
    let i = inner.clone();
    match std::thread::Builder::new()
        .name("gvault-store-compact".into())
        .spawn(move || run_compactions(i))
    {
        Ok(compactor) => Ok(vec![flusher, compactor]),
        Err(e) => {
            inner.lock_state().shutting_down = true;
            inner.signal_background();
            let _ = flusher.join();
            Err(e)
        }
    }
}

enum Work {
    Flush,
    /// What a compaction left dead.
    CollectKnown,
    /// Every file, every `vlog_gc_every_flushes` flushes.
    CollectAll,
}

/// Flushes and GC passes until shutdown.
fn run_flushes(inner: Arc<DbInner>) {
    let every = inner.opts.vlog_gc_every_flushes;
    let known = Scope::Known {
        rewrite: every > 0,
        discard_ratio: inner.opts.vlog_gc_discard_ratio,
    };
    let mut flushes_since_gc = 0usize;
    loop {
        let work = {
            let mut st = inner.lock_state();
            loop {
                if st.shutting_down {
                    return;
                }
                if st.bg_error.is_none() {
                    if !st.imm.is_empty() {
                        st.flushing = true;
                        break Work::Flush;
                    }
                    if std::mem::take(&mut st.compacted) {
                        break Work::CollectKnown;
                    }
                    if every > 0 && flushes_since_gc >= every {
                        break Work::CollectAll;
                    }
                }
                inner.wait_for_background(&mut st);
            }
        };
        let res = match work {
            Work::Flush => flush_oldest(&inner).and_then(|()| {
                flushes_since_gc += 1;
                // Writers waiting for room go on before the GC pass.
                inner.signal_background();
                gc::collect(&inner, false, known).map(|_| ())
            }),
            Work::CollectKnown => gc::collect(&inner, false, known).map(|_| ()),
            Work::CollectAll => {
                flushes_since_gc = 0;
                let scope = Scope::All {
                    discard_ratio: inner.opts.vlog_gc_discard_ratio,
                };
                gc::collect(&inner, false, scope).map(|_| ())
            }
        };
        if let Err(e) = res {
            inner.set_bg_error(&e);
        }
        inner.lock_state().flushing = false;
        inner.signal_background();
    }
}

/// Compactions while any is due, until shutdown.
fn run_compactions(inner: Arc<DbInner>) {
    loop {
        {
            let mut st = inner.lock_state();
            loop {
                if st.shutting_down {
                    return;
                }
                if st.bg_error.is_none() && compaction::needs_compaction(&inner, &st.current) {
                    break;
                }
                inner.wait_for_background(&mut st);
            }
        }
        match compaction::compact_once(&inner) {
            // The flush thread collects what the compaction left dead.
            Ok(_) => inner.lock_state().compacted = true,
            Err(e) => inner.set_bg_error(&e),
        }
        inner.signal_background();
    }
}

/// Writes the oldest immutable memtable to a level-0 table and moves the
/// replay pointer past it, in one manifest edit.
pub fn flush_oldest(inner: &DbInner) -> Result<()> {
    let Some((mem, end)) = inner.oldest_immutable() else {
        return Ok(());
    };
    let mut out = OutputWriter::new(inner);
    let mut it = MemTableIterator::new(mem);
    it.seek_to_first();
    while it.valid() {
        out.add(it.key(), it.value());
        it.next();
    }
    // On failure the table stays on disk for the next open to remove.
    let outputs = out.finish()?;
    let edit = VersionEdit {
        replay: Some(end),
        added_tables: outputs.files.iter().map(|f| (0, f.clone())).collect(),
        ..Default::default()
    };
    inner.log_and_apply(edit)?;
    drop(outputs.keys); // the tables are in the version now
    inner.pop_flushed_immutable();
    Ok(())
}
