//! A local cache of a remote repository's metadata: [`CachedBackend`] wraps
//! any [`Backend`] and keeps a copy of every index file and snapshot it
//! reads or writes under `<cache root>/<repository id>/{index,snapshots}/`,
//! so that a backup, restore or `snapshots` against object storage does not
//! download every index file and snapshot again each time.
//!
//! Why a stale cache can never give wrong data or lose a chunk:
//! - Index files and snapshots are immutable and named by a random 256-bit
//!   id, so the bytes cached under a name are the bytes of that name for
//!   as long as it exists. Packs (too big, read once) and locks (rewritten
//!   in place) are never cached; nor are the root objects (`keys/KEYS` is
//!   rewritten when keys change; `config` names the cache, so it is read
//!   from the repository first anyway).
//! - Listings always go to the repository: a backup learns about index
//!   files written by others, and prune sees every index file. Cached files
//!   the listing no longer names (deleted by prune or forget elsewhere) are
//!   removed, and an object is served from the cache only once this process
//!   has seen its name in a listing, or written it: a name deleted from the
//!   repository is never served as live.
//! - Each cached file carries a BLAKE3 hash of its bytes, checked before
//!   the file is first used by a process; a damaged file is deleted and
//!   the object downloaded again. Above that, the repository authenticates
//!   cached bytes exactly as downloaded ones (AES-256-GCM under a key
//!   derived from the object's id), and an object that fails is dropped
//!   from the cache and read again from the repository
//!   ([`Backend::drop_cached`]).
//! - The cache is best effort: a cache file that cannot be written is not
//!   an error (the object is served from the repository's bytes).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{Backend, Kind};
use crate::error::{Error, IoContext, Result};

/// Objects larger than this are not cached (read by range from the
/// repository as before): they would be held whole in memory to fill it.
pub const MAX_CACHED_OBJECT: u64 = 256 << 20;
const HASH_LEN: usize = 32;
const TEMP_PREFIX: &str = ".tmp-";

/// What the cache saved and did, for tests and reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    /// Reads (get, get_range, size) answered from the cache.
    pub hits: u64,
    /// Whole objects downloaded to fill the cache.
    pub downloads: u64,
    pub bytes_downloaded: u64,
    /// Cached files whose hash did not match (deleted and downloaded again).
    pub corrupt: u64,
    /// Cached objects the repository no longer lists (deleted).
    pub evicted: u64,
    /// Objects the repository could not authenticate from the cache
    /// (dropped, then read again from the repository).
    pub dropped: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    downloads: AtomicU64,
    bytes_downloaded: AtomicU64,
    corrupt: AtomicU64,
    evicted: AtomicU64,
    dropped: AtomicU64,
}

/// What this process knows of one cached kind.
#[derive(Default)]
struct KindState {
    /// Names the latest listing gave, or that this process wrote: only
    /// these are served from the cache.
    live: HashSet<String>,
    /// Cache files whose hash this process checked: name → object length.
    verified: HashMap<String, u64>,
    /// Objects too large to cache.
    too_big: HashSet<String>,
}

/// A [`Backend`] that caches index files and snapshots on local disk.
pub struct CachedBackend {
    inner: Arc<dyn Backend>,
    dir: PathBuf,
    state: Mutex<HashMap<Kind, KindState>>,
    n: Counters,
}

fn cached(kind: Kind) -> bool {
    matches!(kind, Kind::Index | Kind::Snapshot)
}

/// The default root of caches: `$XDG_CACHE_HOME/gvault/repos`, else
/// `~/.cache/gvault/repos`; `None` without either variable.
pub fn default_cache_root() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty() && Path::new(v).is_absolute())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("gvault").join("repos"))
}

