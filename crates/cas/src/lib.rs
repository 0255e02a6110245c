//! gvault-cas: a content-addressable, deduplicating, encrypted backup
//! repository (seed 001's content-addressable store, grown up).
//!
//! - [`backend`]: whole immutable objects behind a [`Backend`] trait; the
//!   local directory ([`LocalDir`]) with atomic writes.
//! - [`backend_s3`]: S3-compatible object storage ([`S3Backend`]).
//! - [`backend_cache`]: a local cache of a remote repository's index files
//!   and snapshots ([`CachedBackend`]).
//! - [`repo`]: config (format version, chunker), keys (gvault-store's key
//!   registry; per-object keys derived from the data key), [`Repository`].
//! - [`pack`], [`index`], [`snapshot`]: the objects; [`lock`]: locks.
//! - [`backup`], [`restore`], [`maintenance`]: the operations; a restore
//!   reads one large file's chunks straight into a [`mapped_file`] by
//!   every core and opens them there, and a backup times its stages with
//!   `GVAULT_CAS_TRACE` (`stage_clock`).
//! - [`accel_jobs`]: every call into gvault-accel (chunk + id, seal, open).
//! - [`checkpoint`]: tensor checkpoints as snapshots, sealed on the host or
//!   on the GPU that holds them (the engine behind `gvault.checkpoint`).
//!
//! docs/repository.md pins every byte.

pub mod accel_jobs;
pub mod backend;
pub mod backend_cache;
pub mod backend_s3;
pub mod backup;
pub mod checkpoint;
mod coding;
pub mod error;
pub mod extsort;
pub mod forget;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod lock;
pub mod maintenance;
pub mod mapped_file;
pub mod pack;
pub mod repo;
pub mod restore;
pub mod snapshot;
mod stage_clock;
mod work_queue;

pub use backend::{Backend, Kind, LocalDir};
pub use backend_cache::{CacheStats, CachedBackend};
pub use backend_s3::{S3Backend, S3Credentials, S3Options};
pub use backup::{backup, backup_reader, copy_snapshot, BackupSummary, Progress};
pub use error::{Error, Result};
pub use forget::{forget_with, ForgetReport, Policy, Span};
pub use maintenance::{
    check, diff, forget, prune, stats, CheckReport, DiffReport, PruneReport, Stats,
};
pub use repo::{Chunker, Config, InitOptions, Repository, FORMAT_VERSION};
pub use restore::{dump, restore, Pattern, RestoreSummary};
pub use snapshot::{Entry, EntryKind, Snapshot};
