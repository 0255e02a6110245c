//! The allocator of every binary that links the targets (the libFuzzer
//! driver, the replay test, the seed writer): the system allocator, with an
//! abort on any single request over [`ALLOC_LIMIT`].

use std::alloc::{GlobalAlloc, Layout, System};

/// The largest single allocation a target may make. Inputs are at most
/// 1 MiB, so a decoder that asks for more than this sized an allocation by
/// a length field without checking it against the input: a finding. (The
/// RSS limit misses such a request when the pages are never touched, and
/// libFuzzer's own malloc limit needs a sanitizer runtime.)
pub const ALLOC_LIMIT: usize = 256 << 20;

struct CappedAlloc;

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds GlobalAlloc's contract; the only addition is an abort before an
// oversized request, which allocates nothing.
unsafe impl GlobalAlloc for CappedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's layout contract is passed through as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        // SAFETY: as above; `ptr` came from this allocator, i.e. System.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn check(size: usize) {
    if size > ALLOC_LIMIT {
        // No allocation here: write the message from a stack buffer.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"gvault-fuzz: an allocation over the 256 MiB limit (sized by an unchecked length?)\n",
        );
        std::process::abort();
    }
}

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;
