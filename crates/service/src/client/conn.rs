//! One connection to the daemon: requests from many threads multiplexed by
//! id. There is no reader thread: a waiting caller takes the reader's role,
//! reads frames until its own reply comes, leaving the others' replies (and
//! the memfd that comes with a buffer) where their callers find them, then
//! hands the role on. One caller alone thus reads its reply itself, with no
//! thread hop. When the connection breaks, every waiting call fails with
//! the reason and the connection is dead for good (the backend makes a new
//! one).

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::protocol::{Limits, Reply, Request, MAX_REPLY_BODY, VERSION};
use crate::shm::SharedMemory;
use crate::socket::{peer_of, write_frame, Frame, FrameReader};

/// How long a call waits for its reply before the connection is declared
/// broken (a daemon that hangs must not hang its clients forever).
const REPLY_TIMEOUT: Duration = Duration::from_secs(600);

type Delivered = Result<(Reply, Option<OwnedFd>), String>;

struct Demux {
    /// Whether some caller holds the reader's role.
    reading: bool,
    /// Replies read for callers that have not collected them yet.
    replies: HashMap<u64, Delivered>,
    /// Why the connection broke, once it has.
    broken: Option<String>,
}

pub struct Connection {
    writer: Mutex<UnixStream>,
    /// Used only by the caller holding the reader's role.
    frames: Mutex<FrameReader>,
    demux: Mutex<Demux>,
    arrived: Condvar,
    alive: AtomicBool,
    next_id: AtomicU64,
    pub limits: Limits,
}

impl Connection {
    /// Connects, checks that the daemon runs as this user or root (a
    /// socket in a shared directory could be someone else's), and says
    /// Hello.
    pub fn open(socket: &Path) -> Result<Arc<Connection>, String> {
        let stream = UnixStream::connect(socket)
            .map_err(|e| format!("cannot connect to {}: {e}", socket.display()))?;
        let me = rustix::process::getuid().as_raw();
        let peer = peer_of(&stream).map_err(|e| format!("no peer credentials: {e}"))?;
        if peer.uid != me && peer.uid != 0 {
            return Err(format!(
                "the daemon on {} runs as uid {}, not as this user ({me}) or root; refusing \
                 to hand it keys",
                socket.display(),
                peer.uid
            ));
        }
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .map_err(|e| format!("socket timeout: {e}"))?;
        let read_half = stream
            .try_clone()
            .map_err(|e| format!("cannot clone the socket: {e}"))?;
        let mut conn = Connection {
            writer: Mutex::new(stream),
            frames: Mutex::new(FrameReader::new(read_half, MAX_REPLY_BODY, true)),
            demux: Mutex::new(Demux {
                reading: false,
                replies: HashMap::new(),
                broken: None,
            }),
            arrived: Condvar::new(),
            alive: AtomicBool::new(true),
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

    fn lock_demux(&self) -> std::sync::MutexGuard<'_, Demux> {
        self.demux.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the connection broken (the first reason wins) and wakes every
    /// waiting caller.
    fn break_with(&self, why: String) {
        self.alive.store(false, Ordering::Release);
        let mut d = self.lock_demux();
        d.broken.get_or_insert(why);
        drop(d);
        self.arrived.notify_all();
        self.shutdown();
    }

    /// Sends a request and waits for its reply.
    pub fn call(&self, req: &Request) -> Result<(Reply, Option<OwnedFd>), String> {
        if let Some(why) = &self.lock_demux().broken {
            return Err(why.clone());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = req.encode(id);
        let sent = write_frame(
            &self.writer.lock().unwrap_or_else(|p| p.into_inner()),
            &body,
            None,
        );
        if let Err(e) = sent {
            let why = format!("the connection to the gvault service broke: {e}");
            self.break_with(why.clone());
            return Err(why);
        }
        self.wait_for(id)
    }

    /// Waits for reply `id`, reading for everyone while nobody else does.
    fn wait_for(&self, id: u64) -> Delivered {
        let mut d = self.lock_demux();
        loop {
            if let Some(r) = d.replies.remove(&id) {
                return r;
            }
            if let Some(why) = &d.broken {
                return Err(why.clone());
            }
            if d.reading {
                d = self.arrived.wait(d).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            d.reading = true;
            drop(d);
            let got = self.read_one();
            d = self.lock_demux();
            d.reading = false;
            match got {
                Ok(Some((rid, delivered))) => {
                    d.replies.insert(rid, delivered);
                }
                Ok(None) => {}
                Err(why) => {
                    self.alive.store(false, Ordering::Release);
                    d.broken.get_or_insert(why);
                }
            }
            // Someone's reply arrived, or the role is free: wake them all.
            self.arrived.notify_all();
        }
    }

    /// Reads one reply: (id, reply and its fd); `None` for a reply nobody
    /// waits for; an error ends the connection.
    fn read_one(&self) -> Result<Option<(u64, Delivered)>, String> {
        let mut frames = self.frames.lock().unwrap_or_else(|p| p.into_inner());
        let body = match frames.next_frame() {
            Ok(Frame::Body(b)) => b,
            Ok(Frame::Closed) => return Err("the gvault service closed the connection".into()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(format!(
                    "the gvault service did not answer within {} s",
                    REPLY_TIMEOUT.as_secs()
                ))
            }
            Err(e) => return Err(format!("the connection to the gvault service broke: {e}")),
        };
        let (id, reply) = Reply::decode(&body)
            .map_err(|e| format!("the gvault service sent a malformed reply: {e}"))?;
        let fd = match reply {
            Reply::Alloc { .. } => frames.take_fd(),
            _ => None,
        };
        if id == 0 {
            // An error for no request in particular ends the connection.
            if let Reply::Error { message, .. } = reply {
                return Err(format!(
                    "the gvault service ended the connection: {message}"
                ));
            }
            return Ok(None);
        }
        Ok(Some((id, Ok((reply, fd)))))
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
