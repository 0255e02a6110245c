//! The store's shared state (memtables, current version, snapshots, the
//! background error), the read path (memtables, then tables level by
//! level; the first entry found decides, a deletion included), and the
//! public `Store` handle. The write path is in `write.rs`.
//!
//! # Locks
//!
//! A get takes no lock: it loads the published [`ReadView`] and the
//! visible sequence number, and finds open tables and value-log files in
//! maps published through `ArcSwap` (a miss opens the file under that
//! map's writer lock). Everything else that changes shared state takes the
//! locks below, and a thread holding one takes only locks further down the
//! list, so no two threads wait for each other. Each is a
//! [`RankedMutex`](crate::lock_order::RankedMutex) whose rank is its place
//! here; with the `lock-order-check` feature (on in debug builds and in the
//! store's tests) taking one out of order panics. "I/O" marks the locks
//! that may be held while reading, writing or syncing files.
//!
//! 1. The directory lock (`dir_lock`, the `LOCK` file): taken by open
//!    before any other, released by close after every other; it keeps other
//!    processes out, not threads. Its handle (`file_lock`) is touched
//!    again only at close, alone.
//! 2. `reencrypt_lock` (I/O): one re-encryption pass, held for the whole
//!    pass.
//! 3. The key registry (`KeyState::registry`, keys.rs; not ranked) (I/O):
//!    the registry file and the key list; held while the file is saved
//!    and, when keys are retired, while the live files' headers are read.
//! 4. `compaction_lock` (I/O): one compaction at a time, held for the
//!    whole compaction; re-encryption holds it while it re-seals one table,
//!    so no compaction drops the table meanwhile.
//! 5. `writers`, then a queued write's result slot: the group-commit
//!    queue. Never held across I/O: the leader lets go of the queue before
//!    it writes.
//! 6. `log` (I/O): the value-log head. Held by the group-commit leader for
//!    the whole append, fsync and memtable insert (records enter in
//!    sequence order), by GC while it rewrites values and drops a file, by
//!    re-encryption while it installs a re-sealed file, and whenever a new
//!    value-log file is started. A leader waits for flushes (`bg_cv`)
//!    holding it, so the background threads never wait for it: their GC
//!    takes it with `try_lock` and skips the file when it is busy.
//! 7. `manifest` (I/O): serialises manifest edits and rewrites
//!    (`log_and_apply`); callers hold whatever keeps the edit valid (the
//!    log lock for value-log edits, the compaction lock for compactions).
//! 8. `log_usage`: what this process knows of value-log files' frames.
//! 9. `state`, with its condition variable `bg_cv`: memtables, the current
//!    version, pinned sequence numbers, files awaiting deletion, the
//!    background error, shutdown. Never held across I/O. The read view is
//!    published (`view.store`) only under it, so views appear in the order
//!    of the changes.
//! 10. A cursor's read-ahead (I/O: it reads value-log frames).
//! 11. A table-cache shard's writer, then the value log's open-file map
//!     writer (I/O: each opens a file and reads from it while held).
//! 12. The codec's key-set writer (crypto.rs; not ranked), then the pinned
//!     data keys (`codec::KeyPins`): taken when a new file is sealed, under
//!     any of the above.
//! 13. The background threads' handles (`Store::bg`), alone at close.
//!
//! `ArcSwap` writers: the read view (under `state`), each table-cache shard
//! (under its writer), the value log's open files (under its writer) and
//! the codec's key set (under its key-set writer). The atomics
//! `visible_seq`, `next_file` and `scanning` need no lock.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;

use crate::block::Block;
use crate::cache::{BlockCache, Fill};
use crate::codec::BlockCodec;
use crate::env::{FileLock, FileSystem};
use crate::error::{Error, IoContext, Result};
use crate::format::{
    internal_key_into, vlog_path, LogPosition, ValuePointer, ValueType, TYPE_FOR_SEEK,
};
use crate::gc::LogUsage;
use crate::keys::KeyState;
use crate::lock_order::{Rank, RankedCondvar, RankedGuard, RankedMutex};
use crate::log_writer::LogWriter;
use crate::manifest::{self, Manifest};
use crate::memtable::{Found, MemEntry, MemTable};
use crate::options::{Options, WriteOptions};
use crate::pinned::{Pinned, PinnedValue};
use crate::table_cache::TableCache;
use crate::table_reader::Table;
use crate::version::{Version, VersionEdit};
use crate::vlog::ValueLog;
use crate::write_batch::WriteBatch;
use write::PendingWrite;

#[path = "write.rs"]
mod write;

pub const MAX_KEY_LEN: usize = 1 << 20;
pub const MAX_BATCH_BYTES: usize = 1 << 30;
/// A manifest is rewritten from a snapshot once it grows past this.
const MAX_MANIFEST_BYTES: u64 = 4 << 20;

pub(crate) struct Immutable {
    pub mem: Arc<MemTable>,
    /// Log position just after this memtable's last record: the replay
    /// pointer once it is flushed.
    pub end: LogPosition,
}

