//! The write path: group commit. Writers queue; the one at the head leads:
//! it takes the waiting batches into one group, makes room in the memtable
//! (blocking only while flushes are behind), appends the group to the value
//! log as one sealed batch, fsyncs once if any writer asked, applies the
//! group to the memtable and only then publishes its sequence numbers, so
//! each batch becomes visible at once.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::codec::BlockKind;
use crate::db::{DbInner, Immutable, State, MAX_BATCH_BYTES, MAX_KEY_LEN};
use crate::error::{Error, IoContext, Result};
use crate::format::{vlog_path, FileKind, LogPosition, ValuePointer, ValueType};
use crate::lock_order::{Rank, RankedMutex};
use crate::log_writer::{LogWriter, FRAME_HEADER_LEN};
use crate::memtable::MemTable;
use crate::options::WriteOptions;
use crate::version::VersionEdit;
use crate::write_batch::{encode_value_frame_into, BatchOp, CommitBuilder, WriteBatch};

/// The longest varint (a u64 in 7-bit groups).
const MAX_VARINT_LEN: usize = 10;

/// A leader takes waiting writers into its group up to this many bytes.
const MAX_GROUP_BYTES: usize = 4 << 20;

pub(crate) struct PendingWrite {
    batch: WriteBatch,
    sync: bool,
    result: RankedMutex<Option<Result<()>>>,
}

impl DbInner {
    fn check_writable(&self) -> Result<()> {
        match self.bg_error() {
            Some(e) => Err(Error::Closed(e.to_string())),
            None => Ok(()),
        }
    }

    pub fn write(&self, opts: &WriteOptions, batch: WriteBatch) -> Result<()> {
        self.check_mutable("writing")?;
        for op in &batch.ops {
            let (BatchOp::Put(k, _) | BatchOp::Delete(k)) = op;
            if k.len() > MAX_KEY_LEN {
                return Err(Error::InvalidArgument(format!(
                    "key of {} bytes exceeds the limit of {MAX_KEY_LEN}",
                    k.len()
                )));
            }
        }
        if batch.approximate_bytes() > MAX_BATCH_BYTES {
            return Err(Error::InvalidArgument(format!(
                "write batch of about {} bytes exceeds the limit of {MAX_BATCH_BYTES}",
                batch.approximate_bytes()
            )));
        }
        if batch.is_empty() && !opts.sync {
            return Ok(());
        }
        let me = Arc::new(PendingWrite {
            batch,
            sync: opts.sync,
            result: RankedMutex::new(Rank::WriteResult, None),
        });
        let mut queue = self.writers.lock();
        queue.push_back(me.clone());
        loop {
            if let Some(r) = me.result.lock().take() {
                return r;
            }
            if queue.front().is_some_and(|f| Arc::ptr_eq(f, &me)) {
                break;
            }
            self.writers_cv.wait(&mut queue);
        }
        // Leader: take followers into the group.
        let mut group = vec![me.clone()];
        let mut bytes = me.batch.approximate_bytes();
        for w in queue.iter().skip(1) {
            bytes += w.batch.approximate_bytes();
            if bytes > MAX_GROUP_BYTES {
                break;
            }
            group.push(w.clone());
        }
        drop(queue);
        let result = self.write_group(&group);
        let mut queue = self.writers.lock();
        for w in &group {
            queue.pop_front();
            if !Arc::ptr_eq(w, &me) {
                *w.result.lock() = Some(result.clone());
            }
        }
        self.writers_cv.notify_all();
        result
    }

    fn write_group(&self, group: &[Arc<PendingWrite>]) -> Result<()> {
        let mut guard = self.log.lock();
        let Some(log) = guard.as_mut() else {
            return Err(Error::Closed("store is closed".into()));
        };
        self.check_writable()?;
        self.make_room(log)?;
        let batches: Vec<&WriteBatch> = group.iter().map(|w| &w.batch).collect();
        let sync = group.iter().any(|w| w.sync);
        self.append_batches(log, &batches, sync)?;
        self.maybe_rotate_log(log)
    }

