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
    /// Of `Pack`: waiting for a pack writer to take a full pack.
    PackWait,
    /// Sealing packs (every pack writer).
    Seal,
    /// Writing packs (every pack writer).
    Write,
}

const NAMES: [&str; 6] = ["read", "chunk", "pack", "pack-wait", "seal", "write"];

pub(crate) struct StageClock {
    start: Instant,
    nanos: [AtomicU64; 6],
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
        let secs = |i: usize| Duration::from_nanos(self.nanos[i].load(Ordering::Relaxed));
        let parts: Vec<String> = NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} {:.2}", secs(i).as_secs_f64()))
            .collect();
        format!(
            "backup stages, busy seconds: {} (wall {:.2})",
            parts.join(", "),
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
