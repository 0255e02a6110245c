//! A [`FileSystem`] in memory: files that never touch a disk. The CAS keeps
//! a repository's key registry in it while moving the registry to and from
//! object storage as one object; the fuzz targets run the real readers over
//! it. Cloning shares the files.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::env::{FileLock, FileSystem, RandomAccessFile, WritableFile};

type Files = Arc<Mutex<HashMap<PathBuf, Arc<Vec<u8>>>>>;

#[derive(Debug, Default, Clone)]
pub struct MemFs {
    files: Files,
}

fn lock(files: &Files) -> MutexGuard<'_, HashMap<PathBuf, Arc<Vec<u8>>>> {
    // A panic while holding the lock cannot leave a map half changed: every
    // change is one insert or remove.
    files.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

impl MemFs {
    /// A file system holding one file.
    pub fn with_file(path: &Path, bytes: Vec<u8>) -> MemFs {
        let fs = MemFs::default();
        fs.insert(path, bytes);
        fs
    }
    /// Creates or replaces `path`.
    pub fn insert(&self, path: &Path, bytes: Vec<u8>) {
        lock(&self.files).insert(path.to_owned(), Arc::new(bytes));
    }
    /// Removes `path` and returns its bytes.
    pub fn take(&self, path: &Path) -> Option<Vec<u8>> {
        let f = lock(&self.files).remove(path)?;
        Some(Arc::try_unwrap(f).unwrap_or_else(|shared| shared.to_vec()))
    }
}

struct MemFile(Arc<Vec<u8>>);

impl RandomAccessFile for MemFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let eof = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "read past the end of the file",
            )
        };
        let start = usize::try_from(offset).map_err(|_| eof())?;
        let end = start.checked_add(buf.len()).ok_or_else(eof)?;
        buf.copy_from_slice(self.0.get(start..end).ok_or_else(eof)?);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }
}

struct MemWriter {
    files: Files,
    path: PathBuf,
}

impl WritableFile for MemWriter {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut files = lock(&self.files);
        let f = files.entry(self.path.clone()).or_default();
        Arc::make_mut(f).extend_from_slice(data);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Locks in memory exclude nothing: one process holds the files.
struct MemLock;
impl FileLock for MemLock {}

impl FileSystem for MemFs {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.insert(path, Vec::new());
        Ok(Box::new(MemWriter {
            files: self.files.clone(),
            path: path.to_owned(),
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let f = lock(&self.files).get(path).cloned();
        Ok(Arc::new(MemFile(f.ok_or_else(|| not_found(path))?)))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let files = lock(&self.files);
        files
            .get(path)
            .map(|f| f.to_vec())
            .ok_or_else(|| not_found(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut files = lock(&self.files);
        let f = files.remove(from).ok_or_else(|| not_found(from))?;
        files.insert(to.to_owned(), f);
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut files = lock(&self.files);
        files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut files = lock(&self.files);
        let f = files.get_mut(path).ok_or_else(|| not_found(path))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len < f.len() {
            Arc::make_mut(f).truncate(len);
        }
        Ok(())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let files = lock(&self.files);
        Ok(files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
            .collect())
    }
    fn exists(&self, path: &Path) -> bool {
        let files = lock(&self.files);
        files.contains_key(path) || files.keys().any(|p| p.starts_with(path))
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn lock(&self, _path: &Path) -> io::Result<Box<dyn FileLock>> {
        Ok(Box::new(MemLock))
    }
    fn lock_shared(&self, _path: &Path) -> io::Result<Box<dyn FileLock>> {
        Ok(Box::new(MemLock))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_renamed_read_truncated_and_listed() {
        let fs = MemFs::default();
        let dir = Path::new("/d");
        let mut w = fs.create(&dir.join("a.tmp")).unwrap();
        w.append(b"hello ").unwrap();
        w.append(b"world").unwrap();
        fs.rename(&dir.join("a.tmp"), &dir.join("a")).unwrap();
        assert_eq!(fs.read_all(&dir.join("a")).unwrap(), b"hello world");
        let r = fs.open_read(&dir.join("a")).unwrap();
        let mut buf = [0u8; 5];
        r.read_exact_at(&mut buf, 6).unwrap();
        assert_eq!(&buf, b"world");
        assert_eq!(
            r.read_exact_at(&mut buf, 7).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        fs.truncate(&dir.join("a"), 5).unwrap();
        assert_eq!(fs.take(&dir.join("a")).unwrap(), b"hello");
        assert!(fs.read_all(&dir.join("a")).is_err());
        fs.insert(&dir.join("b"), vec![1]);
        assert_eq!(fs.list(dir).unwrap(), vec!["b".to_string()]);
        assert!(fs.exists(dir) && fs.exists(&dir.join("b")));
    }
}
