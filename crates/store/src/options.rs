//! Every knob of the store, read in one place. Defaults suit a desktop
//! machine; tests shrink the sizes to exercise flushes and compactions.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use gvault_accel::{AutoBackend, Backend};

use crate::crypto::SealObserver;
use crate::env::{FileSystem, OsFs};
use crate::error::{Error, Result};
use crate::keys::Encryption;

/// Receives recovery warnings (a torn tail cut, an orphan file removed).
pub type WarningSink = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone)]
pub struct Options {
    /// Create the directory and an empty store when none exists.
    pub create_if_missing: bool,
    /// Fail if a store already exists.
    pub error_if_exists: bool,
    /// Open an existing store for reading only, sharing it with any number
    /// of other readers: the open writes nothing (no file created, changed
    /// or removed; `LOCK` is not created when missing), replays unflushed
    /// writes into memory, and starts no background thread. Writes, flush,
    /// compaction, GC, key rotation and re-encryption fail with
    /// [`Error::ReadOnly`]. `create_if_missing` is ignored.
    pub read_only: bool,
    /// How long an open waits for another process to let go of the store
    /// before it fails with [`Error::Locked`]: a read-write open needs the
    /// store to itself, a read-only one waits only for a read-write holder.
    /// Zero (the default) fails at once: a program embedding the store
    /// usually holds it for its whole run, so a second holder is a mistake
    /// better reported than waited out. The `gvault` command, whose
    /// invocations each hold the store for a moment, waits 30 s.
    pub lock_timeout: Duration,
    /// Bytes of memtable before it becomes immutable and is flushed.
    /// 16 MiB by default: against 8 MiB, sequential fills flush half as
    /// often (+12% at 100 B on the H200 host); larger ones make random
    /// inserts slower (a deeper, less cached skip list: at 64 MiB a
    /// 100-byte fillrandom ran 0.58x of 8 MiB). `gvault bench lsm
    /// --memtable-mb` sweeps it.
    pub write_buffer_size: usize,
    /// Immutable memtables allowed to wait for a flush before writers block.
    pub max_immutable_memtables: usize,
    /// Values of at least this many bytes live only in the value log.
    pub value_threshold: usize,
    /// Target uncompressed size of a table data block.
    pub block_size: usize,
    pub block_restart_interval: usize,
    pub bloom_bits_per_key: usize,
    /// Byte budget of the block cache (sharded S3-FIFO): decoded table
    /// blocks and opened value-log values. Gets cache the values they read;
    /// scans only until the cache is full, so that a scan over more than it
    /// holds does not churn it.
    pub block_cache_bytes: usize,
    pub max_open_tables: usize,
    /// Target size of a table written by compaction.
    pub table_file_size: u64,
    /// Size limit of level 1; each deeper level is `level_size_multiplier`
    /// times larger.
    pub level1_max_bytes: u64,
    pub level_size_multiplier: u64,
    /// Level-0 tables that trigger a compaction into level 1.
    pub l0_compaction_trigger: usize,
    /// Level-0 tables at which writers wait for compaction.
    pub l0_stop_writes_trigger: usize,
    /// A value-log file is closed and a new one started past this size.
    pub vlog_file_size: u64,
    /// Value-log GC rewrites a file once at least this fraction of its
    /// value bytes is garbage.
    pub vlog_gc_discard_ratio: f64,
    /// The flush thread runs a full value-log GC pass after this many
    /// flushes (0: only when `Store::gc_value_log` is called).
    pub vlog_gc_every_flushes: usize,
    pub fs: Arc<dyn FileSystem>,
    pub warning_sink: WarningSink,
    /// Encryption at rest: required to open an encrypted store, and creates
    /// one when the store does not exist yet. `None`: CRC32C only.
    pub encryption: Option<Encryption>,
    /// The accelerator that seals and opens blocks. Default: the auto
    /// backend shared by the process ([`AutoBackend::shared`]: CPU or GPU
    /// per job; the GPU opens only for a job worth it). `None`: the CPU
    /// backend shared by the process (`CpuBackend::shared`). Seals go one
    /// job per group commit or table, opens one call per block read (one
    /// job per batch a read-ahead opens).
    pub crypto_backend: Option<Arc<dyn Backend>>,
    /// Sees every (data-key id, nonce) pair before it seals a block.
    pub seal_observer: Option<SealObserver>,
    /// Byte-rate limit of the background re-encryption pass after a data
    /// key rotation (bytes of old files read per second; each is written
    /// once more).
    pub reencrypt_bytes_per_sec: u64,
    /// Forward iteration of an encrypted store reads value-log values
    /// ahead on a worker thread of the iterator: batches of up to 1 MiB of
    /// frames, read and opened on the pool while the iterating thread
    /// consumes the previous batch. `None`: on for encrypted stores on a
    /// machine of at least `READ_AHEAD_MIN_CORES` cores. The pipeline takes
    /// the scout's walk, the reads and the decryption off the iterating
    /// thread, at the price of more CPU in all (a second walk of the
    /// tables, the hand-offs, a copy out of the batch). On the 2-core
    /// development machine, a whole-store scan (wall, median of 5): 4 KiB
    /// values 0.87 of plain with it against 0.76 without, 64 KiB values
    /// 1.04 against 0.81; the iterating thread's CPU per entry fell from
    /// 2.3 to 0.5 us (4 KiB) and from 24.7 to 5.9 us (64 KiB). Plain stores
    /// never read ahead (a CRC32C is cheaper than the hand-off).
    pub read_ahead: Option<bool>,
}

