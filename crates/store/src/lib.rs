//! gvault-store: an LSM engine with a value log (seed 000's log-structured
//! index, made durable), in the shape of LevelDB.
//!
//! How the parts fit:
//!
//! - **Writes** (`db`): writers queue; the one at the head becomes the
//!   group-commit leader, takes the others' batches, appends them to the
//!   value log as one group (`log_writer`: large values as value frames,
//!   then one commit frame), fsyncs once if anyone asked for `sync`, inserts
//!   into the active `memtable` and publishes the group's last sequence
//!   number, so a batch becomes visible all at once. The value log is the
//!   write-ahead log; values of at least `value_threshold` bytes stay only
//!   there, and the tree holds a [`format::ValuePointer`].
//! - **Sealing** ([`codec`]): every block of every file goes through one
//!   [`codec::BlockCodec`], a whole batch at a time (a table, a group
//!   commit): CRC32C over the block's context and payload, or AES-256-GCM
//!   in an encrypted store, behind the same trait.
//! - **Flush and compaction** (`background`, `compaction`): a full
//!   memtable becomes immutable; the flush thread writes it as a
//!   level-0 table (`table_builder`: data blocks, `bloom` filter,
//!   index, footer) and moves the replay pointer past it in one
//!   `manifest` edit. Leveled compaction, on a thread of its own, merges
//!   tables down.
//! - **State** (`version`, `manifest`): the live files form a
//!   `version::Version`; each change is a `version::VersionEdit`
//!   appended to the manifest; the `CURRENT` pointer file names the
//!   manifest and is replaced atomically.
//! - **Recovery** (`recovery`): lock the directory (`dir_lock`), read
//!   CURRENT and the manifest, replay the value log from the replay pointer
//!   (`log_reader`), cut a torn tail, report any other damage as
//!   [`Error::Corruption`]. A read-only open (`readonly`) shares the lock
//!   with other readers and the same steps, but writes nothing.
//! - **Reads**: active memtable, immutable memtables, then level 0 (newest
//!   first) and each deeper level; the first entry found decides, a
//!   deletion included. A get takes no lock: the memtables and version are
//!   a read view published (`ArcSwap`) at each change, tables are opened
//!   once (`table_cache`, read in place), decoded blocks and opened
//!   value-log values sit in one sharded `cache` with a byte budget, and
//!   the value is copied once, from where it lies ([`Store::get_into`]
//!   into the caller's buffer), or not at all ([`Store::get_pinned`]
//!   shares the cached block or value, `pinned`). `db_iter`
//!   gives cursors and range scans in both directions at any snapshot;
//!   a scan caches the values it reads only until the cache is full, a get
//!   always (`cache`'s `Fill`).
//! - **Value-log GC** (`gc`) rewrites live values out of mostly-dead
//!   files (flushed commit frames count as dead), in the background every
//!   `vlog_gc_every_flushes` flushes and on [`Store::gc_value_log`]; files
//!   this process wrote that hold no value frame go as soon as the replay
//!   pointer passes them. `inspect` verifies every block and reports stats; [`salvage`] reads
//!   what still authenticates from a store too damaged to open.
//! - **Close** ([`Store::close`]) leaves the store as a long-lived process
//!   would: compactions no longer due, no value-log file holding records
//!   already in tables; [`Store::compact_all`] compacts everything.
//! - **Files** go through [`env::FileSystem`], so tests inject a full disk;
//!   [`MemFs`] holds files in memory (the CAS's key registry on object
//!   storage, the fuzz targets' files).
//!
//! docs/format.md in the repository describes every byte on disk.

mod background;
mod block;
mod bloom;
mod cache;
pub mod codec;
mod coding;
mod compaction;
pub mod crypto;
mod db;
mod db_iter;
mod dir_lock;
pub mod env;
pub mod error;
pub mod format;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gc;
mod inspect;
mod iterator;
pub mod keys;
mod level_iterator;
mod lock_order;
mod log_reader;
mod log_writer;
mod manifest;
mod mem_fs;
mod memtable;
pub mod options;
mod pinned;
mod read_ahead;
mod readonly;
mod recovery;
mod reseal;
mod rotation;
mod salvage;
mod table_builder;
mod table_cache;
mod table_reader;
mod version;
mod vlog;
mod write_batch;