pub(crate) struct State {
    pub mem: Arc<MemTable>,
    pub imm: VecDeque<Immutable>,
    pub current: Arc<Version>,
    /// Versions still held by readers; tables they name are not deleted.
    pub live_versions: Vec<Weak<Version>>,
    /// Sequence numbers pinned by snapshots, iterators and reads.
    pub snapshots: BTreeMap<u64, usize>,
    /// Tables replaced by compaction, deleted once no version names them.
    pub obsolete_tables: Vec<u64>,
    /// Value-log files dropped by GC, with the sequence number from which
    /// their values were rewritten; deleted once no reader is older.
    pub obsolete_logs: Vec<(u64, u64)>,
    pub bg_error: Option<Error>,
    pub shutting_down: bool,
    /// The flush thread is flushing a memtable or collecting the value-log
    /// files that flush freed: `Store::flush` returns only once it is done.
    pub flushing: bool,
    /// A compaction finished since the flush thread last collected what
    /// compactions left dead.
    pub compacted: bool,
    pub compact_pointer: Vec<Vec<u8>>,
}

/// What a read searches: the memtables and the version. Published anew
/// (under the state lock, in the order of the changes) whenever one of them
/// changes, so that a get takes it without any lock.
pub(crate) struct ReadView {
    pub mem: Arc<MemTable>,
    /// Immutable memtables, newest first.
    pub imms: Vec<Arc<MemTable>>,
    pub version: Arc<Version>,
}

impl State {
    fn read_view(&self) -> ReadView {
        ReadView {
            mem: self.mem.clone(),
            imms: self.imm.iter().rev().map(|i| i.mem.clone()).collect(),
            version: self.current.clone(),
        }
    }
}

pub(crate) struct DbInner {
    // Fixed at open, shared without a lock.
    pub dir: PathBuf,
    pub opts: Options,
    pub fs: Arc<dyn FileSystem>,
    pub codec: Arc<dyn BlockCodec>,
    /// What value-log files are sealed with: `codec`, except in an
    /// index-only store (`Encryption::seal_value_log`), where it is CRC32C.
    pub vlog_codec: Arc<dyn BlockCodec>,
    /// The key registry of an encrypted store.
    pub keys: Option<Arc<KeyState>>,
    pub block_cache: Arc<BlockCache>,
    pub tables: TableCache,
    pub vlog: ValueLog,
    /// Set when the store was opened read-only: where the replayed value
    /// log ends, since no head is open for appending.
    read_only_end: Option<LogPosition>,

    // Locks, in the order of the module documentation.
    /// One re-encryption pass at a time: two would write the same
    /// `.reseal` temporary files.
    reencrypt_lock: RankedMutex<()>,
    /// One compaction at a time (background and manual), and no table
    /// re-sealed while a compaction may drop it.
    compaction_lock: RankedMutex<()>,
    /// Writers waiting for the group-commit leader.
    writers: RankedMutex<VecDeque<Arc<PendingWrite>>>,
    writers_cv: RankedCondvar,
    /// The value-log head; held by the group-commit leader (and GC) for the
    /// whole append + memtable insert, so records enter in sequence order.
    log: RankedMutex<Option<LogWriter>>,
    /// Serialises manifest edits (`log_and_apply`).
    manifest: RankedMutex<Manifest>,
    /// What this process knows of value-log files' value frames (GC reads
    /// only files this shows worth collecting, outside its full passes).
    log_usage: RankedMutex<LogUsage>,
    state: RankedMutex<State>,
    /// Signalled (with `state`) when background work may be needed or has
    /// finished.
    bg_cv: RankedCondvar,
    /// `None` for a read-only open of a store that has no `LOCK` file.
    file_lock: RankedMutex<Option<Box<dyn FileLock>>>,

    // Lock-free.
    /// `state`'s memtables and version as of its last change.
    view: ArcSwap<ReadView>,
    /// The last sequence number whose group is fully in the memtable.
    visible_seq: AtomicU64,
    next_file: AtomicU64,
    /// Cursors that would read ahead, reading ahead or not
    /// (`db_iter::Scanning`).
    scanning: AtomicUsize,
}

/// An entry a get found, where it lies: no copy is made until the caller
/// takes the value.
struct Hit<'v> {
    seq: u64,
    value_type: ValueType,
    at: HitAt<'v>,
}

enum HitAt<'v> {
    Mem(MemEntry<'v>),
    Block(Arc<Block>, usize),
}

impl Hit<'_> {
    /// The inline value or encoded pointer (empty for a deletion).
    fn stored(&self) -> &[u8] {
        match &self.at {
            HitAt::Mem(e) => e.value().value(),
            HitAt::Block(b, i) => b.value(*i),
        }
    }
}

thread_local! {
    /// This thread's table seek key, reused from get to get.
    static SEEK_KEY: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Handle to an open store. Share it between threads through an `Arc`.
pub struct Store {
    pub(crate) inner: Arc<DbInner>,
    /// The background threads (none when read-only), joined at close.
    bg: RankedMutex<Vec<JoinHandle<()>>>,
}

/// A consistent read view at one sequence number; released on drop.
pub struct Snapshot {
    pub(crate) seq: u64,
    inner: Arc<DbInner>,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.inner.release_seq(self.seq);
    }
}

impl Snapshot {
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}

/// Options of one read.
#[derive(Clone, Copy, Default)]
pub struct ReadOptions<'a> {
    /// Read as of this snapshot instead of the latest state.
    pub snapshot: Option<&'a Snapshot>,
}

/// Pins a sequence number for the length of one read.
pub(crate) struct SeqGuard {
    pub seq: u64,
    inner: Arc<DbInner>,
}

impl Drop for SeqGuard {
    fn drop(&mut self) {
        self.inner.release_seq(self.seq);
    }
}

