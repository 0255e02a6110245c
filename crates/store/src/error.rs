//! The store's one error type. Every variant says what went wrong and where,
//! so that a user can act on it (restore a file, free space, stop the other
//! process) without reading the code.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The operating system refused an operation (disk full, permissions, ...).
    #[error("I/O error {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: Arc<std::io::Error>,
    },

    /// A file of the store failed a check: its bytes are not what the store
    /// wrote. Nothing from it is returned.
    #[error("corruption in {file} ({location}): {reason}; restore the file from a backup or run `gvault verify` for a full report")]
    Corruption {
        file: PathBuf,
        /// Where in the file, e.g. "block 7 at offset 32768".
        location: String,
        reason: String,
    },

    /// Another process (or another handle in this one) has the store open
    /// in a way this open cannot share, and did not let go within
    /// `Options::lock_timeout` (`waited`).
    #[error("{}", locked_message(dir, *waited))]
    Locked { dir: PathBuf, waited: Duration },

    /// The store was opened read-only (`Options::read_only`) and the call
    /// would change it.
    #[error("store {dir} is open read-only: {operation} needs a read-write open")]
    ReadOnly { dir: PathBuf, operation: String },

    /// The directory holds something that is not a gvault store.
    #[error("{path} is not a gvault store: {reason}")]
    NotAStore { path: PathBuf, reason: String },

    /// The directory does not exist and the options did not ask to create it.
    #[error("no store at {dir}; create it with `gvault init` (or open with create_if_missing)")]
    NotFound { dir: PathBuf },

    /// The caller passed something the store cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The file was written by a newer gvault or needs a key this build lacks.
    #[error("{path} is not supported by this build: {reason}")]
    Unsupported { path: PathBuf, reason: String },

    /// The store is encrypted and no master key was given.
    #[error("store {dir} is encrypted; give its master key (--key-file, --passphrase-env, GVAULT_KEY_FILE, GVAULT_KEY or GVAULT_PASSPHRASE; the CLI also looks for the key file `gvault init --encrypt` makes beside the store, <store>.key)")]
    KeyRequired { dir: PathBuf },

    /// The master key given does not open the store's key registry. Nothing
    /// else was read.
    #[error("wrong master key for {path}: {reason}")]
    WrongKey { path: PathBuf, reason: String },

    /// The accelerator could not run a sealing job.
    #[error("sealing failed: {0}")]
    Seal(String),

    /// The store was closed, or stopped accepting writes after an earlier
    /// failure (the earlier error is named).
    #[error("store is closed or read-only after an earlier error: {0}")]
    Closed(String),
}

impl Error {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source: Arc::new(source),
        }
    }

    pub fn corruption(
        file: impl Into<PathBuf>,
        location: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            location: location.into(),
            reason: reason.into(),
        }
    }

    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

fn locked_message(dir: &Path, waited: Duration) -> String {
    let how = "close it there first, or let this open wait longer for it (`--wait SECS` on the command line, Options::lock_timeout in the library)";
    if waited.is_zero() {
        format!(
            "store {} is locked by another process; {how}",
            dir.display()
        )
    } else {
        format!(
            "store {} stayed locked by another process for the {:.1} s this open waited; {how}",
            dir.display(),
            waited.as_secs_f64()
        )
    }
}

/// Attaches "what we were doing" to an `io::Error`.
pub(crate) trait IoContext<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}
