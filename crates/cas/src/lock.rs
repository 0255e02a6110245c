//! Repository locks (docs/repository.md §7): an object `locks/<random id>`
//! per holder. Backups hold shared locks, prune an exclusive one. A taker
//! first writes its lock, then lists the others: a shared taker that sees
//! a live exclusive lock, or an exclusive taker that sees any other live
//! lock, removes its own and fails. Two takers racing both see each other
//! and both back off, so the exclusion holds without an atomic
//! compare-and-swap in the backend.
//!
//! A lock is stale, and ignored and removed, when its holder is a process
//! of this host that no longer runs, or when it has not been refreshed for
//! `STALE_AFTER` (holders rewrite theirs every `REFRESH_EVERY`).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::backend::{Backend, Kind};
use crate::error::{Error, Result};

pub const REFRESH_EVERY: Duration = Duration::from_secs(300);
pub const STALE_AFTER: Duration = Duration::from_secs(1800);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    pub exclusive: bool,
    pub hostname: String,
    pub pid: u32,
    pub time: u64,
}

impl LockInfo {
    pub(crate) fn encode(&self) -> Vec<u8> {
        format!(
            "gvault-cas-lock 1 {} {} {} {}\n",
            if self.exclusive {
                "exclusive"
            } else {
                "shared"
            },
            self.pid,
            self.time,
            self.hostname
        )
        .into_bytes()
    }
    pub(crate) fn decode(b: &[u8]) -> Option<LockInfo> {
        let s = std::str::from_utf8(b).ok()?.trim_end_matches('\n');
        let mut it = s.splitn(6, ' ');
        if it.next()? != "gvault-cas-lock" || it.next()? != "1" {
            return None;
        }
        let exclusive = match it.next()? {
            "exclusive" => true,
            "shared" => false,
            _ => return None,
        };
        Some(LockInfo {
            exclusive,
            pid: it.next()?.parse().ok()?,
            time: it.next()?.parse().ok()?,
            hostname: it.next()?.to_string(),
        })
    }

    pub(crate) fn is_stale(&self, now: u64) -> bool {
        if self.hostname == hostname() && !process_alive(self.pid) {
            return true;
        }
        now.saturating_sub(self.time) > STALE_AFTER.as_secs()
    }

    pub fn describe(&self) -> String {
        format!(
            "{} lock of process {} on {}",
            if self.exclusive {
                "an exclusive"
            } else {
                "a shared"
            },
            self.pid,
            self.hostname
        )
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "unknown".into();
    }
    let n = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).replace(' ', "_")
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// A held lock; dropping it removes the lock object.
pub struct Lock {
    backend: Arc<dyn Backend>,
    name: String,
    /// Dropped to stop the refresher, which wakes at once.
    stop: Option<mpsc::Sender<()>>,
    refresher: Option<std::thread::JoinHandle<()>>,
}

impl Lock {
    pub fn shared(backend: Arc<dyn Backend>) -> Result<Lock> {
        Self::take(backend, false)
    }
    pub fn exclusive(backend: Arc<dyn Backend>) -> Result<Lock> {
        Self::take(backend, true)
    }

    fn take(backend: Arc<dyn Backend>, exclusive: bool) -> Result<Lock> {
        let name = hex::encode(gvault_store::keys::random_bytes::<32>());
        let mut info = LockInfo {
            exclusive,
            hostname: hostname(),
            pid: std::process::id(),
            time: now_secs(),
        };
        backend.put(Kind::Lock, &name, &info.encode())?;
        let mut lock = Lock {
            backend: backend.clone(),
            name: name.clone(),
            stop: None,
            refresher: None,
        };
        if let Some(other) = conflicting(&*backend, &name, exclusive)? {
            return Err(Error::Locked(format!(
                "{} holds it; wait for it to finish (a lock of a process that died on this host, or one not refreshed for {} minutes, is ignored)",
                other.describe(),
                STALE_AFTER.as_secs() / 60
            )));
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let b = backend.clone();
        let n = name.clone();
        let refresher = std::thread::spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(REFRESH_EVERY) {
                info.time = now_secs();
                let _ = b.put(Kind::Lock, &n, &info.encode());
            }
        });
        lock.stop = Some(stop);
        lock.refresher = Some(refresher);
        Ok(lock)
    }
}

/// A live lock other than `own` that excludes a lock of this kind; stale
/// locks found on the way are removed.
fn conflicting(backend: &dyn Backend, own: &str, exclusive: bool) -> Result<Option<LockInfo>> {
    let now = now_secs();
    for n in backend.list(Kind::Lock)? {
        if n == own {
            continue;
        }
        let Ok(bytes) = backend.get(Kind::Lock, &n) else {
            continue; // removed meanwhile
        };
        let Some(info) = LockInfo::decode(&bytes) else {
            continue; // not a lock this build writes: ignored
        };
        if info.is_stale(now) {
            let _ = backend.delete(Kind::Lock, &n);
            continue;
        }
        if exclusive || info.exclusive {
            return Ok(Some(info));
        }
    }
    Ok(None)
}

impl Lock {
    /// Fails when the lock object is gone: another process found it stale
    /// (not refreshed in time) and removed it, so a prune may have run.
    pub fn check_held(&self) -> Result<()> {
        if self.backend.exists(Kind::Lock, &self.name)? {
            Ok(())
        } else {
            Err(Error::Locked(
                "this process's lock was removed as stale by another process; nothing was committed, run the command again".into(),
            ))
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.refresher.take() {
            let _ = h.join();
        }
        let _ = self.backend.delete(Kind::Lock, &self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LocalDir;

    #[test]
    fn shared_locks_coexist_exclusive_excludes_and_stale_locks_are_ignored() {
        let d = tempfile::tempdir().unwrap();
        let local = LocalDir::new(d.path());
        local.create_dirs().unwrap();
        let b: Arc<dyn Backend> = Arc::new(local);
        let s1 = Lock::shared(b.clone()).unwrap();
        let s2 = Lock::shared(b.clone()).unwrap();
        assert!(matches!(Lock::exclusive(b.clone()), Err(Error::Locked(_))));
        // The failed taker removed its own lock.
        assert_eq!(b.list(Kind::Lock).unwrap().len(), 2);
        drop((s1, s2));
        assert!(b.list(Kind::Lock).unwrap().is_empty());
        let x = Lock::exclusive(b.clone()).unwrap();
        assert!(matches!(Lock::shared(b.clone()), Err(Error::Locked(_))));
        drop(x);
        // A lock of a dead process of this host is stale.
        let dead = LockInfo {
            exclusive: true,
            hostname: hostname(),
            pid: i32::MAX as u32 - 7,
            time: now_secs(),
        };
        b.put(Kind::Lock, "dead", &dead.encode()).unwrap();
        let s = Lock::shared(b.clone()).unwrap();
        assert!(!b.list(Kind::Lock).unwrap().contains(&"dead".to_string()));
        drop(s);
        // An old lock of another host is stale too; a fresh one is not.
        let mut other = LockInfo {
            exclusive: true,
            hostname: "elsewhere".into(),
            pid: 1,
            time: now_secs(),
        };
        b.put(Kind::Lock, "other", &other.encode()).unwrap();
        assert!(Lock::shared(b.clone()).is_err());
        other.time -= STALE_AFTER.as_secs() + 1;
        b.put(Kind::Lock, "other", &other.encode()).unwrap();
        assert!(Lock::shared(b.clone()).is_ok());
    }
}