impl DbInner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        dir: PathBuf,
        opts: Options,
        codec: Arc<dyn BlockCodec>,
        vlog_codec: Arc<dyn BlockCodec>,
        keys: Option<Arc<KeyState>>,
        version: Version,
        log: Option<LogWriter>,
        manifest: Manifest,
        lock: Option<Box<dyn FileLock>>,
    ) -> DbInner {
        let fs = opts.fs.clone();
        let block_cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
        let tables = TableCache::new(
            fs.clone(),
            dir.clone(),
            codec.clone(),
            block_cache.clone(),
            opts.max_open_tables,
        );
        let vlog = ValueLog::new(
            fs.clone(),
            dir.clone(),
            vlog_codec.clone(),
            Some(block_cache.clone()),
        );
        let visible = version.last_sequence;
        let next_file = version.next_file_number;
        let mut log_usage = LogUsage::default();
        if let Some(log) = &log {
            log_usage.created(log.file_number());
        }
        let current = Arc::new(version);
        let state = State {
            mem: Arc::new(MemTable::new()),
            imm: VecDeque::new(),
            live_versions: vec![Arc::downgrade(&current)],
            current,
            snapshots: BTreeMap::new(),
            obsolete_tables: Vec::new(),
            obsolete_logs: Vec::new(),
            bg_error: None,
            shutting_down: false,
            flushing: false,
            compacted: false,
            compact_pointer: vec![Vec::new(); crate::version::NUM_LEVELS],
        };
        DbInner {
            view: ArcSwap::from_pointee(state.read_view()),
            state: RankedMutex::new(Rank::State, state),
            dir,
            opts,
            fs,
            codec,
            vlog_codec,
            keys,
            block_cache,
            tables,
            vlog,
            read_only_end: None,
            reencrypt_lock: RankedMutex::new(Rank::Reencrypt, ()),
            compaction_lock: RankedMutex::new(Rank::Compaction, ()),
            writers: RankedMutex::new(Rank::Writers, VecDeque::new()),
            writers_cv: RankedCondvar::new(),
            log: RankedMutex::new(Rank::Log, log),
            manifest: RankedMutex::new(Rank::Manifest, manifest),
            log_usage: RankedMutex::new(Rank::LogUsage, log_usage),
            bg_cv: RankedCondvar::new(),
            file_lock: RankedMutex::new(Rank::DirLock, lock),
            visible_seq: AtomicU64::new(visible),
            next_file: AtomicU64::new(next_file),
            scanning: AtomicUsize::new(0),
        }
    }

    /// Makes this a read-only store whose replayed value log ends at `end`
    /// and whose replayed records are `mem` (no head is open for appending).
    pub(crate) fn set_read_only(&mut self, end: LogPosition, mem: MemTable) {
        self.read_only_end = Some(end);
        let st = self.state.get_mut();
        st.mem = Arc::new(mem);
        // Gets read the published view, not the state.
        self.view.store(Arc::new(st.read_view()));
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only_end.is_some()
    }

    /// The state lock, for a step that reads or changes several of its
    /// parts at once.
    pub fn lock_state(&self) -> RankedGuard<'_, State> {
        self.state.lock()
    }

    /// The current version.
    pub fn current(&self) -> Arc<Version> {
        self.state.lock().current.clone()
    }

    /// Whether value-log file `n` is live (GC has not dropped it).
    pub fn has_log(&self, n: u64) -> bool {
        self.state.lock().current.logs.contains_key(&n)
    }

    /// The background error, once one was met: writes fail from then on.
    pub fn bg_error(&self) -> Option<Error> {
        self.state.lock().bg_error.clone()
    }

    /// Whether the store is closing: background work stops.
    pub fn is_shutting_down(&self) -> bool {
        self.state.lock().shutting_down
    }

    /// Waits on `st` (the state lock) until background work is signalled.
    pub fn wait_for_background(&self, st: &mut RankedGuard<'_, State>) {
        self.bg_cv.wait(st);
    }

    /// Wakes everyone waiting in [`Self::wait_for_background`].
    pub fn signal_background(&self) {
        self.bg_cv.notify_all();
    }

    /// The value-log head, `None` once closed. Held across appends, syncs
    /// and file rotation.
    pub fn lock_log(&self) -> RankedGuard<'_, Option<LogWriter>> {
        self.log.lock()
    }

    /// [`Self::lock_log`] if no one holds it.
    pub fn try_lock_log(&self) -> Option<RankedGuard<'_, Option<LogWriter>>> {
        self.log.try_lock()
    }

    /// The manifest, serialising its edits and rewrites.
    pub fn lock_manifest(&self) -> RankedGuard<'_, Manifest> {
        self.manifest.lock()
    }

    /// What this process knows of value-log files' value frames.
    pub fn log_usage(&self) -> RankedGuard<'_, LogUsage> {
        self.log_usage.lock()
    }

    /// Held for one whole compaction (or one table's re-sealing).
    pub fn lock_compaction(&self) -> RankedGuard<'_, ()> {
        self.compaction_lock.lock()
    }

    /// Held for one whole re-encryption pass.
    pub fn lock_reencrypt(&self) -> RankedGuard<'_, ()> {
        self.reencrypt_lock.lock()
    }

    /// The last sequence number whose write group is fully visible.
    pub fn visible_seq(&self) -> u64 {
        self.visible_seq.load(Ordering::SeqCst)
    }

    /// The sequence number no compaction may drop an entry above: the
    /// oldest pinned by a reader, else the latest.
    pub fn smallest_snapshot(&self) -> u64 {
        let st = self.state.lock();
        let visible = self.visible_seq();
        st.snapshots
            .keys()
            .next()
            .copied()
            .unwrap_or(visible)
            .min(visible)
    }

    /// Queues tables a compaction replaced, for deletion once no version
    /// names them.
    pub fn retire_tables(&self, numbers: impl IntoIterator<Item = u64>) {
        self.state.lock().obsolete_tables.extend(numbers);
    }

    /// Queues value-log file `n`, dropped by GC, for deletion once no
    /// version names it and no reader is older than `from_seq`.
    pub fn retire_log(&self, n: u64, from_seq: u64) {
        self.state.lock().obsolete_logs.push((n, from_seq));
    }

    /// Where the next compaction of `level` starts.
    pub fn set_compact_pointer(&self, level: usize, key: Vec<u8>) {
        self.state.lock().compact_pointer[level] = key;
    }

    /// Adds a memtable of replayed records as the newest immutable one,
    /// ending at `end` in the value log.
    pub fn push_immutable(&self, mem: MemTable, end: LogPosition) {
        let mut st = self.state.lock();
        st.imm.push_back(Immutable {
            mem: Arc::new(mem),
            end,
        });
        self.publish_view(&st);
    }

    /// The oldest immutable memtable and where it ends in the value log.
    pub fn oldest_immutable(&self) -> Option<(Arc<MemTable>, LogPosition)> {
        let st = self.state.lock();
        st.imm.front().map(|imm| (imm.mem.clone(), imm.end))
    }

    /// Drops the oldest immutable memtable once its table is in the
    /// version.
    pub fn pop_flushed_immutable(&self) {
        let mut st = self.state.lock();
        st.imm.pop_front();
        self.publish_view(&st);
    }

    /// Cursors that would read ahead now.
    pub fn scanning_cursors(&self) -> usize {
        self.scanning.load(Ordering::Relaxed)
    }

    /// Counts a cursor that would read ahead as it starts (`starts`) or
    /// ends.
    pub fn count_scanning_cursor(&self, starts: bool) {
        match starts {
            true => self.scanning.fetch_add(1, Ordering::SeqCst),
            false => self.scanning.fetch_sub(1, Ordering::SeqCst),
        };
    }

    /// Publishes `st`'s read view; every change to `st.mem`, `st.imm` or
    /// `st.current` calls it before the state lock is released.
    fn publish_view(&self, st: &State) {
        self.view.store(Arc::new(st.read_view()));
    }

    /// Fails with [`Error::ReadOnly`] on a store opened read-only.
    pub fn check_mutable(&self, operation: &str) -> Result<()> {
        match self.read_only_end {
            Some(_) => Err(Error::ReadOnly {
                dir: self.dir.clone(),
                operation: operation.to_owned(),
            }),
            None => Ok(()),
        }
    }

    /// Where the value log ends: the head's append position, or on a
    /// read-only store the end of the last replayed group. `None` once
    /// closed.
    pub fn log_end(&self) -> Option<LogPosition> {
        self.log
            .lock()
            .as_ref()
            .map(|l| l.position())
            .or(self.read_only_end)
    }

    pub fn new_file_number(&self) -> u64 {
        self.next_file.fetch_add(1, Ordering::SeqCst)
    }

    pub fn pin_seq(self: &Arc<Self>, seq: Option<u64>) -> SeqGuard {
        SeqGuard {
            seq: self.pin_raw(seq),
            inner: self.clone(),
        }
    }

    /// Registers a reader at `seq` (default: the latest); the caller must
    /// `release_seq` it.
    fn pin_raw(&self, seq: Option<u64>) -> u64 {
        let mut st = self.state.lock();
        let seq = seq.unwrap_or_else(|| self.visible_seq.load(Ordering::SeqCst));
        *st.snapshots.entry(seq).or_insert(0) += 1;
        seq
    }

    fn release_seq(&self, seq: u64) {
        let mut st = self.state.lock();
        if let Some(c) = st.snapshots.get_mut(&seq) {
            *c -= 1;
            if *c == 0 {
                st.snapshots.remove(&seq);
            }
        }
    }

    /// Records a background or write failure; writes fail from now on.
    pub fn set_bg_error(&self, e: &Error) {
        let mut st = self.state.lock();
        if st.bg_error.is_none() {
            st.bg_error = Some(e.clone());
        }
        self.bg_cv.notify_all();
    }

    /// Writes `edit` to the manifest and installs the resulting version.
    /// Callers hold whatever keeps the edit valid (the log lock for log
    /// edits, the compaction lock for compactions).
    pub fn log_and_apply(&self, mut edit: VersionEdit) -> Result<()> {
        self.check_mutable("changing the manifest")?;
        let mut manifest = self.manifest.lock();
        let base = self.state.lock().current.clone();
        edit.next_file_number = Some(self.next_file.load(Ordering::SeqCst));
        edit.last_sequence = Some(self.visible_seq.load(Ordering::SeqCst));
        let path = crate::format::manifest_path(&self.dir, manifest.number());
        let new = base
            .apply(&edit)
            .map_err(|r| Error::corruption(&path, "new edit", r))?;
        let res = if manifest.size() > MAX_MANIFEST_BYTES {
            self.rewrite_manifest(&mut manifest, &new)
        } else {
            manifest.append(&edit)
        };
        if let Err(e) = res {
            self.set_bg_error(&e);
            return Err(e);
        }
        let mut st = self.state.lock();
        let new = Arc::new(new);
        st.live_versions.push(Arc::downgrade(&new));
        st.current = new;
        self.publish_view(&st);
        Ok(())
    }

    /// Starts a new manifest holding `version` and points CURRENT at it.
    pub fn rewrite_manifest(&self, manifest: &mut Manifest, version: &Version) -> Result<()> {
        let number = self.new_file_number();
        let mut v = version.clone();
        v.next_file_number = self.next_file.load(Ordering::SeqCst);
        let m = Manifest::create(&*self.fs, &self.dir, number, &v, self.codec.clone())?;
        manifest::write_pointer(&*self.fs, &self.dir, number, self.codec.clone())?;
        let old = std::mem::replace(manifest, m);
        let _ = self
            .fs
            .remove(&crate::format::manifest_path(&self.dir, old.number()));
        Ok(())
    }

    /// The newest entry for `key` visible at `seq`.
    pub fn get_entry(&self, key: &[u8], seq: u64) -> Result<Option<Found>> {
        let view = self.view.load();
        let found = self.get_entry_in(&view, key, seq)?.map(|h| Found {
            seq: h.seq,
            value_type: h.value_type,
            value: h.stored().to_vec(),
        });
        Ok(found)
    }

    /// The newest entry for `key` visible at `seq` in `view`, in place.
    fn get_entry_in<'v>(
        &self,
        view: &'v ReadView,
        key: &[u8],
        seq: u64,
    ) -> Result<Option<Hit<'v>>> {
        let ReadView { mem, imms, version } = view;
        for m in std::iter::once(mem).chain(imms) {
            if let Some((seq, value_type, e)) = m.get(key, seq) {
                return Ok(Some(Hit {
                    seq,
                    value_type,
                    at: HitAt::Mem(e),
                }));
            }
        }
        SEEK_KEY.with_borrow_mut(|seek| {
            internal_key_into(seek, key, seq, TYPE_FOR_SEEK);
            let mut best: Option<Hit<'v>> = None;
            for f in version.levels[0].iter() {
                if !f.overlaps(Some(key), Some(key)) {
                    continue;
                }
                if let Some(found) = self.table_get(f, key, seek)? {
                    if best.as_ref().is_none_or(|b| found.seq > b.seq) {
                        best = Some(found);
                    }
                }
            }
            if best.is_some() {
                return Ok(best);
            }
            for level in &version.levels[1..] {
                let i = level.partition_point(|f| f.largest_user() < key);
                if let Some(f) = level.get(i) {
                    if f.smallest_user() <= key {
                        if let Some(found) = self.table_get(f, key, seek)? {
                            return Ok(Some(found));
                        }
                    }
                }
            }
            Ok(None)
        })
    }

    fn table_get<'v>(
        &self,
        f: &crate::version::FileMeta,
        key: &[u8],
        seek: &[u8],
    ) -> Result<Option<Hit<'v>>> {
        self.tables
            .with(f, |table| Self::table_hit(table, key, seek))
    }

    fn table_hit<'v>(table: &Table, key: &[u8], seek: &[u8]) -> Result<Option<Hit<'v>>> {
        if !table.may_contain(key) {
            return Ok(None);
        }
        let Some((block, i)) = table.seek_entry(seek)? else {
            return Ok(None);
        };
        let Some(p) = crate::format::parse_internal_key(block.key(i)) else {
            return Err(Error::corruption(
                table.path(),
                "data block",
                "malformed internal key",
            ));
        };
        if p.user_key != key {
            return Ok(None);
        }
        let (seq, value_type) = (p.seq, p.value_type);
        Ok(Some(Hit {
            seq,
            value_type,
            at: HitAt::Block(block, i),
        }))
    }

    /// Turns an entry's stored value into the user's value, for a scan: a
    /// value-log value that missed the cache is kept there only while the
    /// cache has room ([`Fill::WhileRoom`]), so that a scan over more than
    /// the cache holds does not churn it.
    pub fn resolve(&self, key: &[u8], t: ValueType, stored: &[u8]) -> Result<Vec<u8>> {
        let mut value = Vec::new();
        self.resolve_into(key, t, stored, &mut value, Fill::WhileRoom)?;
        Ok(value)
    }

    /// [`Self::resolve`] into `buf`, its old contents replaced, caching as
    /// `fill` says.
    fn resolve_into(
        &self,
        key: &[u8],
        t: ValueType,
        stored: &[u8],
        buf: &mut Vec<u8>,
        fill: Fill,
    ) -> Result<()> {
        match t {
            ValueType::Inline => {
                buf.clear();
                buf.extend_from_slice(stored);
                Ok(())
            }
            ValueType::Pointer => {
                self.vlog
                    .read_into(&self.decode_pointer(key, stored)?, key, buf, fill)
            }
            ValueType::Deletion => Err(Error::InvalidArgument("resolving a deletion".into())),
        }
    }

    /// The view first, then the sequence number: every write visible at
    /// that number is then in the view (a new memtable is published before
    /// anything is written to it). Holding the view holds its version, and
    /// a value-log file that GC dropped is deleted only once no live version
    /// names it, so the value a found pointer names stays readable. A
    /// snapshot's own pin keeps the files its older entries need.
    pub fn get(self: &Arc<Self>, key: &[u8], snapshot: Option<u64>) -> Result<Option<Vec<u8>>> {
        let mut value = Vec::new();
        Ok(self.get_into(key, snapshot, &mut value)?.then_some(value))
    }

    /// [`Self::get`] into `buf` (its old contents replaced); whether the key
    /// was found. The value is copied once, from the block, memtable entry
    /// or value-log frame where it lies; nothing else is allocated once
    /// `buf` is large enough.
    pub fn get_into(&self, key: &[u8], snapshot: Option<u64>, buf: &mut Vec<u8>) -> Result<bool> {
        let view = self.view.load();
        let seq = snapshot.unwrap_or_else(|| self.visible_seq.load(Ordering::SeqCst));
        let Some(hit) = self.get_entry_in(&view, key, seq)? else {
            return Ok(false);
        };
        if hit.value_type == ValueType::Deletion {
            return Ok(false);
        }
        self.resolve_into(key, hit.value_type, hit.stored(), buf, Fill::Always)?;
        Ok(true)
    }

    /// The cached value an entry's stored pointer names, if the cache
    /// holds it.
    pub fn cached_value(&self, key: &[u8], stored: &[u8]) -> Result<Option<PinnedValue>> {
        let ptr = self.decode_pointer(key, stored)?;
        Ok(self
            .vlog
            .cached(&ptr, key)?
            .map(|v| PinnedValue::new(Pinned::Cached(v))))
    }

    fn decode_pointer(&self, key: &[u8], stored: &[u8]) -> Result<ValuePointer> {
        ValuePointer::decode(stored).ok_or_else(|| {
            Error::corruption(
                &self.dir,
                format!("entry for key {}", show_key(key)),
                "malformed value pointer",
            )
        })
    }

    /// [`Self::get`] without a copy where the value is in memory already.
    pub fn get_pinned(&self, key: &[u8], snapshot: Option<u64>) -> Result<Option<PinnedValue>> {
        let view = self.view.load();
        let seq = snapshot.unwrap_or_else(|| self.visible_seq.load(Ordering::SeqCst));
        let Some(hit) = self.get_entry_in(&view, key, seq)? else {
            return Ok(None);
        };
        let pinned = match hit.value_type {
            ValueType::Deletion => return Ok(None),
            ValueType::Pointer => self
                .vlog
                .read_pinned(&self.decode_pointer(key, hit.stored())?, key)?,
            ValueType::Inline => match hit.at {
                HitAt::Block(b, i) => Pinned::InBlock(b, i),
                HitAt::Mem(e) => Pinned::Owned(e.value().value().to_vec()),
            },
        };
        Ok(Some(PinnedValue::new(pinned)))
    }

    /// Whether the head value-log file holds only records not yet flushed
    /// (the replay pointer is at its start) and few of them: replaying it
    /// at the next open costs less than flushing and replacing it now.
    pub fn head_is_small_and_unflushed(&self) -> bool {
        let guard = self.log.lock();
        let Some(log) = guard.as_ref() else {
            return false;
        };
        let st = self.state.lock();
        let unflushed = st.current.replay.file == log.file_number()
            && st.current.replay.offset == crate::format::HEADER_LEN as u64;
        let small = (log.position().offset as usize) <= self.opts.write_buffer_size / 8;
        unflushed && small && st.imm.is_empty()
    }

    /// Once every record is flushed, starts a new value-log head and moves
    /// the replay pointer to it, so that the old head is behind the pointer
    /// and GC may take it (or, holding no value frame, it goes at once).
    /// Nothing to do for an empty head or while anything is unflushed.
    pub fn retire_head(&self) -> Result<()> {
        let mut guard = self.log.lock();
        let Some(log) = guard.as_mut() else {
            return Err(Error::Closed("store is closed".into()));
        };
        if log.position().offset <= crate::format::HEADER_LEN as u64 {
            return Ok(());
        }
        {
            let st = self.state.lock();
            if !st.mem.is_empty() || !st.imm.is_empty() || st.bg_error.is_some() {
                return Ok(());
            }
        }
        self.rotate_log(log, true)
    }

    /// Deletes files that no version or reader needs any more.
    pub fn delete_obsolete_files(&self) {
        let (tables, logs) = {
            let mut st = self.state.lock();
            st.live_versions.retain(|w| w.strong_count() > 0);
            let mut live = std::collections::HashSet::new();
            let mut live_logs = std::collections::HashSet::new();
            for v in st.live_versions.iter().filter_map(Weak::upgrade) {
                live.extend(v.table_numbers());
                live_logs.extend(v.logs.keys().copied());
            }
            let (dead, keep): (Vec<u64>, Vec<u64>) =
                st.obsolete_tables.iter().partition(|n| !live.contains(n));
            st.obsolete_tables = keep;
            let oldest = st.snapshots.keys().next().copied();
            let (dead_logs, keep_logs): (Vec<_>, Vec<_>) = st
                .obsolete_logs
                .iter()
                .partition(|(n, seq)| !live_logs.contains(n) && oldest.is_none_or(|o| o >= *seq));
            st.obsolete_logs = keep_logs;
            (dead, dead_logs)
        };
        for n in tables {
            self.tables.evict(n);
            let _ = self.fs.remove(&crate::format::table_path(&self.dir, n));
        }
        for (n, _) in logs {
            self.vlog.forget(n);
            let _ = self.fs.remove(&vlog_path(&self.dir, n));
        }
    }
}

