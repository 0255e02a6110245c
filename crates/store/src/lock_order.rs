//! Ranked locks: every lock of the store has a [`Rank`], and a thread may
//! take a lock only while every lock it already holds ranks lower. Any two
//! threads then take any two locks in the same order, so they cannot
//! deadlock on them. `db.rs` documents the order and what each lock guards.
//!
//! With checking on (debug builds, or the `lock-order-check` feature that
//! the store's tests turn on), each thread keeps the ranks it holds and a
//! lock taken out of order panics, naming both locks. Without it a
//! [`RankedMutex`] is a `parking_lot::Mutex` and its guard a
//! `parking_lot::MutexGuard`: nothing is recorded and nothing is checked.

use std::ops::{Deref, DerefMut};

use parking_lot::{Condvar, Mutex, MutexGuard};

/// Whether lock order is checked in this build.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const CHECKED: bool = cfg!(any(debug_assertions, feature = "lock-order-check"));

/// A lock's place in the order: a thread holding a lock takes only locks
/// of a higher rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Rank {
    /// `DbInner::reencrypt_lock`.
    Reencrypt,
    /// `DbInner::compaction_lock`.
    Compaction,
    /// `DbInner::writers`, the group-commit queue.
    Writers,
    /// A queued write's result slot (`write::PendingWrite`).
    WriteResult,
    /// `DbInner::log`, the value-log head.
    Log,
    /// `DbInner::manifest`.
    Manifest,
    /// `DbInner::log_usage`.
    LogUsage,
    /// `DbInner::state`.
    State,
    /// A cursor's read-ahead (`db_iter::DbIterator`).
    ReadAhead,
    /// A table-cache shard's writer.
    TableCache,
    /// The value log's open-file map writer.
    ValueLogFiles,
    /// The data keys pinned by files being written (`codec::KeyPins`).
    KeyPins,
    /// `DbInner::file_lock`, the directory lock's handle.
    DirLock,
    /// `Store::bg`, the background thread's handle.
    BackgroundThread,
}

/// A `parking_lot::Mutex` with a rank.
pub(crate) struct RankedMutex<T> {
    rank: Rank,
    lock: Mutex<T>,
}

/// Holds a [`RankedMutex`]; dropping it releases the lock (and, with
/// checking on, the rank).
pub(crate) struct RankedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    #[cfg(any(debug_assertions, feature = "lock-order-check"))]
    rank: Rank,
}

impl<T> RankedMutex<T> {
    pub(crate) const fn new(rank: Rank, value: T) -> RankedMutex<T> {
        RankedMutex {
            rank,
            lock: Mutex::new(value),
        }
    }

    /// Takes the lock, waiting for it; with checking on, panics if this
    /// thread holds a lock of the same or a higher rank.
    pub(crate) fn lock(&self) -> RankedGuard<'_, T> {
        check::acquire(self.rank);
        RankedGuard {
            guard: self.lock.lock(),
            #[cfg(any(debug_assertions, feature = "lock-order-check"))]
            rank: self.rank,
        }
    }

    /// Takes the lock if it is free. A lock that is not waited for cannot
    /// deadlock, so its rank is not checked against those held; it is
    /// recorded, and later locks are checked against it.
    pub(crate) fn try_lock(&self) -> Option<RankedGuard<'_, T>> {
        let guard = self.lock.try_lock()?;
        check::record(self.rank);
        Some(RankedGuard {
            guard,
            #[cfg(any(debug_assertions, feature = "lock-order-check"))]
            rank: self.rank,
        })
    }

    /// The value, without locking: no other reference exists.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.lock.get_mut()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for RankedMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RankedMutex")
            .field("rank", &self.rank)
            .field("lock", &self.lock)
            .finish()
    }
}

impl<T> Deref for RankedGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for RankedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(any(debug_assertions, feature = "lock-order-check"))]
impl<T> Drop for RankedGuard<'_, T> {
    fn drop(&mut self) {
        check::release(self.rank);
    }
}

/// A `parking_lot::Condvar` waited on with a [`RankedGuard`]. The waiting
/// thread keeps the guard's rank: it retakes that lock before returning,
/// while still holding any lower-ranked lock it took before.
#[derive(Default)]
pub(crate) struct RankedCondvar(Condvar);

impl RankedCondvar {
    pub(crate) const fn new() -> RankedCondvar {
        RankedCondvar(Condvar::new())
    }

    pub(crate) fn wait<T>(&self, guard: &mut RankedGuard<'_, T>) {
        self.0.wait(&mut guard.guard);
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

#[cfg(any(debug_assertions, feature = "lock-order-check"))]
mod check {
    use std::cell::{Cell, RefCell};
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Rank;

    thread_local! {
        /// The ranks this thread holds, in the order taken.
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
        /// How many ranked locks this thread has taken.
        static TAKEN: Cell<u64> = const { Cell::new(0) };
    }

    /// Violations seen on any thread: a panic on the background thread
    /// only ends that thread, so tests read this as well.
    pub(super) static VIOLATIONS: AtomicU64 = AtomicU64::new(0);

    pub(super) fn acquire(rank: Rank) {
        let highest = HELD.with_borrow(|held| held.iter().copied().max());
        if let Some(h) = highest.filter(|h| *h >= rank) {
            let thread = std::thread::current();
            if thread.name() != Some(super::EXPECTED_VIOLATION_THREAD) {
                VIOLATIONS.fetch_add(1, Ordering::SeqCst);
            }
            panic!(
                "lock order violated on thread {:?}: taking {rank:?} while holding {h:?} \
                 (db.rs documents the order)",
                thread.name().unwrap_or("unnamed")
            );
        }
        record(rank);
    }

    pub(super) fn record(rank: Rank) {
        HELD.with_borrow_mut(|held| held.push(rank));
        TAKEN.set(TAKEN.get() + 1);
    }

    pub(super) fn release(rank: Rank) {
        HELD.with_borrow_mut(|held| {
            if let Some(i) = held.iter().rposition(|r| *r == rank) {
                held.remove(i);
            }
        });
    }

    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn taken() -> u64 {
        TAKEN.get()
    }
}

#[cfg(not(any(debug_assertions, feature = "lock-order-check")))]
mod check {
    use super::Rank;

    #[inline(always)]
    pub(super) fn acquire(_: Rank) {}

    #[inline(always)]
    pub(super) fn record(_: Rank) {}
}

/// How many ranked locks this thread has taken (with checking on).
#[cfg(any(debug_assertions, feature = "lock-order-check"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn taken_by_this_thread() -> u64 {
    check::taken()
}

/// How many out-of-order acquisitions any thread made, but for threads of
/// this name (the test that proves the check fires).
#[cfg(any(debug_assertions, feature = "lock-order-check"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn violations() -> u64 {
    check::VIOLATIONS.load(std::sync::atomic::Ordering::SeqCst)
}

#[cfg(any(debug_assertions, feature = "lock-order-check"))]
pub(crate) const EXPECTED_VIOLATION_THREAD: &str = "lock-order-expected-violation";

#[cfg(test)]
mod tests;
