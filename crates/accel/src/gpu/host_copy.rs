//! The CPU's share of a host-data pipeline: parallel copies between user
//! memory and the pinned staging slots. One core cannot feed the link, so
//! copies are cut into pieces spread over a rayon pool of the copies' own
//! (`copy_pool` says why not the global one).
//!
//! Plain stores: non-temporal stores into the slots (no read-for-ownership
//! of the destination) were measured on the H100 host and
//! did not pay: packing 4 GiB of 16 KiB pieces took 105–140 ms against
//! 90–105 ms with memcpy, and GCM 1 GiB pageable fell from 21.0/19.0 to
//! 19.6/17.7 GB/s (seal/open).

use std::sync::{mpsc, OnceLock};

use rayon::prelude::*;

/// Work per copy task: large enough to amortise the task, small enough to
/// spread one slot over every core.
const CHUNK: usize = 4 << 20;

/// One copy: `len` bytes from `src` to `dst`, which must be valid, live for
/// the call, and not overlap each other or any other job's memory.
pub(crate) type CopyJob = (*mut u8, *const u8, usize);

/// The copy threads: a pool of their own, not rayon's global one. The
/// callers hold a device's slot lock while they copy; were the copies on
/// the global pool, a caller that is itself a global worker would run
/// other global jobs while it waits for them, and one of those may be a
/// job that wants the same slot lock: the thread would wait on itself.
fn copy_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(std::thread::available_parallelism().map_or(1, |n| n.get()))
            .thread_name(|i| format!("gvault-copy-{i}"))
            .build()
            .ok()
    })
    .as_ref()
}

/// Copies every job, in parallel on the copy pool; the caller blocks
/// (running nothing else) until every copy is done.
pub(crate) fn copy_parallel(jobs: &[CopyJob]) {
    struct Raw(*mut u8, *const u8, usize);
    // SAFETY (Send, Sync): each Raw names disjoint live memory (the caller's
    // contract on `jobs`), so moving it to or sharing it with another
    // thread races with nothing.
    unsafe impl Send for Raw {}
    unsafe impl Sync for Raw {}
    impl Raw {
        fn copy(&self) {
            // SAFETY: dst and src are valid for len bytes and do not overlap
            // (one is user memory, the other a pinned slot).
            unsafe { std::ptr::copy_nonoverlapping(self.1, self.0, self.2) }
        }
    }
    let parts: Vec<Raw> = jobs
        .iter()
        .flat_map(|&(d, s, n)| {
            (0..n).step_by(CHUNK).map(move |o| {
                // SAFETY: o < n, so both offsets stay inside their jobs.
                unsafe { Raw(d.add(o), s.add(o), CHUNK.min(n - o)) }
            })
        })
        .collect();
    let pool = match copy_pool() {
        Some(pool) if parts.len() > 1 => pool,
        _ => return parts.iter().for_each(Raw::copy),
    };
    // One task on the copy pool spreads the parts over its threads (rayon
    // splits them as the threads free up, thousands of small pieces in a
    // few tasks); the caller waits on the channel.
    let (done, all_done) = mpsc::channel::<()>();
    pool.spawn(move || {
        parts.par_iter().for_each(Raw::copy);
        drop(done);
    });
    // Returns once the task has dropped its sender (done or unwound): the
    // memory the jobs name is not touched after this.
    while all_done.recv().is_ok() {}
}

#[cfg(test)]
mod tests {
    use super::{copy_parallel, CopyJob};
    use rayon::prelude::*;
    use std::sync::{mpsc, Mutex};
    use std::time::Duration;

    #[test]
    fn parallel_copy_covers_jobs_larger_than_a_chunk() {
        let n = (9 << 20) + 77;
        let src: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let mut a = vec![0u8; n];
        let mut b = vec![0u8; 100];
        let jobs: Vec<CopyJob> = vec![
            (a.as_mut_ptr(), src.as_ptr(), n),
            (b.as_mut_ptr(), src.as_ptr().wrapping_add(3), 100),
        ];
        copy_parallel(&jobs);
        assert_eq!(a, src);
        assert_eq!(&b[..], &src[3..103]);
    }

    /// Copies made while a lock is held, from jobs of a rayon pool whose
    /// other jobs want the same lock (the GPU backend's slot lock under a
    /// parallel restore): the copying thread must not pick up one of those
    /// jobs while it waits for its copies, or it waits on itself forever.
    #[test]
    fn copies_under_a_lock_inside_a_rayon_pool_finish() {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(8)
                .build()
                .unwrap();
            let lock = Mutex::new(());
            let n = 24 << 20;
            let src: Vec<u8> = (0..n).map(|i| (i % 253) as u8).collect();
            let ok = pool.install(|| {
                (0..2000).into_par_iter().all(|i| {
                    if i % 8 != 0 {
                        // Work that takes no lock: its threads go idle
                        // and steal, also the copy's pieces.
                        let t = std::time::Instant::now();
                        while t.elapsed() < Duration::from_micros(50) {
                            std::hint::spin_loop();
                        }
                        return true;
                    }
                    let mut dst = vec![0u8; n];
                    let _held = lock.lock().unwrap();
                    copy_parallel(&[(dst.as_mut_ptr(), src.as_ptr(), n)]);
                    dst == src
                })
            });
            let _ = tx.send(ok);
        });
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(ok) => assert!(ok, "a copy differs from its source"),
            Err(_) => panic!("copies under a lock did not finish in 120 s: deadlock"),
        }
    }
}
