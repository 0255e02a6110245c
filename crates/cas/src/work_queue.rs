//! A bounded hand-off of work to worker threads, and their results back in
//! any order: what the backup's pack uploads and a checkpoint's pack
//! writers share. The caller spawns the workers (scoped or not), each
//! running [`serve`] on the ends [`WorkQueue::new`] returns.

use std::sync::mpsc::{sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};

pub(crate) struct WorkQueue<In, T> {
    tx: Option<SyncSender<In>>,
    rx: Receiver<Result<T>>,
    in_flight: usize,
}

/// The workers' ends: where they take work, where they hand back results.
pub(crate) type WorkerEnds<In, T> = (Arc<Mutex<Receiver<In>>>, Sender<Result<T>>);

impl<In: Send, T: Send> WorkQueue<In, T> {
    /// A queue holding at most `capacity` items not yet taken.
    pub(crate) fn new(capacity: usize) -> (Self, WorkerEnds<In, T>) {
        let (tx, work) = sync_channel::<In>(capacity);
        let (done, rx) = std::sync::mpsc::channel::<Result<T>>();
        let q = WorkQueue {
            tx: Some(tx),
            rx,
            in_flight: 0,
        };
        (q, (Arc::new(Mutex::new(work)), done))
    }

    /// Hands `x` to the workers (waits while the queue is full).
    pub(crate) fn send(&mut self, x: In) -> Result<()> {
        let tx = self
            .tx
            .as_ref()
            .ok_or_else(|| Error::Accel("pack writers stopped".into()))?;
        tx.send(x)
            .map_err(|_| Error::Accel("pack writer threads ended".into()))?;
        self.in_flight += 1;
        Ok(())
    }

    /// Results ready now (`wait`: all of them).
    pub(crate) fn collect(&mut self, wait: bool) -> Vec<Result<T>> {
        let mut out = Vec::new();
        while self.in_flight > 0 {
            let r = if wait {
                self.rx.recv().map_err(|_| ())
            } else {
                self.rx.try_recv().map_err(|_| ())
            };
            match r {
                Ok(x) => {
                    self.in_flight -= 1;
                    out.push(x);
                }
                Err(()) if wait => {
                    out.push(Err(Error::Accel("a pack writer thread ended".into())));
                    self.in_flight = 0;
                }
                Err(()) => break,
            }
        }
        out
    }

    /// No more work: the workers end once the queue is empty.
    pub(crate) fn close(&mut self) {
        self.tx = None;
    }
}

/// A worker's loop: runs `f` on each item until the queue closes or the
/// results' receiver is gone.
pub(crate) fn serve<In, T>(ends: WorkerEnds<In, T>, f: impl Fn(In) -> Result<T>) {
    let (work, done) = ends;
    loop {
        let next = match work.lock() {
            Ok(w) => w.recv(),
            Err(_) => return,
        };
        let Ok(x) = next else { return };
        if done.send(f(x)).is_err() {
            return;
        }
    }
}