    /// Appends batches as one group, then applies them to the memtable and
    /// makes them visible. The caller holds the log lock.
    pub fn append_batches(
        &self,
        log: &mut LogWriter,
        batches: &[&WriteBatch],
        sync: bool,
    ) -> Result<()> {
        let threshold = self.opts.value_threshold;
        let first_seq = self.visible_seq.load(Ordering::SeqCst) + 1;
        // Value frames first, then the commit record that points at them,
        // all laid out in one buffer and sealed there.
        let overhead = FRAME_HEADER_LEN + self.vlog_codec.overhead();
        let capacity: usize = batches
            .iter()
            .flat_map(|b| &b.ops)
            .map(|op| match op {
                BatchOp::Put(k, v) if v.len() >= threshold => {
                    2 * overhead + 2 * k.len() + v.len() + 2 * MAX_VARINT_LEN
                }
                BatchOp::Put(k, v) => k.len() + v.len() + 2 * MAX_VARINT_LEN + 1,
                BatchOp::Delete(k) => k.len() + MAX_VARINT_LEN + 1,
            })
            .sum::<usize>()
            + batches.len() * (8 + MAX_VARINT_LEN)
            + overhead
            + 64;
        let mut group = log.start_group(capacity);
        let mut handles = Vec::new();
        for b in batches {
            for op in &b.ops {
                if let BatchOp::Put(k, v) = op {
                    if v.len() >= threshold {
                        handles.push(group.push(BlockKind::LogValue, |buf| {
                            encode_value_frame_into(buf, k, v)
                        }));
                    }
                }
            }
        }
        group.push(BlockKind::LogCommit, |buf| {
            let mut commit = CommitBuilder::appending_to(std::mem::take(buf));
            let mut seq = first_seq;
            let mut next_value = 0;
            for b in batches {
                commit.start_batch(seq, b.ops.len());
                for op in &b.ops {
                    match op {
                        BatchOp::Put(k, v) if v.len() >= threshold => {
                            commit.pointer(k, handles[next_value]);
                            next_value += 1;
                        }
                        BatchOp::Put(k, v) => commit.inline(k, v),
                        BatchOp::Delete(k) => commit.delete(k),
                    }
                }
                seq += b.ops.len() as u64;
            }
            *buf = commit.finish();
        });
        let file = log.file_number();
        let result = log
            .append(group)
            .and_then(|_| if sync { log.sync() } else { Ok(()) });
        if let Err(e) = result {
            // The log may now end in a partial group: stop writing until a
            // reopen cuts it.
            self.set_bg_error(&e);
            return Err(e);
        }
        if !handles.is_empty() {
            let bytes: u64 = handles
                .iter()
                .map(|h| FRAME_HEADER_LEN as u64 + u64::from(h.len))
                .sum();
            self.log_usage.lock().appended(file, bytes);
        }
        let mem = self.state.lock().mem.clone();
        let mut seq = first_seq;
        let mut next_value = 0;
        for b in batches {
            for op in &b.ops {
                match op {
                    BatchOp::Put(k, v) if v.len() >= threshold => {
                        let ptr = ValuePointer {
                            file,
                            frame: handles[next_value],
                        };
                        next_value += 1;
                        mem.add(seq, ValueType::Pointer, k, &ptr.encode());
                    }
                    BatchOp::Put(k, v) => mem.add(seq, ValueType::Inline, k, v),
                    BatchOp::Delete(k) => mem.add(seq, ValueType::Deletion, k, &[]),
                }
                seq += 1;
            }
        }
        self.visible_seq.store(seq - 1, Ordering::SeqCst);
        Ok(())
    }

    /// Makes the active memtable immutable when full; blocks only while
    /// flushes or level-0 compactions are behind their limits.
    fn make_room(&self, log: &LogWriter) -> Result<()> {
        let mut st = self.state.lock();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Closed(e.to_string()));
            }
            if st.shutting_down {
                return Err(Error::Closed("store is closing".into()));
            }
            if st.mem.approximate_bytes() < self.opts.write_buffer_size {
                return Ok(());
            }
            if st.imm.len() >= self.opts.max_immutable_memtables
                || st.current.levels[0].len() >= self.opts.l0_stop_writes_trigger
            {
                self.bg_cv.wait(&mut st);
                continue;
            }
            self.rotate_memtable(&mut st, log.position());
            self.bg_cv.notify_all();
        }
    }

    pub fn rotate_memtable(&self, st: &mut State, end: LogPosition) {
        let old = std::mem::replace(&mut st.mem, Arc::new(MemTable::new()));
        st.imm.push_back(Immutable { mem: old, end });
        self.publish_view(st);
    }

    /// Starts a new value-log file once the head is large enough. The old
    /// file is synced and its final size recorded, so a shortened file is
    /// caught at recovery.
    fn maybe_rotate_log(&self, log: &mut LogWriter) -> Result<()> {
        if log.position().offset < self.opts.vlog_file_size {
            return Ok(());
        }
        self.rotate_log(log, false)
    }

    /// Starts a new value-log file now (caller holds the log lock).
    /// `retire`: every record of the old file is flushed (the caller checked
    /// under this lock), so the same edit moves the replay pointer to the
    /// new file; and if the old file holds no value frame (this process
    /// wrote it all, `log_usage`), no reader can need it: the edit
    /// deletes it instead of sealing it, and it is removed at once.
    pub fn rotate_log(&self, log: &mut LogWriter, retire: bool) -> Result<()> {
        let res = (|| {
            let old = log.position();
            let drop_old = retire && self.log_usage.lock().has_no_values(old.file);
            if !drop_old {
                log.sync()?;
            }
            let n = self.new_file_number();
            let path = vlog_path(&self.dir, n);
            let new = LogWriter::create(
                &*self.fs,
                &path,
                FileKind::ValueLog,
                n,
                self.vlog_codec.clone(),
            )?;
            self.fs
                .sync_dir(&self.dir)
                .ctx(|| format!("syncing directory {}", self.dir.display()))?;
            self.log_usage.lock().created(n);
            let mut edit = VersionEdit {
                added_logs: vec![n],
                replay: retire.then(|| new.position()),
                ..Default::default()
            };
            match drop_old {
                true => edit.deleted_logs.push(old.file),
                false => edit.sealed_logs.push((old.file, old.offset, old.block)),
            }
            self.log_and_apply(edit)?;
            *log = new;
            if drop_old {
                self.log_usage.lock().forget(old.file);
                self.vlog.forget(old.file);
                let _ = self.fs.remove(&vlog_path(&self.dir, old.file));
            }
            Ok(())
        })();
        if let Err(e) = &res {
            self.set_bg_error(e);
        }
        res
    }
}
