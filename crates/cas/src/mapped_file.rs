//! A file written through a shared memory mapping, so that many threads
//! fill one file at once: `pwrite`s to one file are serialized by its
//! inode lock (one core's copy rate, ~3 GB/s on tmpfs), page faults on a
//! shared mapping are not. The restore of one large file uses it.
//!
//! A write through a mapping that finds no space is a SIGBUS, not an
//! error: the file's blocks are reserved with `fallocate` first, so a full
//! disk is an error before anything is written, and file systems that
//! cannot reserve blocks are written with `pwrite` instead. (Reserving
//! ahead of the writers, 64 MiB at a time, measured no faster on tmpfs.)

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Reserves the first `len` bytes of `f`; an error names why not.
fn fallocate(f: &File, len: u64) -> io::Result<()> {
    // SAFETY: a plain system call on an open descriptor.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub struct MappedFile {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone (no aliasing pointer
// escapes except through `&mut self`), so moving or sharing it between
// threads is as safe as for a `Vec<u8>`.
unsafe impl Send for MappedFile {}
unsafe impl Sync for MappedFile {}

impl MappedFile {
    /// Sizes `f` to `len` bytes, reserves its blocks and maps it for
    /// writing. `None` where the file system cannot reserve blocks or map
    /// the file (write it with `pwrite` then); an error for a full disk.
    pub fn create(f: &File, len: u64) -> io::Result<Option<MappedFile>> {
        let Ok(size) = usize::try_from(len) else {
            return Ok(None);
        };
        if size == 0 {
            return Ok(None);
        }
        f.set_len(len)?;
        if let Err(e) = fallocate(f, len) {
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: maps `size` bytes of an open file we created and sized;
        // the kernel picks the address. Checked for failure below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Ok(None);
        }
        Ok(Some(MappedFile {
            ptr: ptr.cast(),
            len: size,
        }))
    }

    /// The file's bytes, to be split into the disjoint pieces threads fill.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` maps `len` bytes, readable and writable, for as
        // long as `self` lives; `&mut self` makes this the only reference.
        // Its blocks are reserved, so no access faults for want of space;
        // the file is a temporary one only this process names, so it is
        // not truncated under us unless another process with write access
        // to the directory does it (a SIGBUS, as for any mapped file,
        // never wrong data).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// Maps every page of `piece` (a piece of a [`MappedFile`]) writable in
/// one call, before it is filled: a page fault every 4 KiB costs more.
/// Only a hint: kernels without `MADV_POPULATE_WRITE` fault as they go.
pub fn prefault(piece: &mut [u8]) {
    if piece.is_empty() {
        return;
    }
    let page = 4096usize;
    let start = piece.as_mut_ptr() as usize;
    let aligned = start & !(page - 1);
    let len = piece.len() + (start - aligned);
    // SAFETY: the range covers `piece` and at most the start of the page it
    // begins in, which lies in the same mapping (mappings are page
    // aligned); MADV_POPULATE_WRITE changes no byte, it only maps pages
    // in (a page shared with a neighbouring piece being filled by another
    // thread is fine).
    unsafe {
        libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE);
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping `create` made; no slice of it
        // outlives `self` (they borrow it). Its dirty pages stay in the
        // page cache, so a later fsync of the file writes them.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn bytes_written_through_the_mapping_are_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&p)
            .unwrap();
        let len = 3 << 20;
        let Some(mut m) = MappedFile::create(&f, len as u64).unwrap() else {
            // A file system that cannot reserve blocks: nothing to test.
            return;
        };
        let (a, b) = m.bytes_mut().split_at_mut(len / 3);
        std::thread::scope(|s| {
            s.spawn(|| a.fill(1));
            s.spawn(|| b.fill(2));
        });
        drop(m);
        f.sync_all().unwrap();
        let mut back = Vec::new();
        File::open(&p).unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), len);
        assert!(back[..len / 3].iter().all(|&x| x == 1));
        assert!(back[len / 3..].iter().all(|&x| x == 2));
    }

    #[test]
    fn an_empty_file_is_not_mapped() {
        let f = tempfile::tempfile().unwrap();
        assert!(MappedFile::create(&f, 0).unwrap().is_none());
    }
}
