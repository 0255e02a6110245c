//! Busy time of a backup's stages, summed over the threads of each, and
//! printed at the backup's end when `GVAULT_CAS_TRACE` is set: which stage
//! bounds a backup, measured rather than guessed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
pub(crate) enum Stage {
    /// Reading a large file's windows.
    Read,
    /// The chunk + id job of a window.
    Chunk,
    /// Dedup, compression and gathering chunks into packs.
    Pack,
    /// Of `Pack`: index lookups of the chunk ids.
    Dedup,
    /// Of `Pack`: deciding compression, compressing.
    Compress,
    /// Of `Pack`: copying chunks into packs.
    Gather,
    /// Of `Pack`: waiting for a pack writer to take a full pack.
    PackWait,
    /// Sealing packs (every pack writer).
    Seal,
    /// Writing packs (every pack writer).
    Write,
}

const NAMES: [&str; Stage::Write as usize + 1] = [
    "read", "chunk", "pack", "dedup", "compress", "gather", "wait", "seal", "write",
];

pub(crate) struct StageClock {
    start: Instant,
    nanos: [AtomicU64; NAMES.len()],
    on: bool,
}

impl StageClock {
    pub(crate) fn new() -> StageClock {
        StageClock {
            start: Instant::now(),
            nanos: Default::default(),
            on: gvault_accel::tuning::tuning().cas_trace,
        }
    }

    /// Runs `f`, its time counted to `stage` when tracing.
    pub(crate) fn time<R>(&self, stage: Stage, f: impl FnOnce() -> R) -> R {
        if !self.on {
            return f();
        }
        let t = Instant::now();
        let r = f();
        self.nanos[stage as usize].fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    /// The stages' busy seconds against the wall time, one line.
    pub(crate) fn line(&self) -> String {
        let secs = |i: usize| {
            let ns = self.nanos[i].load(Ordering::Relaxed);
            Duration::from_nanos(ns).as_secs_f64()
        };
        let list = |from: usize, to: usize| {
            (from..to)
                .map(|i| format!("{} {:.2}", NAMES[i], secs(i)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "backup stages, busy seconds: {} [{}], {} (wall {:.2})",
            list(0, 3),
            list(3, 7),
            list(7, 9),
            self.start.elapsed().as_secs_f64()
        )
    }

    /// Prints [`StageClock::line`] when tracing.
    pub(crate) fn report(&self) {
        if self.on {
            eprintln!("gvault: {}", self.line());
        }
    }
}
