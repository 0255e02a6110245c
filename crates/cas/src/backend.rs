//! Where the repository's objects live: a [`Backend`] of whole, immutable
//! objects (put, get, ranged get, list, delete), so that object storage can
//! be added beside the local directory without touching the rest. Crash
//! safety never depends on updating an object in place: an object either
//! exists with all its bytes or does not exist.

use std::fs::{self, File, OpenOptions};
use std::io::{IoSlice, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

/// The kinds of objects, each in its own namespace (a directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Pack,
    Index,
    Snapshot,
    Lock,
}

impl Kind {
    pub fn dir(self) -> &'static str {
        match self {
            Kind::Pack => "data",
            Kind::Index => "index",
            Kind::Snapshot => "snapshots",
            Kind::Lock => "locks",
        }
    }
    pub const ALL: [Kind; 4] = [Kind::Pack, Kind::Index, Kind::Snapshot, Kind::Lock];
}

/// A backend that returned fewer bytes than a range asked for.
fn short_read(kind: Kind, name: &str, offset: u64, want: usize, got: usize) -> crate::Error {
    crate::Error::Io {
        context: format!("reading {want} bytes at {offset} of {}/{name}", kind.dir()),
        source: std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("the backend returned {got} bytes"),
        ),
    }
}

pub trait Backend: Send + Sync {
    /// Stores `data` as the object `name` of `kind`; when it returns, the
    /// object is durable and complete, and never visible half written.
    /// Overwriting an existing object replaces it atomically.
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()>;
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>>;
    /// `len` bytes from `offset`; an object too short is an error.
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// `buf.len()` bytes from `offset` into `buf` (no allocation where the
    /// backend can read in place); an object too short is an error.
    fn get_range_into(&self, kind: Kind, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        let b = self.get_range(kind, name, offset, buf.len())?;
        if b.len() != buf.len() {
            return Err(short_read(kind, name, offset, buf.len(), b.len()));
        }
        buf.copy_from_slice(&b);
        Ok(())
    }
    /// Several ranges of one object, each `(offset, buf)` filled as
    /// [`Backend::get_range_into`] fills one. Here, ranges that follow one
    /// another in the object are fetched as one (a restore asks for each
    /// chunk's ciphertext and then its tag: on object storage, one request
    /// for the run, not two a chunk); a local backend reads each in place.
    fn get_ranges_into(
        &self,
        kind: Kind,
        name: &str,
        ranges: &mut [(u64, &mut [u8])],
    ) -> Result<()> {
        let mut i = 0;
        while i < ranges.len() {
            let start = ranges[i].0;
            let mut end = start + ranges[i].1.len() as u64;
            let mut j = i + 1;
            while j < ranges.len() && ranges[j].0 == end {
                end += ranges[j].1.len() as u64;
                j += 1;
            }
            if j == i + 1 {
                let (offset, buf) = &mut ranges[i];
                self.get_range_into(kind, name, *offset, buf)?;
            } else {
                let want = (end - start) as usize;
                let run = self.get_range(kind, name, start, want)?;
                if run.len() != want {
                    return Err(short_read(kind, name, start, want, run.len()));
                }
                let mut at = 0;
                for (_, buf) in ranges[i..j].iter_mut() {
                    buf.copy_from_slice(&run[at..at + buf.len()]);
                    at += buf.len();
                }
            }
            i = j;
        }
        Ok(())
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64>;
    /// As [`Backend::put`] with the object's bytes in pieces, in order (a
    /// backend that can write them where they lie needs no copy).
    fn put_parts(&self, kind: Kind, name: &str, parts: &[&[u8]]) -> Result<()> {
        self.put(kind, name, &parts.concat())
    }
    /// Names of the objects of `kind`, sorted.
    fn list(&self, kind: Kind) -> Result<Vec<String>>;
    fn delete(&self, kind: Kind, name: &str) -> Result<()>;
    fn exists(&self, kind: Kind, name: &str) -> Result<bool>;
    /// The small singleton files (`config`): put/get by name at the root.
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()>;
    fn get_root(&self, name: &str) -> Result<Vec<u8>>;
    /// How many requests the backend serves well at once (writers of
    /// packs use at least this many threads); 1 for a local disk.
    fn parallelism(&self) -> usize {
        1
    }
    /// Where the objects are, for messages.
    fn location(&self) -> String {
        String::new()
    }
    /// Forgets a local copy of the object (one that did not authenticate),
    /// so that the next read fetches it from the repository; whether there
    /// was one. Only caches ([`crate::backend_cache::CachedBackend`]) have any.
    fn drop_cached(&self, _kind: Kind, _name: &str) -> bool {
        false
    }
}

/// A repository in a local directory: `<root>/<kind dir>/<name>`. Writes go
/// to a temporary file in the same directory, which is fsynced, renamed
/// over the name, and the directory fsynced.
#[derive(Debug, Clone)]
pub struct LocalDir {
    root: PathBuf,
}

/// Temporary files start with this; `list` skips them and they are never
/// valid object names (names are lowercase hex).
const TEMP_PREFIX: &str = ".tmp-";

impl LocalDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// Creates the root and the object directories.
    pub fn create_dirs(&self) -> Result<()> {
        for k in Kind::ALL {
            let d = self.root.join(k.dir());
            fs::create_dir_all(&d).ctx(|| format!("creating {}", d.display()))?;
        }
        sync_dir(&self.root)
    }
    fn path(&self, kind: Kind, name: &str) -> PathBuf {
        self.root.join(kind.dir()).join(name)
    }
    fn write_atomic(&self, dir: &Path, name: &str, parts: &[&[u8]]) -> Result<()> {
        let tmp = dir.join(format!(
            "{TEMP_PREFIX}{name}-{}",
            hex::encode(gvault_store::keys::random_bytes::<8>())
        ));
        let target = dir.join(name);
        let r = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)
                .ctx(|| format!("creating {}", tmp.display()))?;
            write_all_parts(&mut f, parts)
                .and_then(|_| f.sync_all())
                .ctx(|| format!("writing {}", tmp.display()))?;
            drop(f);
            fs::rename(&tmp, &target)
                .ctx(|| format!("renaming {} to {}", tmp.display(), target.display()))?;
            sync_dir(dir)
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }
}

