//! One connection to the daemon: requests from many threads multiplexed by
//! id; a reader thread hands each reply (and the memfd that comes with a
//! buffer) to the thread waiting for it. When the connection breaks, every
//! waiting call fails with the reason and the connection is dead for good
//! (the backend makes a new one).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

use crate::protocol::{Limits, Reply, Request, MAX_REPLY_BODY, VERSION};
use crate::shm::SharedMemory;
use crate::socket::{write_frame, Frame, FrameReader};

type Waiter = SyncSender<Result<(Reply, Option<OwnedFd>), String>>;

pub struct Connection {
    writer: Mutex<UnixStream>,
    waiting: Arc<Mutex<HashMap<u64, Waiter>>>,
    alive: Arc<AtomicBool>,
    /// Why the connection broke, once it has.
    broken: Arc<Mutex<Option<String>>>,
    next_id: AtomicU64,
    pub limits: Limits,
}

impl Connection {
    /// Connects and says Hello.
    pub fn open(socket: &Path) -> Result<Arc<Connection>, String> {
        let stream = UnixStream::connect(socket)
            .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
        let read_half = stream
            .try_clone()
            .map_err(|e| format!("cannot clone the socket: {e}"))?;
        let waiting: Arc<Mutex<HashMap<u64, Waiter>>> = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let broken: Arc<Mutex<Option<String>>> = Arc::default();
        {
            let (waiting, alive, broken) = (waiting.clone(), alive.clone(), broken.clone());
            std::thread::Builder::new()
                .name("gvault-service-reader".into())
                .spawn(move || {
                    let why = read_replies(read_half, &waiting);
                    alive.store(false, Ordering::Release);
                    *broken.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                    for (_, w) in waiting.lock().unwrap_or_else(|p| p.into_inner()).drain() {
                        let _ = w.send(Err(why.clone()));
                    }
                })
                .map_err(|e| format!("cannot start the reply reader: {e}"))?;
        }
        let mut conn = Connection {
            writer: Mutex::new(stream),
            waiting,
            alive,
            broken,
            next_id: AtomicU64::new(1),
            limits: Limits {
                client_memory: 0,
                client_queue: 0,
                max_buffers: 0,
                max_keys: 0,
                max_request_body: 0,
            },
        };
        match conn.call(&Request::Hello {
            min_version: VERSION,
            max_version: VERSION,
        })? {
            (Reply::Hello { limits, .. }, _) => conn.limits = limits,
            (Reply::Error { message, .. }, _) => {
                return Err(format!("the daemon refused the connection: {message}"))
            }
            (other, _) => return Err(format!("unexpected reply to Hello: {other:?}")),
        }
        Ok(Arc::new(conn))
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Sends a request and waits for its reply.
    pub fn call(&self, req: &Request) -> Result<(Reply, Option<OwnedFd>), String> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        self.waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        if !self.is_alive() {
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            return Err(self.why_broken());
        }
        let body = req.encode(id);
        let sent = write_frame(
            &self.writer.lock().unwrap_or_else(|p| p.into_inner()),
            &body,
            None,
        );
        if let Err(e) = sent {
            self.waiting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            self.alive.store(false, Ordering::Release);
            return Err(format!("the connection to the gvault service broke: {e}"));
        }
        rx.recv().unwrap_or_else(|_| Err(self.why_broken()))
    }

    fn why_broken(&self) -> String {
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_else(|| "the connection to the gvault service is closed".into())
    }

    /// A new shared buffer of `len` bytes: (id, mapping).
    pub fn alloc(&self, len: usize) -> Result<(u32, SharedMemory), String> {
        match self.call(&Request::Alloc { len: len as u64 })? {
            (Reply::Alloc { buffer, len: l }, Some(fd)) if l == len as u64 => {
                let mem = SharedMemory::map(fd, len)
                    .map_err(|e| format!("cannot map a shared buffer: {e}"))?;
                Ok((buffer, mem))
            }
            (Reply::Alloc { .. }, _) => Err("a buffer came without its file descriptor".into()),
            (Reply::Error { message, .. }, _) => Err(message),
            (other, _) => Err(format!("unexpected reply to Alloc: {other:?}")),
        }
    }

    /// Closes the connection (the daemon then drops its buffers and keys).
    pub fn shutdown(&self) {
        let _ = self
            .writer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Delivers replies until the connection ends; returns why it ended.
fn read_replies(stream: UnixStream, waiting: &Mutex<HashMap<u64, Waiter>>) -> String {
    let mut frames = FrameReader::new(stream, MAX_REPLY_BODY, true);
    loop {
        let body = match frames.next_frame() {
            Ok(Frame::Body(b)) => b,
            Ok(Frame::Closed) => return "the gvault service closed the connection".into(),
            Err(e) => return format!("the connection to the gvault service broke: {e}"),
        };
        let (id, reply) = match Reply::decode(&body) {
            Ok(r) => r,
            Err(e) => return format!("the gvault service sent a malformed reply: {e}"),
        };
        let fd = match reply {
            Reply::Alloc { .. } => frames.take_fd(),
            _ => None,
        };
        let w = waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        match (w, &reply) {
            (Some(w), _) => {
                let _ = w.send(Ok((reply, fd)));
            }
            // An error for no request in particular ends the connection.
            (None, Reply::Error { message, .. }) => {
                return format!("the gvault service ended the connection: {message}")
            }
            (None, _) => {}
        }
    }
}