/// Cores a machine needs for `read_ahead: None` to turn the pipelined
/// read-ahead on: on one core the worker could only take turns with the
/// iterating thread, adding its overhead to the scan.
pub const READ_AHEAD_MIN_CORES: usize = 2;

/// Cores per iterator reading ahead at once (with `read_ahead: None`): each
/// one's worker spreads its reads and opens over every core, so a few fill
/// the machine. While more cursors that would read ahead are open than
/// cores / this, none does: they open inline until enough are dropped. On the
/// H100 host, 16 cursors all reading ahead scanned at 0.46 of plain (4 KiB
/// values), none of them while crowded at 0.78 (one open per value).
pub const CORES_PER_READ_AHEAD: usize = 8;

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            read_only: false,
            lock_timeout: Duration::ZERO,
            write_buffer_size: 16 << 20,
            max_immutable_memtables: 2,
            value_threshold: 1024,
            block_size: 4096,
            block_restart_interval: 16,
            bloom_bits_per_key: 10,
            block_cache_bytes: 32 << 20,
            max_open_tables: 1000,
            table_file_size: 4 << 20,
            level1_max_bytes: 32 << 20,
            level_size_multiplier: 10,
            l0_compaction_trigger: 4,
            l0_stop_writes_trigger: 12,
            vlog_file_size: 128 << 20,
            vlog_gc_discard_ratio: 0.5,
            vlog_gc_every_flushes: 8,
            fs: Arc::new(OsFs),
            warning_sink: Arc::new(|msg: &str| eprintln!("gvault-store warning: {msg}")),
            encryption: None,
            crypto_backend: Some(AutoBackend::shared()),
            seal_observer: None,
            reencrypt_bytes_per_sec: 32 << 20,
            read_ahead: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("create_if_missing", &self.create_if_missing)
            .field("read_only", &self.read_only)
            .field("lock_timeout", &self.lock_timeout)
            .field("write_buffer_size", &self.write_buffer_size)
            .field("value_threshold", &self.value_threshold)
            .field("table_file_size", &self.table_file_size)
            .field("vlog_file_size", &self.vlog_file_size)
            .field("encrypted", &self.encryption.is_some())
            .field(
                "crypto_backend",
                &self.crypto_backend.as_ref().map(|b| b.name()),
            )
            .finish_non_exhaustive()
    }
}

impl Options {
    pub(crate) fn validate(&self) -> Result<()> {
        let check = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!("option {what}")))
            }
        };
        check(
            !(self.read_only && self.error_if_exists),
            "error_if_exists cannot be combined with read_only (a read-only open needs an existing store)",
        )?;
        check(
            self.write_buffer_size >= 1024,
            "write_buffer_size must be at least 1 KiB",
        )?;
        check(
            self.max_immutable_memtables >= 1,
            "max_immutable_memtables must be at least 1",
        )?;
        check(
            self.value_threshold >= 1,
            "value_threshold must be at least 1",
        )?;
        check(self.block_size >= 64, "block_size must be at least 64")?;
        check(
            self.block_restart_interval >= 1,
            "block_restart_interval must be at least 1",
        )?;
        check(
            self.table_file_size >= 1024,
            "table_file_size must be at least 1 KiB",
        )?;
        check(
            self.level_size_multiplier >= 2,
            "level_size_multiplier must be at least 2",
        )?;
        check(
            self.l0_compaction_trigger >= 1,
            "l0_compaction_trigger must be at least 1",
        )?;
        check(
            self.l0_stop_writes_trigger > self.l0_compaction_trigger,
            "l0_stop_writes_trigger must exceed l0_compaction_trigger",
        )?;
        check(
            self.vlog_file_size >= 4096,
            "vlog_file_size must be at least 4 KiB",
        )?;
        check(
            self.reencrypt_bytes_per_sec >= 4096,
            "reencrypt_bytes_per_sec must be at least 4096",
        )?;
        check(
            (0.0..=1.0).contains(&self.vlog_gc_discard_ratio),
            "vlog_gc_discard_ratio must be within 0..=1",
        )?;
        Ok(())
    }

    pub(crate) fn warn(&self, msg: &str) {
        (self.warning_sink)(msg)
    }
}

/// Per-write options.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOptions {
    /// Return only once the write is on stable storage (one fsync per group
    /// commit, shared by every writer in the group).
    pub sync: bool,
}

impl WriteOptions {
    pub const SYNC: WriteOptions = WriteOptions { sync: true };
}
