//! The lock on a store directory: `flock` on its `LOCK` file, exclusive for
//! a read-write open and shared for a read-only one, so any number of
//! readers or one writer hold the store at a time. An open that finds the
//! lock taken polls for it, with backoff, up to `Options::lock_timeout`.

use std::io::ErrorKind;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::env::FileLock;
use crate::error::{Error, Result};
use crate::format::LOCK_FILE;
use crate::options::Options;

/// How an open uses the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    ReadWrite,
    ReadOnly,
}

/// The first pause between two tries, doubled after each up to
/// `MAX_PAUSE`: a one-shot command holds the store for milliseconds, so
/// early tries come quickly; a long holder costs a try every 50 ms.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// Locks `dir` for `access`, waiting up to `opts.lock_timeout`. A read-only
/// open of a store that has no `LOCK` file returns `None`: it may not
/// create one (it writes nothing), and no read-write open has the store,
/// since each creates `LOCK` before it reads anything and nothing removes
/// it. Such a reader is not protected from a writer that opens later, but
/// it cannot be misled by one either: files are never rewritten with other
/// contents nor their numbers reused, so the worst it meets is a file
/// removed under it, reported as an error. A warning says so.
pub(crate) fn acquire(
    opts: &Options,
    dir: &Path,
    access: Access,
) -> Result<Option<Box<dyn FileLock>>> {
    let path = dir.join(LOCK_FILE);
    // No deadline: a timeout too long to add to the clock waits for ever.
    let deadline = Instant::now().checked_add(opts.lock_timeout);
    let mut pause = FIRST_PAUSE;
    loop {
        let tried = match access {
            Access::ReadWrite => opts.fs.lock(&path),
            Access::ReadOnly => opts.fs.lock_shared(&path),
        };
        let e = match tried {
            Ok(lock) => return Ok(Some(lock)),
            Err(e) => e,
        };
        match e.kind() {
            ErrorKind::WouldBlock => {
                let now = Instant::now();
                let left = deadline.map(|d| d.saturating_duration_since(now));
                if left.is_some_and(|l| l.is_zero()) {
                    return Err(Error::Locked {
                        dir: dir.to_owned(),
                        waited: opts.lock_timeout,
                    });
                }
                std::thread::sleep(left.map_or(pause, |l| l.min(pause)));
                pause = (pause * 2).min(MAX_PAUSE);
            }
            ErrorKind::NotFound if access == Access::ReadOnly => {
                opts.warn(&format!(
                    "{} has no {LOCK_FILE} file (no read-write open has made one), and a read-only open creates none: reading without a lock",
                    dir.display()
                ));
                return Ok(None);
            }
            ErrorKind::NotADirectory => {
                return Err(Error::NotAStore {
                    path: dir.to_owned(),
                    reason: "it is a file, not a directory".into(),
                })
            }
            _ => return Err(Error::io(format!("locking {}", path.display()), e)),
        }
    }
}