/// Writes every part, in order, with as few system calls as the kernel
/// allows (vectored writes).
fn write_all_parts(f: &mut File, parts: &[&[u8]]) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match f.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("syncing directory {}", dir.display()))
}

fn valid_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.starts_with('.')
        || name.contains('/')
        || name.contains('\0')
        || name.len() > 200
    {
        return Err(crate::Error::InvalidArgument(format!(
            "{name:?} is not a valid object name"
        )));
    }
    Ok(())
}

impl Backend for LocalDir {
    fn put(&self, kind: Kind, name: &str, data: &[u8]) -> Result<()> {
        valid_name(name)?;
        self.write_atomic(&self.root.join(kind.dir()), name, &[data])
    }
    fn put_parts(&self, kind: Kind, name: &str, parts: &[&[u8]]) -> Result<()> {
        valid_name(name)?;
        self.write_atomic(&self.root.join(kind.dir()), name, parts)
    }
    fn get(&self, kind: Kind, name: &str) -> Result<Vec<u8>> {
        valid_name(name)?;
        let p = self.path(kind, name);
        fs::read(&p).ctx(|| format!("reading {}", p.display()))
    }
    fn get_range(&self, kind: Kind, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
        valid_name(name)?;
        let p = self.path(kind, name);
        let mut f = File::open(&p).ctx(|| format!("opening {}", p.display()))?;
        // Read into spare capacity (no zeroing first: a restore reads
        // every byte of the repository through here).
        let mut buf = Vec::with_capacity(len);
        f.seek(SeekFrom::Start(offset))
            .and_then(|_| (&mut f).take(len as u64).read_to_end(&mut buf))
            .and_then(|n| match n == len {
                true => Ok(()),
                false => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the file ends after {n} bytes"),
                )),
            })
            .ctx(|| format!("reading {len} bytes at {offset} of {}", p.display()))?;
        Ok(buf)
    }
    fn get_range_into(&self, kind: Kind, name: &str, offset: u64, buf: &mut [u8]) -> Result<()> {
        valid_name(name)?;
        let p = self.path(kind, name);
        File::open(&p)
            .and_then(|f| f.read_exact_at(buf, offset))
            .ctx(|| format!("reading {} bytes at {offset} of {}", buf.len(), p.display()))
    }
    fn get_ranges_into(
        &self,
        kind: Kind,
        name: &str,
        ranges: &mut [(u64, &mut [u8])],
    ) -> Result<()> {
        valid_name(name)?;
        let p = self.path(kind, name);
        let f = File::open(&p).ctx(|| format!("opening {}", p.display()))?;
        for (offset, buf) in ranges.iter_mut() {
            f.read_exact_at(buf, *offset)
                .ctx(|| format!("reading {} bytes at {offset} of {}", buf.len(), p.display()))?;
        }
        Ok(())
    }
    fn size(&self, kind: Kind, name: &str) -> Result<u64> {
        valid_name(name)?;
        let p = self.path(kind, name);
        Ok(fs::metadata(&p)
            .ctx(|| format!("reading {}", p.display()))?
            .len())
    }
    fn list(&self, kind: Kind) -> Result<Vec<String>> {
        let d = self.root.join(kind.dir());
        let mut out = Vec::new();
        for e in fs::read_dir(&d).ctx(|| format!("listing {}", d.display()))? {
            let e = e.ctx(|| format!("listing {}", d.display()))?;
            if let Some(n) = e.file_name().to_str() {
                if !n.starts_with('.') {
                    out.push(n.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }
    fn delete(&self, kind: Kind, name: &str) -> Result<()> {
        valid_name(name)?;
        let p = self.path(kind, name);
        match fs::remove_file(&p) {
            Ok(()) => sync_dir(&self.root.join(kind.dir())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e).ctx(|| format!("removing {}", p.display())),
        }
    }
    fn exists(&self, kind: Kind, name: &str) -> Result<bool> {
        valid_name(name)?;
        Ok(self.path(kind, name).exists())
    }
    fn put_root(&self, name: &str, data: &[u8]) -> Result<()> {
        valid_name(name)?;
        self.write_atomic(&self.root, name, &[data])
    }
    fn get_root(&self, name: &str) -> Result<Vec<u8>> {
        valid_name(name)?;
        let p = self.root.join(name);
        fs::read(&p).ctx(|| format!("reading {}", p.display()))
    }
    fn location(&self) -> String {
        self.root.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts range requests; stores one object in memory.
    struct Counting {
        data: Vec<u8>,
        requests: std::sync::atomic::AtomicUsize,
    }

    impl Backend for Counting {
        fn put(&self, _: Kind, _: &str, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn get(&self, _: Kind, _: &str) -> Result<Vec<u8>> {
            Ok(self.data.clone())
        }
        fn get_range(&self, _: Kind, _: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
            self.requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let end = (offset as usize + len).min(self.data.len());
            Ok(self.data[(offset as usize).min(end)..end].to_vec())
        }
        fn size(&self, _: Kind, _: &str) -> Result<u64> {
            Ok(self.data.len() as u64)
        }
        fn list(&self, _: Kind) -> Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn delete(&self, _: Kind, _: &str) -> Result<()> {
            Ok(())
        }
        fn exists(&self, _: Kind, _: &str) -> Result<bool> {
            Ok(true)
        }
        fn put_root(&self, _: &str, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn get_root(&self, _: &str) -> Result<Vec<u8>> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn ranges_that_follow_one_another_are_one_request() {
        let b = Counting {
            data: (0..100u8).collect(),
            requests: Default::default(),
        };
        let (mut a, mut t1, mut c, mut t2, mut far) =
            ([0u8; 10], [0u8; 2], [0u8; 5], [0u8; 3], [0u8; 4]);
        let mut ranges: Vec<(u64, &mut [u8])> = vec![
            (10, &mut a),
            (20, &mut t1),
            (23, &mut c),
            (28, &mut t2),
            (90, &mut far),
        ];
        b.get_ranges_into(Kind::Pack, "p", &mut ranges).unwrap();
        assert_eq!(b.requests.load(std::sync::atomic::Ordering::Relaxed), 3);
        assert_eq!(a.to_vec(), (10..20u8).collect::<Vec<_>>());
        assert_eq!(t1.to_vec(), vec![20, 21]);
        assert_eq!(c.to_vec(), (23..28u8).collect::<Vec<_>>());
        assert_eq!(t2.to_vec(), vec![28, 29, 30]);
        assert_eq!(far.to_vec(), vec![90, 91, 92, 93]);
        // A run the object is too short for is an error, never short data.
        let mut tail = [0u8; 8];
        let mut more = [0u8; 8];
        let mut short: Vec<(u64, &mut [u8])> = vec![(88, &mut tail), (96, &mut more)];
        assert!(b.get_ranges_into(Kind::Pack, "p", &mut short).is_err());
    }

    #[test]
    fn put_get_list_delete_round_trip_and_leave_no_temp_files() {
        let d = tempfile::tempdir().unwrap();
        let b = LocalDir::new(d.path());
        b.create_dirs().unwrap();
        b.put(Kind::Pack, "ab", b"hello").unwrap();
        b.put(Kind::Pack, "aa", b"x").unwrap();
        b.put(Kind::Pack, "ab", b"hello world").unwrap();
        assert_eq!(b.get(Kind::Pack, "ab").unwrap(), b"hello world");
        assert_eq!(b.get_range(Kind::Pack, "ab", 6, 5).unwrap(), b"world");
        assert!(b.get_range(Kind::Pack, "ab", 8, 5).is_err());
        let mut five = [0u8; 5];
        b.get_range_into(Kind::Pack, "ab", 6, &mut five).unwrap();
        assert_eq!(&five, b"world");
        assert!(b.get_range_into(Kind::Pack, "ab", 8, &mut five).is_err());
        // In pieces (empty ones too), more than one vectored write takes.
        let parts: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![i as u8; (i % 3) as usize])
            .collect();
        let refs: Vec<&[u8]> = parts.iter().map(|p| p.as_slice()).collect();
        b.put_parts(Kind::Pack, "ac", &refs).unwrap();
        assert_eq!(b.get(Kind::Pack, "ac").unwrap(), parts.concat());
        b.delete(Kind::Pack, "ac").unwrap();
        assert_eq!(b.list(Kind::Pack).unwrap(), vec!["aa", "ab"]);
        assert!(b.list(Kind::Index).unwrap().is_empty());
        b.delete(Kind::Pack, "aa").unwrap();
        assert_eq!(b.list(Kind::Pack).unwrap(), vec!["ab"]);
        assert_eq!(fs::read_dir(d.path().join("data")).unwrap().count(), 1);
        assert!(b.put(Kind::Pack, "../x", b"").is_err());
    }
}
