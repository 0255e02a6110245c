//! The repository's one error type: each variant says what failed and where,
//! so that a user can act on it.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// An object of the repository is not what was written.
    #[error("damaged {object}: {reason}; run `gvault repo check --read-data` for a full report")]
    Corrupt { object: String, reason: String },
    #[error("{path} is not a gvault repository: {reason}")]
    NotARepository { path: PathBuf, reason: String },
    #[error("repository {path} has format version {found}; this build reads up to {supported} (upgrade gvault)")]
    NewerFormat {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    #[error("repository {dir} needs its master key (--key-file, --passphrase-env, GVAULT_KEY_FILE, GVAULT_KEY or GVAULT_PASSPHRASE)")]
    KeyRequired { dir: PathBuf },
    /// Errors of the key registry (wrong key, damaged `keys/KEYS`).
    #[error(transparent)]
    Keys(#[from] gvault_store::Error),
    #[error("repository is locked: {0}")]
    Locked(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("accelerator: {0}")]
    Accel(String),
}

impl Error {
    pub fn corrupt(object: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Corrupt {
            object: object.into(),
            reason: reason.into(),
        }
    }
}

/// Adds a description of what was being done to an I/O error.
pub trait IoContext<T> {
    fn ctx<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|source| Error::Io {
            context: what().into(),
            source,
        })
    }
}
