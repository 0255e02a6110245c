//! The background thread: flushes immutable memtables to level-0 tables
//! (oldest first, advancing the replay pointer; value-log files the pointer
//! passed are then collected if they are known garbage, `gc::Scope::Known`),
//! then runs compactions, then, every few flushes, a value-log GC pass.
//! A failure is recorded as the store's background error, which turns
//! later writes into errors instead of silently losing data.

use std::sync::Arc;

use crate::compaction::{self, OutputWriter};
use crate::db::DbInner;
use crate::error::Result;
use crate::gc::{self, Scope};
use crate::iterator::InternalIterator;
use crate::memtable::MemTableIterator;
use crate::version::VersionEdit;

enum Work {
    Flush,
    Compact,
    CollectGarbage,
}

pub fn run(inner: Arc<DbInner>) {
    let every = inner.opts.vlog_gc_every_flushes;
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
                        break Work::Flush;
                    }
                    if compaction::needs_compaction(&inner, &st.current) {
                        break Work::Compact;
                    }
                    if every > 0 && flushes_since_gc >= every {
                        break Work::CollectGarbage;
                    }
                }
                inner.wait_for_background(&mut st);
            }
        };
        let res = match work {
            Work::Flush => {
                flushes_since_gc += 1;
                flush_oldest(&inner).and_then(|()| {
                    let scope = Scope::Known {
                        rewrite: every > 0,
                        discard_ratio: inner.opts.vlog_gc_discard_ratio,
                    };
                    gc::collect(&inner, false, scope).map(|_| ())
                })
            }
            Work::Compact => compaction::compact_once(&inner).and_then(|_| {
                // The compaction may have found values dead.
                let scope = Scope::Known {
                    rewrite: every > 0,
                    discard_ratio: inner.opts.vlog_gc_discard_ratio,
                };
                gc::collect(&inner, false, scope).map(|_| ())
            }),
            Work::CollectGarbage => {
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
