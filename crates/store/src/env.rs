//! The file-system layer, as LevelDB's Env: every byte the store writes goes
//! through a [`FileSystem`], so tests can inject faults (a full disk, failing
//! syncs) without touching the engine.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

pub trait WritableFile: Send {
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
    /// Starts writing `len` bytes at `offset`, all appended already and
    /// never to be written again, back to the disk, and returns without
    /// waiting: a hint, so that a later [`Self::sync`] finds less left to
    /// write. It makes nothing durable and orders nothing (the data may
    /// reach the disk at any time after the append anyway), and it reports
    /// no error: one the write-back meets is reported by the next `sync`.
    fn start_writeback(&mut self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
}

pub trait RandomAccessFile: Send + Sync {
    /// Reads exactly `buf.len()` bytes at `offset`; a short file is an
    /// `UnexpectedEof` error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// Held while the store is open; dropping it releases the lock.
pub trait FileLock: Send + Sync {}

pub trait FileSystem: Send + Sync + std::fmt::Debug {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates (or truncates) a file for writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>>;
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn remove(&self, path: &Path) -> io::Result<()>;
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    fn list(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn exists(&self, path: &Path) -> bool;
    /// Makes renames and creations inside `dir` durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock, creating the file if it is
    /// missing; `WouldBlock` while another holds any lock on it.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
    /// Takes a shared advisory lock on an existing file without writing
    /// anything: `NotFound` if the file is missing (it is not created),
    /// `WouldBlock` while another holds an exclusive lock on it. Any number
    /// of shared locks are held at once. A file system that cannot take
    /// one fails, and read-only opens fail with it.
    fn lock_shared(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let _ = path;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this file system takes no shared locks",
        ))
    }
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

/// A file being appended to; shared with the write-back worker
/// ([`writeback`]), which may still hold a queued range of it.
struct OsWritable(Arc<File>);

impl WritableFile for OsWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        (&*self.0).write_all(data)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    #[cfg(target_os = "linux")]
    fn start_writeback(&mut self, offset: u64, len: u64) {
        writeback::start(&self.0, offset, len);
    }
}

/// Starting write-back off the writer's thread: queuing a range's pages
/// for the disk (`sync_file_range`) costs the caller the file system's
/// block mapping and the request submission, ~0.3 µs per 4 KiB appended
/// on the development host, which one worker takes over for every store
/// of the process.
#[cfg(target_os = "linux")]
mod writeback {
    use std::fs::File;
    use std::os::fd::AsRawFd;
    use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
    use std::sync::{Arc, OnceLock};

    type Job = (Arc<File>, u64, u64);

    /// Ranges waiting for the worker; beyond this the writer starts its
    /// own (a worker behind holds back no more than this many).
    const QUEUE: usize = 64;

    static WORKER: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();

    fn worker() -> Option<&'static SyncSender<Job>> {
        WORKER
            .get_or_init(|| {
                let (tx, rx) = sync_channel::<Job>(QUEUE);
                std::thread::Builder::new()
                    .name("gvault-writeback".into())
                    .spawn(move || {
                        for (file, offset, len) in rx {
                            run(&file, offset, len);
                        }
                    })
                    .ok()
                    .map(|_| tx)
            })
            .as_ref()
    }

    /// Queues the range for the worker, or starts it here when there is
    /// no worker or its queue is full.
    pub(super) fn start(file: &Arc<File>, offset: u64, len: u64) {
        let job = (file.clone(), offset, len);
        let job = match worker() {
            Some(tx) => match tx.try_send(job) {
                Ok(()) => return,
                Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => job,
            },
            None => job,
        };
        run(&job.0, job.1, job.2);
    }

    fn run(file: &File, offset: u64, len: u64) {
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SYNC_FILE_RANGE_WRITE alone: queue the range's dirty pages for
        // writing (pages already being written are skipped) and return.
        // Without a WAIT flag the call does not read or advance the file's
        // write-back error cursor, so an error the write-back meets is
        // still reported by the next fdatasync; the result is only a hint's
        // and is ignored.
        // SAFETY: sync_file_range takes no pointers; the descriptor is
        // that of `file`, open while it is borrowed.
        let _ = unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE)
        };
    }
}

struct OsReadable(File);

