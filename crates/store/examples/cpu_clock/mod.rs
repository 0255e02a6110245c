//! CPU clocks for the store's cost examples (`read_cost`, `write_cost`):
//! the calling thread's CPU time, and the whole process's with its minor
//! page faults. libc, as std has no per-thread CPU clock.

use std::time::Duration;

pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU time of every thread of the process, and its minor page faults.
pub fn process_cpu() -> (Duration, u64) {
    // SAFETY: an all-zero rusage is a valid value for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call's duration.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(rc, 0, "getrusage failed");
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (tv(ru.ru_utime) + tv(ru.ru_stime), ru.ru_minflt as u64)
}