/// `Store::compact_all` collects every value-log file at least this
/// fraction garbage (the background's `vlog_gc_discard_ratio` is higher:
/// it trades space for fewer rewrites).
pub const COMPACT_DISCARD_RATIO: f64 = 0.1;

/// `close` collects value-log files it knows to be at least this fraction
/// garbage: the command-line's "space after any command <= 1.3x the live
/// data" needs under 0.23 (1 / (1 - 0.2) = 1.25).
pub const CLOSE_DISCARD_RATIO: f64 = 0.2;

/// What [`Store::compact_all`] did. Bytes are those of the live tables and
/// value-log files.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactReport {
    pub tables_before: usize,
    pub tables_after: usize,
    pub vlog_files_before: usize,
    pub vlog_files_after: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub gc: crate::gc::GcReport,
}

/// A key for messages: printable as text when it is, else hex.
pub(crate) fn show_key(key: &[u8]) -> String {
    let k = &key[..key.len().min(64)];
    match std::str::from_utf8(k) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => k.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

impl Store {
    /// Opens the store in `dir`, creating it if `opts.create_if_missing`,
    /// or with `opts.read_only` opens an existing one for reading only.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        if opts.read_only {
            return Ok(Store {
                inner: Arc::new(crate::readonly::open(dir.as_ref(), opts)?),
                bg: RankedMutex::new(Rank::BackgroundThread, Vec::new()),
            });
        }
        let inner = Arc::new(crate::recovery::open(dir.as_ref(), opts)?);
        let handles = crate::background::start(&inner)
            .ctx(|| "starting the background threads".to_string())?;
        let store = Store {
            inner,
            bg: RankedMutex::new(Rank::BackgroundThread, handles),
        };
        store.settle_level0();
        Ok(store)
    }

    /// Brings level 0 under `l0_compaction_trigger` now if it is over it
    /// (processes that ended without `close`, each leaving its writes to be
    /// flushed by the next open): short-lived processes would otherwise
    /// pile up level-0 tables. `close` leaves it under the trigger and an
    /// open flushes at most one table, so after a clean close this never
    /// runs. A failure is the store's background error, as if the
    /// background thread had met it: reads still work, writes report it.
    fn settle_level0(&self) {
        let full = self.inner.current().levels[0].len() > self.inner.opts.l0_compaction_trigger;
        if full {
            if let Err(e) = crate::compaction::settle(&self.inner) {
                self.inner.set_bg_error(&e);
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Whether the store was opened with `Options::read_only`.
    pub fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(&WriteOptions::default(), key, value)
    }

    pub fn put_opt(
        &self,
        opts: &WriteOptions,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.inner.write(opts, b)
    }

    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(&WriteOptions::default(), key)
    }

    pub fn delete_opt(&self, opts: &WriteOptions, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.inner.write(opts, b)
    }

    /// Applies every operation of `batch` atomically.
    pub fn write(&self, opts: &WriteOptions, batch: WriteBatch) -> Result<()> {
        self.inner.write(opts, batch)
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        self.inner.get(key.as_ref(), None)
    }

    pub fn get_opt(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        self.inner.get(key.as_ref(), opts.snapshot.map(|s| s.seq))
    }

    /// Reads `key` into `buf`, replacing its contents; returns whether the
    /// key was found (`buf` is then left empty). A reader that keeps `buf`
    /// from read to read allocates nothing per read once it is large
    /// enough, as RocksDB's `PinnableSlice` spares a copy.
    pub fn get_into(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
        buf: &mut Vec<u8>,
    ) -> Result<bool> {
        let found = self
            .inner
            .get_into(key.as_ref(), opts.snapshot.map(|s| s.seq), buf)?;
        if !found {
            buf.clear();
        }
        Ok(found)
    }

    /// Reads `key` without copying a value the store holds in memory (a
    /// table block's inline value or a cached value-log value): the value
    /// pins what it lies in, as RocksDB's `PinnableSlice` does.
    pub fn get_pinned(
        &self,
        opts: &ReadOptions<'_>,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<PinnedValue>> {
        self.inner
            .get_pinned(key.as_ref(), opts.snapshot.map(|s| s.seq))
    }

    /// A view of the store as of now; reads through it ignore later writes.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            seq: self.inner.pin_raw(None),
            inner: self.inner.clone(),
        }
    }

    /// Writes the active memtable to a table and waits until every
    /// memtable is flushed (and the value-log files the flushes freed are
    /// collected).
    pub fn flush(&self) -> Result<()> {
        self.inner.check_mutable("flushing")?;
        {
            let guard = self.inner.log.lock();
            let Some(log) = guard.as_ref() else {
                return Err(Error::Closed("store is closed".into()));
            };
            let mut st = self.inner.state.lock();
            if !st.mem.is_empty() {
                self.inner.rotate_memtable(&mut st, log.position());
                self.inner.bg_cv.notify_all();
            }
        }
        let mut st = self.inner.state.lock();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(e.clone());
            }
            if st.imm.is_empty() && !st.flushing {
                return Ok(());
            }
            if st.shutting_down {
                return Err(Error::Closed("store is closing".into()));
            }
            self.inner.bg_cv.wait(&mut st);
        }
    }

    /// Compacts every table overlapping [start, end] (None: unbounded) down
    /// to the deepest level that holds data, dropping overwritten and
    /// deleted entries. Over the whole key space, the value-log head is
    /// also replaced once everything is flushed, so a head holding only
    /// records already in tables (inline values' commit records) goes at
    /// once instead of waiting to fill, as RocksDB drops a flushed WAL.
    pub fn compact_range(&self, start: Option<&[u8]>, end: Option<&[u8]>) -> Result<()> {
        self.inner.check_mutable("compacting")?;
        self.flush()?;
        if start.is_none() && end.is_none() {
            self.inner.retire_head()?;
        }
        crate::compaction::compact_range(&self.inner, start, end)
    }

    /// Rewrites live values out of value-log files that are mostly garbage
    /// and deletes the files.
    pub fn gc_value_log(&self) -> Result<crate::gc::GcReport> {
        self.inner.check_mutable("value-log GC")?;
        let scope = crate::gc::Scope::All {
            discard_ratio: self.inner.opts.vlog_gc_discard_ratio,
        };
        crate::gc::collect(&self.inner, true, scope)
    }

    /// Compacts the whole store: flushes, collects every value-log file
    /// with at least [`COMPACT_DISCARD_RATIO`] of garbage (or less, if
    /// `vlog_gc_discard_ratio` is lower), then merges every table down to
    /// the deepest level that holds data, dropping overwritten and deleted
    /// entries.
    pub fn compact_all(&self) -> Result<CompactReport> {
        self.inner.check_mutable("compacting")?;
        let before = self.file_counts();
        self.flush()?;
        // Every record is in tables now: a new head puts the old one
        // behind the replay pointer, where GC can take it.
        self.inner.retire_head()?;
        let scope = crate::gc::Scope::All {
            discard_ratio: self
                .inner
                .opts
                .vlog_gc_discard_ratio
                .min(COMPACT_DISCARD_RATIO),
        };
        let gc = crate::gc::collect(&self.inner, true, scope)?;
        // Rewritten values' pointers go to tables, and the entries they
        // replace are dropped by the compaction.
        self.compact_range(None, None)?;
        self.inner.delete_obsolete_files();
        let after = self.file_counts();
        Ok(CompactReport {
            tables_before: before.0,
            tables_after: after.0,
            vlog_files_before: before.1,
            vlog_files_after: after.1,
            bytes_before: before.2,
            bytes_after: after.2,
            gc,
        })
    }

    /// Tables, value-log files and their bytes in the current version.
    fn file_counts(&self) -> (usize, usize, u64) {
        let s = self.stats();
        let tables: usize = s.levels.iter().map(|(n, _)| n).sum();
        let table_bytes: u64 = s.levels.iter().map(|(_, b)| b).sum();
        (tables, s.vlog_files, table_bytes + s.vlog_bytes)
    }

    /// Closes the store: first leaves it tidy for the next process (see
    /// below), then stops background work, syncs the value log, records the
    /// head value-log file's final size in the manifest (so a later
    /// shortening of it is damage, not a torn tail) and releases the lock.
    /// Dropping a store skips the tidying (the head is still sealed); the
    /// next open replays what was not flushed.
    pub fn close(self) -> Result<()> {
        let tidied = self.tidy();
        let closed = self.shutdown();
        tidied.and(closed)
    }

    /// What `close` does before it stops the store, so that a short-lived
    /// process leaves no more behind than a long-lived one would:
    /// compactions run until none is due (level 0 stays under
    /// `l0_compaction_trigger` however many processes open and close the
    /// store), and no value-log file is left holding records that are
    /// already in tables. If nothing of the head value-log file was flushed
    /// yet and what it holds is small (a short command), it is left for the
    /// next open to replay and drop, as a crash would leave it; otherwise
    /// the memtable is flushed, the head replaced by a new file, and files
    /// behind the replay pointer that hold no value frame (or few enough to
    /// qualify for GC) are collected. Skipped after a background error.
    fn tidy(&self) -> Result<()> {
        if self.inner.is_read_only() || self.inner.bg_error().is_some() {
            return Ok(());
        }
        if !self.inner.head_is_small_and_unflushed() {
            self.flush()?;
        }
        crate::compaction::settle_for_close(&self.inner)?;
        if !self.inner.head_is_small_and_unflushed() {
            self.inner.retire_head()?;
        }
        let rewrite = self.inner.opts.vlog_gc_every_flushes > 0;
        // A lower ratio than the background's: what a command leaves stays
        // within 1 / (1 - CLOSE_DISCARD_RATIO) of the live value bytes it
        // knows of, at a few rewrites per byte reclaimed, paid once a close.
        let scope = crate::gc::Scope::Known {
            rewrite,
            discard_ratio: self
                .inner
                .opts
                .vlog_gc_discard_ratio
                .min(CLOSE_DISCARD_RATIO),
        };
        crate::gc::collect(&self.inner, true, scope)?;
        Ok(())
    }

    fn shutdown(&self) -> Result<()> {
        {
            let mut st = self.inner.state.lock();
            st.shutting_down = true;
            self.inner.bg_cv.notify_all();
        }
        for h in std::mem::take(&mut *self.bg.lock()) {
            let _ = h.join();
        }
        self.inner.delete_obsolete_files();
        let res = match self.inner.log.lock().take() {
            Some(mut log) => log.sync().and_then(|()| {
                let end = log.position();
                self.inner.log_and_apply(VersionEdit {
                    sealed_logs: vec![(end.file, end.offset, end.block)],
                    ..Default::default()
                })
            }),
            None => Ok(()),
        };
        self.inner.file_lock.lock().take();
        res
    }

    pub(crate) fn inner(&self) -> &Arc<DbInner> {
        &self.inner
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