impl RandomAccessFile for OsReadable {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(&self.0, buf, offset)
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

struct OsLock(#[allow(dead_code)] File);

impl FileLock for OsLock {}

impl FileSystem for OsFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        Ok(Box::new(OsWritable(Arc::new(File::create(path)?))))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(OsReadable(File::open(path)?)))
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        f.sync_all()
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in fs::read_dir(dir)? {
            if let Some(n) = e?.file_name().to_str() {
                names.push(n.to_owned());
            }
        }
        Ok(names)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)?;
        match f.try_lock() {
            Ok(()) => Ok(Box::new(OsLock(f))),
            Err(TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
    fn lock_shared(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        // flock(2) takes either kind of lock on a descriptor open for
        // reading only.
        let f = File::open(path)?;
        match f.try_lock_shared() {
            Ok(()) => Ok(Box::new(OsLock(f))),
            Err(TryLockError::WouldBlock) => Err(io::ErrorKind::WouldBlock.into()),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }
}

/// A [`FileSystem`] that passes through to another until told to fail:
/// after a byte budget it reports a full disk, and syncs can be made to fail.
/// For tests of the store's error paths.
#[derive(Debug)]
pub struct FaultInjectingFs {
    inner: Arc<dyn FileSystem>,
    state: Arc<FaultState>,
}

#[derive(Debug)]
struct FaultState {
    /// Bytes that may still be written; negative means unlimited.
    budget: AtomicI64,
    fail_sync: AtomicBool,
    /// Microseconds each file sync takes, to model a slow disk.
    sync_delay_us: AtomicU64,
    syncs: AtomicU64,
}

impl FaultInjectingFs {
    pub fn new(inner: Arc<dyn FileSystem>) -> Self {
        FaultInjectingFs {
            inner,
            state: Arc::new(FaultState {
                budget: AtomicI64::new(-1),
                fail_sync: AtomicBool::new(false),
                sync_delay_us: AtomicU64::new(0),
                syncs: AtomicU64::new(0),
            }),
        }
    }

    /// After `bytes` more bytes, every write fails with "no space left".
    pub fn set_space_left(&self, bytes: Option<u64>) {
        let v = bytes.map_or(-1, |b| b.min(i64::MAX as u64) as i64);
        self.state.budget.store(v, Ordering::SeqCst);
    }

    /// Bytes that may still be written before the disk is full (None: no
    /// limit).
    pub fn space_left(&self) -> Option<u64> {
        u64::try_from(self.state.budget.load(Ordering::SeqCst)).ok()
    }

    pub fn set_fail_sync(&self, fail: bool) {
        self.state.fail_sync.store(fail, Ordering::SeqCst);
    }

    /// Makes every file sync take `delay` longer.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.state
            .sync_delay_us
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// File syncs performed so far.
    pub fn sync_count(&self) -> u64 {
        self.state.syncs.load(Ordering::SeqCst)
    }
}

fn disk_full() -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        "No space left on device (injected)",
    )
}

impl FaultState {
    /// Takes `n` bytes from the budget; returns how many may be written.
    fn take(&self, n: usize) -> usize {
        let mut cur = self.budget.load(Ordering::SeqCst);
        loop {
            if cur < 0 {
                return n;
            }
            let granted = (cur as u64).min(n as u64) as i64;
            match self.budget.compare_exchange(
                cur,
                cur - granted,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return granted as usize,
                Err(v) => cur = v,
            }
        }
    }
}

struct FaultyWritable {
    inner: Box<dyn WritableFile>,
    state: Arc<FaultState>,
}

impl WritableFile for FaultyWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let n = self.state.take(data.len());
        // A full disk leaves a partial write behind, as a real one may.
        self.inner.append(&data[..n])?;
        if n < data.len() {
            return Err(disk_full());
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        if self.state.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("sync failed (injected)"));
        }
        self.state.syncs.fetch_add(1, Ordering::SeqCst);
        let delay = self.state.sync_delay_us.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_micros(delay));
        }
        self.inner.sync()
    }
    fn start_writeback(&mut self, offset: u64, len: u64) {
        self.inner.start_writeback(offset, len)
    }
}

impl FileSystem for FaultInjectingFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        if self.state.budget.load(Ordering::SeqCst) == 0 {
            return Err(disk_full());
        }
        Ok(Box::new(FaultyWritable {
            inner: self.inner.create(path)?,
            state: self.state.clone(),
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        self.inner.open_read(path)
    }
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_all(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.truncate(path, len)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.state.fail_sync.load(Ordering::SeqCst) {
            return Err(io::Error::other("directory sync failed (injected)"));
        }
        self.inner.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        self.inner.lock_shared(path)
    }
}