impl CachedBackend {
    /// Caches `inner`'s metadata in `dir` (one repository's own directory,
    /// created if missing).
    pub fn new(inner: Arc<dyn Backend>, dir: impl Into<PathBuf>) -> Result<CachedBackend> {
        let dir = dir.into();
        for k in [Kind::Index, Kind::Snapshot] {
            let d = dir.join(k.dir());
            fs::create_dir_all(&d).ctx(|| {
                format!(
                    "creating the cache directory {} (pass --cache-dir DIR, or --no-cache)",
                    d.display()
                )
            })?;
        }
        // Marks the directory as a cache for backup tools (bford.info/cachedir).
        if let Some(root) = dir.parent() {
            let tag = root.join("CACHEDIR.TAG");
            if !tag.exists() {
                let _ = fs::write(
                    &tag,
                    "Signature: 8a477f597d28d172789f06886806bc55\n# gvault's cache of repository metadata; safe to delete.\n",
                );
            }
        }
        Ok(CachedBackend {
            inner,
            dir,
            state: Mutex::new(HashMap::new()),
            n: Counters::default(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn inner(&self) -> &Arc<dyn Backend> {
        &self.inner
    }

    pub fn stats(&self) -> CacheStats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CacheStats {
            hits: g(&self.n.hits),
            downloads: g(&self.n.downloads),
            bytes_downloaded: g(&self.n.bytes_downloaded),
            corrupt: g(&self.n.corrupt),
            evicted: g(&self.n.evicted),
            dropped: g(&self.n.dropped),
        }
    }

    fn path(&self, kind: Kind, name: &str) -> PathBuf {
        self.dir.join(kind.dir()).join(name)
    }

    fn with<T>(&self, kind: Kind, f: impl FnOnce(&mut KindState) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(s.entry(kind).or_default())
    }

    /// Stores `data` as the cached copy of `name`, with its hash, by an
    /// atomic rename (a torn file fails its hash); errors are ignored.
    fn store(&self, kind: Kind, name: &str, data: &[u8]) {
        let d = self.dir.join(kind.dir());
        let tmp = d.join(format!(
            "{TEMP_PREFIX}{name}-{}",
            hex::encode(gvault_store::keys::random_bytes::<8>())
        ));
        let ok = (|| {
            let mut f = File::create(&tmp)?;
            f.write_all(data)?;
            f.write_all(blake3::hash(data).as_bytes())?;
            drop(f);
            fs::rename(&tmp, d.join(name))
        })();
        if ok.is_err() {
            let _ = fs::remove_file(&tmp);
            return;
        }
        self.with(kind, |s| {
            s.verified.insert(name.to_string(), data.len() as u64);
        });
    }

    /// Reads and checks the cached copy of `name`: its bytes if the hash
    /// matches; a damaged copy is deleted.
    fn load(&self, kind: Kind, name: &str) -> Option<Vec<u8>> {
        let p = self.path(kind, name);
        let mut b = fs::read(&p).ok()?;
        let good = b.len() >= HASH_LEN && {
            let split = b.len() - HASH_LEN;
            blake3::hash(&b[..split]).as_bytes()[..] == b[split..]
        };
        if !good {
            self.n.corrupt.fetch_add(1, Ordering::Relaxed);
            let _ = fs::remove_file(&p);
            self.with(kind, |s| s.verified.remove(name));
            return None;
        }
        b.truncate(b.len() - HASH_LEN);
        self.with(kind, |s| {
            s.verified.insert(name.to_string(), b.len() as u64);
        });
        Some(b)
    }

    /// Whether `name` may be served from the cache: listed or written by
    /// this process.
    fn live(&self, kind: Kind, name: &str) -> bool {
        self.with(kind, |s| s.live.contains(name))
    }

    /// The object whole: from the cache if it is there and whole, else
    /// downloaded (and cached).
    fn whole(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        if self.live(kind, name) {
            if let Some(b) = self.load(kind, name) {
                self.n.hits.fetch_add(1, Ordering::Relaxed);
                return Ok(b);
            }
        }
        let b = self.inner.get(kind, name)?;
        self.n.downloads.fetch_add(1, Ordering::Relaxed);
        self.n
            .bytes_downloaded
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        if b.len() as u64 <= MAX_CACHED_OBJECT {
            self.store(kind, name, &b);
        }
        Ok(b)
    }

    /// The length of a cached, checked copy of a listed `name` (checking
    /// it, or downloading it whole, on first use), and whether the cache
    /// already had it; `None`: read it from the repository.
    fn ensure(&self, kind: Kind, name: &str) -> Result<Option<(u64, bool)>> {
        let (live, known, big) = self.with(kind, |s| {
            (
                s.live.contains(name),
                s.verified.get(name).copied(),
                s.too_big.contains(name),
            )
        });
        if big || !live {
            return Ok(None);
        }
        if let Some(len) = known {
            return Ok(Some((len, true)));
        }
        if let Some(b) = self.load(kind, name) {
            return Ok(Some((b.len() as u64, true)));
        }
        let size = self.inner.size(kind, name)?;
        if size > MAX_CACHED_OBJECT {
            self.with(kind, |s| s.too_big.insert(name.to_string()));
            return Ok(None);
        }
        let b = self.inner.get(kind, name)?;
        self.n.downloads.fetch_add(1, Ordering::Relaxed);
        self.n
            .bytes_downloaded
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        self.store(kind, name, &b);
        // Served from the cache only if the copy could be written.
        Ok(self
            .with(kind, |s| s.verified.contains_key(name))
            .then_some((b.len() as u64, false)))
    }
}

impl Backend for CachedBackend {
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()> {
        self.inner.put(kind, name, data)?;
        if cached(kind) && data.len() as u64 <= MAX_CACHED_OBJECT {
            // What was written is what the repository now holds.
            self.with(kind, |s| s.live.insert(name.to_string()));
            self.store(kind, name, data);
        }
        Ok(())
    }
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        if !cached(kind) {
            return self.inner.get(kind, name);
        }
        self.whole(kind, name)
    }
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        if !cached(kind) {
            return self.inner.get_range(kind, name, offset, len);
        }
        let Some((size, _)) = self.ensure(kind, name)? else {
            return self.inner.get_range(kind, name, offset, len);
        };
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(Error::Io {
                context: format!("reading {len} bytes at {offset} of {}/{name}", kind.dir()),
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the object is too short ({size} bytes)"),
                ),
            });
        }
        let mut buf = vec![0u8; len];
        let p = self.path(kind, name);
        match File::open(&p).and_then(|f| f.read_exact_at(&mut buf, offset)) {
            Ok(()) => {
                self.n.hits.fetch_add(1, Ordering::Relaxed);
                Ok(buf)
            }
            // Removed meanwhile (eviction by another process): the repository.
            Err(_) => {
                self.with(kind, |s| s.verified.remove(name));
                self.inner.get_range(kind, name, offset, len)
            }
        }
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64> {
        if !cached(kind) {
            return self.inner.size(kind, name);
        }
        match self.ensure(kind, name)? {
            Some((n, hit)) => {
                if hit {
                    self.n.hits.fetch_add(1, Ordering::Relaxed);
                }
                Ok(n)
            }
            None => self.inner.size(kind, name),
        }
    }
    fn list(&self, kind: Kind) -> Result<Vec<String>> {
        let names = self.inner.list(kind)?;
        if !cached(kind) {
            return Ok(names);
        }
        let listed: HashSet<String> = names.iter().cloned().collect();
        self.with(kind, |s| {
            s.verified.retain(|n, _| listed.contains(n));
            s.live = listed.clone();
        });
        // Cached objects the repository no longer has are deleted, and
        // temporary files an hour old (left by a killed process; younger
        // ones may be another process's, being written).
        if let Ok(rd) = fs::read_dir(self.dir.join(kind.dir())) {
            for e in rd.flatten() {
                let n = e.file_name();
                let Some(n) = n.to_str() else { continue };
                if n.starts_with(TEMP_PREFIX) {
                    let old = e
                        .metadata()
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age.as_secs() > 3600);
                    if old {
                        let _ = fs::remove_file(e.path());
                    }
                } else if !n.starts_with('.') && !listed.contains(n) {
                    let _ = fs::remove_file(e.path());
                    self.n.evicted.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Ok(names)
    }
    fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        if cached(kind) {
            self.with(kind, |s| {
                s.live.remove(name);
                s.verified.remove(name);
            });
            let _ = fs::remove_file(self.path(kind, name));
        }
        self.inner.delete(kind, name)
    }
    fn exists(&self, kind: Kind, name: &str) -> Result<bool> {
        self.inner.exists(kind, name)
    }
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()> {
        self.inner.put_root(name, data)
    }
    fn get_root(&self, name: &str) -> Result<Vec<u8>> {
        self.inner.get_root(name)
    }
    fn parallelism(&self) -> usize {
        self.inner.parallelism()
    }
    fn location(&self) -> String {
        self.inner.location()
    }
    fn drop_cached(&self, kind: Kind, name: &str) -> bool {
        if !cached(kind) {
            return false;
        }
        let had = self.with(kind, |s| s.verified.remove(name).is_some());
        let _ = fs::remove_file(self.path(kind, name));
        if had {
            self.n.dropped.fetch_add(1, Ordering::Relaxed);
        }
        had
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LocalDir;

    fn setup() -> (tempfile::TempDir, Arc<dyn Backend>, CachedBackend) {
        let d = tempfile::tempdir().unwrap();
        let local = LocalDir::new(d.path().join("repo"));
        local.create_dirs().unwrap();
        let inner: Arc<dyn Backend> = Arc::new(local);
        let c = CachedBackend::new(inner.clone(), d.path().join("cache/id")).unwrap();
        (d, inner, c)
    }

    #[test]
    fn cached_objects_are_served_checked_and_evicted() {
        let (d, inner, c) = setup();
        inner.put(Kind::Index, "aa", b"0123456789").unwrap();
        // Not listed yet: read through, not cached.
        assert_eq!(c.get_range(Kind::Index, "aa", 2, 3).unwrap(), b"234");
        assert_eq!(c.stats().downloads, 0);
        assert_eq!(c.list(Kind::Index).unwrap(), vec!["aa"]);
        assert_eq!(c.get_range(Kind::Index, "aa", 2, 3).unwrap(), b"234");
        assert_eq!(c.stats().downloads, 1);
        assert_eq!(c.size(Kind::Index, "aa").unwrap(), 10);
        assert_eq!(c.get_range(Kind::Index, "aa", 8, 2).unwrap(), b"89");
        assert!(c.get_range(Kind::Index, "aa", 8, 3).is_err());
        assert_eq!(c.stats().downloads, 1);
        // A damaged cache file is found by its hash in a new process.
        let f = d.path().join("cache/id/index/aa");
        let mut b = fs::read(&f).unwrap();
        b[0] ^= 1;
        fs::write(&f, &b).unwrap();
        let c2 = CachedBackend::new(inner.clone(), d.path().join("cache/id")).unwrap();
        c2.list(Kind::Index).unwrap();
        assert_eq!(c2.get(Kind::Index, "aa").unwrap(), b"0123456789");
        assert_eq!((c2.stats().corrupt, c2.stats().downloads), (1, 1));
        // Deleted elsewhere: the next listing evicts it, and it is not served.
        inner.delete(Kind::Index, "aa").unwrap();
        assert!(c2.list(Kind::Index).unwrap().is_empty());
        assert!(!f.exists());
        assert!(c2.get(Kind::Index, "aa").is_err());
        // Packs and locks pass through.
        c.put(Kind::Pack, "bb", b"x").unwrap();
        assert!(!d.path().join("cache/id/data").exists());
    }
}
