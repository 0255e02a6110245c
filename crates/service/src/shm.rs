//! Shared memory: a memfd the daemon creates (zeroed by the kernel, sealed
//! against shrinking) and maps, and that the client maps from the fd passed
//! over the socket. Both sides see the same pages, so request data crosses
//! no socket.

use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use rustix::fs::{fcntl_add_seals, ftruncate, memfd_create, MemfdFlags, SealFlags};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

/// A mapping of a memfd, shared with the other process.
pub struct SharedMemory {
    ptr: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is plain bytes owned by this value until Drop; all
// access goes through raw pointers whose users state their own invariants.
unsafe impl Send for SharedMemory {}
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// `len` zeroed bytes in a new memfd (the kernel zero-fills new pages),
    /// sealed so that nobody can shrink it under a mapping (a shrink would
    /// turn accesses into SIGBUS).
    pub fn create(name: &str, len: usize) -> std::io::Result<SharedMemory> {
        if len == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a shared buffer must not be empty",
            ));
        }
        let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        ftruncate(&fd, len as u64)?;
        fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
        Self::map(fd, len)
    }

    /// Maps `len` bytes of `fd` (a buffer the daemon sent). The length is
    /// checked against the file, so a mapping never reaches past its end.
    pub fn map(fd: OwnedFd, len: usize) -> std::io::Result<SharedMemory> {
        let size = rustix::fs::fstat(&fd)?.st_size;
        if len == 0 || (size as u64) < len as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("shared buffer file is {size} bytes, expected {len}"),
            ));
        }
        // SAFETY: a fresh shared mapping chosen by the kernel (null hint),
        // of a file at least `len` bytes long that cannot shrink (sealed by
        // the daemon); it is unmapped once, in Drop.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd.as_fd(),
                0,
            )?
        };
        let ptr = NonNull::new(ptr as *mut u8)
            .ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(SharedMemory { ptr, len, fd })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// Whether `[ptr, ptr + len)` lies inside this mapping; its offset if so.
    pub fn offset_of(&self, ptr: *const u8, len: usize) -> Option<usize> {
        let start = self.ptr.as_ptr() as usize;
        let p = ptr as usize;
        (p >= start && p.checked_add(len)? <= start + self.len).then(|| p - start)
    }

    /// The bytes at `[offset, offset + len)`, if inside the mapping.
    ///
    /// # Safety
    /// The other process may write these bytes at any time: the caller
    /// treats them as untrusted plain bytes (any value is valid) and holds
    /// no other reference to the same range while this one lives.
    // Memory shared with another process is mutable through `&self` by
    // nature; the contract above is what keeps the slices apart.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, offset: usize, len: usize) -> Option<&mut [u8]> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: in bounds of the live mapping (checked above); exclusivity
        // within this process is the caller's contract.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) })
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // SAFETY: mapped in map() for exactly len bytes, unmapped once; no
        // slice from slice_mut outlives self (their lifetimes borrow it).
        unsafe {
            let _ = munmap(self.ptr.as_ptr() as *mut _, self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_zeroed_shared_and_cannot_shrink() {
        let a = SharedMemory::create("t", 8192).unwrap();
        // SAFETY: no other reference to the range in this test.
        let s = unsafe { a.slice_mut(0, 8192) }.unwrap();
        assert!(s.iter().all(|&b| b == 0));
        s[100] = 7;
        let fd = a.fd().try_clone().unwrap();
        let b = SharedMemory::map(fd, 8192).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { b.slice_mut(100, 1) }.unwrap()[0], 7);
        assert!(ftruncate(a.fd(), 10).is_err(), "sealed against shrinking");
        assert!(unsafe { a.slice_mut(8000, 193) }.is_none());
        assert!(SharedMemory::map(a.fd().try_clone().unwrap(), 8193).is_err());
        assert_eq!(a.offset_of(unsafe { a.as_ptr().add(10) }, 5), Some(10));
        assert_eq!(a.offset_of(unsafe { a.as_ptr().add(8190) }, 5), None);
    }
}