pub use db::{
    CompactReport, ReadOptions, Snapshot, Store, COMPACT_DISCARD_RATIO, MAX_BATCH_BYTES,
    MAX_KEY_LEN,
};
pub use db_iter::{DbIterator, Scan};
pub use env::{FaultInjectingFs, FileSystem, OsFs};
pub use error::{Error, Result};
pub use gc::GcReport;
pub use inspect::{block_extents, block_extents_with, Stats, VerifyReport};
pub use keys::{Encryption, KdfParams, MasterKeySource};
pub use mem_fs::MemFs;
pub use options::{Options, WriteOptions};
pub use pinned::PinnedValue;
pub use rotation::{KeyStatus, ReencryptReport};
pub use salvage::{salvage, SalvageReport};
pub use write_batch::WriteBatch;

impl Store {
    /// A cursor over the store (or a snapshot of it); call a seek first.
    pub fn iter(&self, opts: &ReadOptions<'_>) -> Result<DbIterator> {
        DbIterator::new(self.inner(), opts)
    }

    /// Keys in [start, end) with their values, ascending or, with
    /// `reverse`, descending.
    pub fn scan(
        &self,
        opts: &ReadOptions<'_>,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        reverse: bool,
    ) -> Result<Scan> {
        Ok(Scan::new(
            self.iter(opts)?,
            start.map(<[u8]>::to_vec),
            end.map(<[u8]>::to_vec),
            reverse,
        ))
    }

    /// Reads and checks every block of every live file and every live value.
    pub fn verify(&self) -> Result<VerifyReport> {
        inspect::verify(self.inner(), &mut |_, _| {})
    }

    /// [`Store::verify`], calling `progress(bytes_checked, total_bytes)`
    /// after each live table and value-log file (for a progress bar; the
    /// walk over live values that follows is not counted).
    pub fn verify_with_progress(&self, progress: &mut dyn FnMut(u64, u64)) -> Result<VerifyReport> {
        inspect::verify(self.inner(), progress)
    }

    pub fn stats(&self) -> Stats {
        inspect::stats(self.inner())
    }

    /// Whether blocks are sealed with AES-256-GCM.
    pub fn is_encrypted(&self) -> bool {
        self.inner().keys.is_some()
    }

    /// Which live files use which data key.
    pub fn key_status(&self) -> Result<KeyStatus> {
        rotation::status(self.inner())
    }

    /// Adds a data key that new files use from now on; returns its id. Run
    /// [`Store::reencrypt`] (or [`Store::spawn_reencrypt`]) to move older
    /// files to it.
    pub fn rotate_data_key(&self) -> Result<u32> {
        self.inner().check_mutable("rotating the data key")?;
        rotation::rotate_data_key(self.inner())
    }

    /// Rewraps the key registry under a new master key (key or passphrase).
    pub fn rotate_master_key(&self, new: &Encryption) -> Result<()> {
        self.inner().check_mutable("rotating the master key")?;
        rotation::rotate_master_key(self.inner(), new)
    }

    /// Rewrites every live file still under an older data key, at most
    /// `options.reencrypt_bytes_per_sec`, then retires keys no file uses.
    /// Safe to interrupt: a later call resumes.
    pub fn reencrypt(&self) -> Result<ReencryptReport> {
        self.inner().check_mutable("re-encryption")?;
        let rate = self.inner().opts.reencrypt_bytes_per_sec;
        rotation::reencrypt(self.inner(), rate)
    }

    /// Runs [`Store::reencrypt`] on a background thread.
    pub fn spawn_reencrypt(
        self: &std::sync::Arc<Self>,
    ) -> std::thread::JoinHandle<Result<ReencryptReport>> {
        let s = self.clone();
        std::thread::spawn(move || s.reencrypt())
    }
}
