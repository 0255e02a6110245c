//! One client connection: a reader thread that decodes requests, answers
//! the cheap ones (buffers, keys, status) and queues run requests; a
//! writer thread that sends replies in the order they are ready. The
//! client's buffers and keys live in tables only this connection can name.
//! At most `client_queue` requests are in flight: beyond that the reader
//! stops reading, so a flooding client fills its own socket, not the
//! daemon's memory; a client that never reads its replies is dropped when
//! a reply cannot be sent within the send timeout.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::Shutdown;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use gvault_accel::{ChunkParams, HostRegistration};

use super::keys::Key;
use super::sched::{ctr_iv, Pending, Segment};
use super::Shared;
use crate::protocol::{
    DigestKind, ErrorCode, KeyKind, Reply, Request, RunOp, RunRequest, MAX_REQUEST_BODY, VERSION,
};
use crate::shm::SharedMemory;
use crate::socket::{peer_of, write_bytes, write_now, Frame, FrameReader, Peer};

/// A shared buffer and its registration with the GPU (dropped first, while
/// the memory is still mapped: fields drop in declaration order).
pub struct Buffer {
    _registration: Option<HostRegistration>,
    pub mem: SharedMemory,
    /// The owner's count of bytes held, which this buffer leaves only when
    /// it is unmapped (after `Free` and after every job using it).
    held: Arc<AtomicU64>,
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.held.fetch_sub(self.mem.len() as u64, Ordering::AcqRel);
    }
}

/// A reply frame (length prefix included) on its way out.
struct Outgoing {
    frame: Vec<u8>,
    /// Bytes already written.
    sent: usize,
    /// A buffer whose memfd goes with this frame.
    fd_of: Option<Arc<Buffer>>,
}

/// Replies waiting for the writer thread. A reply is written straight by
/// the thread that made it when nothing is queued or being written and the
/// socket takes it whole without blocking (no thread hop); otherwise, and
/// for the rest of a frame the socket took only in part, the writer thread
/// sends it, blocking within the send timeout.
#[derive(Default)]
struct Outbox {
    queue: VecDeque<Outgoing>,
    /// Some thread is writing a frame now.
    writing: bool,
    /// No more replies: the writer sends what is queued and ends.
    finished: bool,
}

#[derive(Default)]
struct Tables {
    buffers: HashMap<u32, Arc<Buffer>>,
    next_buffer: u32,
    keys: HashMap<u32, Arc<Key>>,
    next_key: u32,
}

pub struct Client {
    pub id: u64,
    pub peer: Peer,
    stream: UnixStream,
    outbox: Mutex<Outbox>,
    outbox_changed: Condvar,
    open: AtomicBool,
    in_flight: Mutex<usize>,
    drained: Condvar,
    tables: Mutex<Tables>,
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    /// Bytes of shared memory mapped for this client, freed or not, until
    /// the last job using a buffer is done.
    memory: Arc<AtomicU64>,
}

impl Client {
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Sends a reply to request `id` (dropped if the client is gone).
    pub fn reply(&self, id: u64, reply: Reply) {
        self.send(id, reply, None);
    }

    fn lock_outbox(&self) -> std::sync::MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, id: u64, reply: Reply, fd_of: Option<Arc<Buffer>>) {
        let frame = crate::protocol::frame(&reply.encode(id));
        let mut ob = self.lock_outbox();
        if ob.finished {
            drop(ob);
            self.done_one();
            return;
        }
        let mut out = Outgoing {
            frame,
            sent: 0,
            fd_of,
        };
        if out.fd_of.is_none() && !ob.writing && ob.queue.is_empty() {
            ob.writing = true;
            drop(ob);
            let wrote = write_now(&self.stream, &out.frame);
            ob = self.lock_outbox();
            ob.writing = false;
            match wrote {
                Ok(n) if n == out.frame.len() => {
                    drop(ob);
                    self.outbox_changed.notify_all();
                    self.done_one();
                    return;
                }
                Ok(n) => out.sent = n,
                Err(_) => {
                    drop(ob);
                    self.close();
                    self.done_one();
                    return;
                }
            }
            // The rest of a frame goes before anything else.
            ob.queue.push_front(out);
        } else {
            ob.queue.push_back(out);
        }
        drop(ob);
        self.outbox_changed.notify_all();
    }

    fn done_one(&self) {
        let mut n = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        self.drained.notify_all();
    }

    /// Waits until fewer than `quota` requests are in flight; false once
    /// the client is closed.
    fn room(&self, quota: usize) -> bool {
        let mut n = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= quota && self.is_open() {
            n = self.drained.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        self.is_open()
    }

    /// Counts a request read (its reply will count it out).
    fn admit(&self) {
        *self.in_flight.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    pub fn in_flight(&self) -> usize {
        *self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// (buffers, bytes of buffers, keys) held.
    pub fn holdings(&self) -> (usize, u64, usize) {
        let t = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        (
            t.buffers.len(),
            self.memory.load(Ordering::Relaxed),
            t.keys.len(),
        )
    }

    /// Stops taking replies: the writer sends what is queued, then ends.
    fn finish(&self) {
        self.open.store(false, Ordering::Release);
        self.lock_outbox().finished = true;
        self.outbox_changed.notify_all();
        self.drained.notify_all();
    }

    /// Ends the connection after the replies already queued: its reader
    /// sees the end of input and winds it down.
    pub fn stop_reading(&self) {
        let _ = self.stream.shutdown(Shutdown::Read);
    }

    /// Closes the connection now: both threads end, tables are dropped
    /// (keys wiped once no job holds them, buffers unmapped likewise).
    pub fn close(&self) {
        self.open.store(false, Ordering::Release);
        let _ = self.stream.shutdown(Shutdown::Both);
        let dropped = {
            let mut ob = self.lock_outbox();
            ob.finished = true;
            std::mem::take(&mut ob.queue).len()
        };
        for _ in 0..dropped {
            self.done_one();
        }
        self.outbox_changed.notify_all();
        self.drained.notify_all();
    }
}

/// Serves one accepted connection until it closes; runs on its own thread.
pub fn serve(shared: Arc<Shared>, stream: UnixStream, id: u64) {
    let peer = match peer_of(&stream) {
        Ok(p) => p,
        Err(e) => {
            shared.log(&format!("client {id}: no peer credentials ({e}); refused"));
            return;
        }
    };
    if !shared.config.access.admits(&peer) {
        shared.log(&format!(
            "client {id}: uid {} is not allowed on this socket; refused",
            peer.uid
        ));
        return;
    }
    let _ = stream.set_write_timeout(Some(shared.config.send_timeout));
    let (Ok(read_half), Ok(write_half)) = (stream.try_clone(), stream.try_clone()) else {
        shared.log(&format!("client {id}: cannot clone the socket; refused"));
        return;
    };
    let client = Arc::new(Client {
        id,
        peer,
        stream,
        outbox: Mutex::new(Outbox::default()),
        outbox_changed: Condvar::new(),
        open: AtomicBool::new(true),
        in_flight: Mutex::new(0),
        drained: Condvar::new(),
        tables: Mutex::new(Tables {
            next_buffer: 1,
            next_key: 1,
            ..Tables::default()
        }),
        requests: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        memory: Arc::new(AtomicU64::new(0)),
    });
    let writer = {
        let client = Arc::clone(&client);
        std::thread::Builder::new()
            .name(format!("gvault-serve-w{id}"))
            .spawn(move || write_loop(&client, &write_half))
    };
    let Ok(writer) = writer else {
        client.close();
        return;
    };
    shared.add_client(&client);
    if shared.is_closing() {
        // Shutdown may have listed the clients before this one joined.
        client.stop_reading();
    }
    let why = read_loop(&shared, &client, read_half);
    shared.forget_client(&client);
    // Replies already queued (such as the error that ended a hostile
    // connection) still go out, within the send timeout.
    client.finish();
    let _ = writer.join();
    client.close();
    client
        .tables
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    if let Some(why) = why {
        shared.log(&format!("client {id} (pid {}): {why}", client.peer.pid));
    }
}

fn write_loop(client: &Client, stream: &UnixStream) {
    loop {
        let out = {
            let mut ob = client.lock_outbox();
            loop {
                if !ob.writing {
                    if let Some(out) = ob.queue.pop_front() {
                        ob.writing = true;
                        break out;
                    }
                    if ob.finished {
                        return;
                    }
                }
                ob = client
                    .outbox_changed
                    .wait(ob)
                    .unwrap_or_else(|p| p.into_inner());
            }
        };
        let fd = out.fd_of.as_ref().map(|b| b.mem.fd().as_fd());
        if write_bytes(stream, &out.frame[out.sent..], fd).is_err() {
            // A closed peer, or one that did not read within the send
            // timeout: drop it.
            client.close();
        }
        client.lock_outbox().writing = false;
        client.outbox_changed.notify_all();
        client.done_one();
    }
}

/// Reads and handles requests until the client leaves; says why it ended
/// when that is worth a log line.
fn read_loop(shared: &Shared, client: &Arc<Client>, stream: UnixStream) -> Option<String> {
    let mut frames = FrameReader::new(stream, MAX_REQUEST_BODY, false);
    let quota = shared.config.limits.client_queue as usize;
    let mut greeted = false;
    loop {
        if !client.room(quota) {
            return None;
        }
        let frame = frames.next_frame();
        // Every frame read gets exactly one reply, which counts it out.
        client.admit();
        let body = match frame {
            Ok(Frame::Body(b)) => b,
            Ok(Frame::Closed) => return None,
            Err(e) if !client.is_open() => return Some(format!("closed ({e})")),
            Err(e) => {
                // An oversized length prefix or a torn frame: say why, close.
                client.reply(
                    0,
                    Reply::Error {
                        code: ErrorCode::Protocol,
                        message: e.to_string(),
                    },
                );
                return Some(format!("protocol error: {e}"));
            }
        };
        let (id, req) = match Request::decode(&body) {
            Ok(r) => r,
            Err(e) => {
                let id = body
                    .get(1..9)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_le_bytes);
                client.reply(
                    id,
                    Reply::Error {
                        code: ErrorCode::Protocol,
                        message: format!("malformed request: {e}"),
                    },
                );
                return Some(format!("malformed request: {e}"));
            }
        };
        client.requests.fetch_add(1, Ordering::Relaxed);
        if !greeted {
            match req {
                Request::Hello {
                    min_version,
                    max_version,
                } if min_version <= VERSION && VERSION <= max_version => {
                    greeted = true;
                    client.reply(
                        id,
                        Reply::Hello {
                            version: VERSION,
                            limits: shared.config.limits,
                        },
                    );
                    continue;
                }
                Request::Hello { .. } => {
                    client.reply(
                        id,
                        Reply::Error {
                            code: ErrorCode::Version,
                            message: format!("this daemon speaks protocol version {VERSION} only"),
                        },
                    );
                    return Some("no common protocol version".into());
                }
                _ => {
                    client.reply(
                        id,
                        Reply::Error {
                            code: ErrorCode::Protocol,
                            message: "the first message must be Hello".into(),
                        },
                    );
                    return Some("did not say Hello".into());
                }
            }
        }
        if matches!(req, Request::Hello { .. }) {
            client.reply(id, error(ErrorCode::Protocol, "Hello twice"));
            return Some("said Hello twice".into());
        }
        handle(shared, client, id, req);
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Error {
        code,
        message: message.into(),
    }
}

fn handle(shared: &Shared, client: &Arc<Client>, id: u64, req: Request) {
    let limits = shared.config.limits;
    match req {
        // The reader ends the connection on a second Hello before this.
        Request::Hello { .. } => client.reply(id, error(ErrorCode::Protocol, "Hello twice")),
        Request::Status => client.reply(id, Reply::Status(shared.status_json())),
        Request::Alloc { len } => match alloc(shared, client, len) {
            Ok((buffer, buf)) => client.send(id, Reply::Alloc { buffer, len }, Some(buf)),
            Err(r) => client.reply(id, r),
        },
        Request::Free { buffer } => {
            let mut t = client.tables.lock().unwrap_or_else(|p| p.into_inner());
            let r = match t.buffers.remove(&buffer) {
                Some(_) => Reply::Done,
                None => error(ErrorCode::UnknownBuffer, format!("no buffer {buffer}")),
            };
            drop(t);
            client.reply(id, r);
        }
        Request::RegisterKey { kind, material } => {
            let full = {
                let t = client.tables.lock().unwrap_or_else(|p| p.into_inner());
                t.keys.len() >= limits.max_keys as usize
            };
            let r = if full {
                error(
                    ErrorCode::Quota,
                    format!("at most {} keys per connection", limits.max_keys),
                )
            } else {
                match shared.keys.intern(kind, &material) {
                    Ok(key) => {
                        let mut t = client.tables.lock().unwrap_or_else(|p| p.into_inner());
                        let t = &mut *t;
                        let handle = next_free(&mut t.next_key, |h| t.keys.contains_key(&h));
                        t.keys.insert(handle, key);
                        Reply::Key { handle }
                    }
                    Err(e) => error(ErrorCode::BadKey, e),
                }
            };
            client.reply(id, r);
        }
        Request::ReleaseKey { handle } => {
            let gone = client
                .tables
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys
                .remove(&handle)
                .is_some();
            client.reply(
                id,
                if gone {
                    Reply::Done
                } else {
                    error(ErrorCode::UnknownKey, format!("no key {handle}"))
                },
            );
        }
        Request::Run(run) => match resolve(client, id, run) {
            Ok(p) => {
                client.bytes.fetch_add(p.bytes, Ordering::Relaxed);
                if let Err(p) = shared.sched.submit_or_run(shared.backend.as_ref(), p) {
                    p.client.reply(
                        id,
                        error(
                            ErrorCode::ShuttingDown,
                            "the gvault service is shutting down",
                        ),
                    );
                }
            }
            Err(r) => client.reply(id, r),
        },
    }
}

fn alloc(shared: &Shared, client: &Client, len: u64) -> Result<(u32, Arc<Buffer>), Reply> {
    let limits = shared.config.limits;
    if client
        .tables
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .buffers
        .len()
        >= limits.max_buffers as usize
    {
        return Err(error(
            ErrorCode::Quota,
            format!("at most {} buffers per connection", limits.max_buffers),
        ));
    }
    // Reserve the bytes first (they count until the buffer is unmapped).
    let held = &client.memory;
    let reserved = held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
        (len > 0 && m.saturating_add(len) <= limits.client_memory).then(|| m + len)
    });
    if let Err(m) = reserved {
        return Err(error(
            ErrorCode::Quota,
            format!(
                "a buffer of {len} bytes: this connection holds {m} of its {} bytes",
                limits.client_memory
            ),
        ));
    }
    let mem = match SharedMemory::create(&format!("gvault-client-{}", client.id), len as usize) {
        Ok(m) => m,
        Err(e) => {
            held.fetch_sub(len, Ordering::AcqRel);
            return Err(error(ErrorCode::Internal, format!("shared memory: {e}")));
        }
    };
    // SAFETY: the mapping lives in the same Buffer and is dropped after
    // the registration (field order).
    let registration = match unsafe { shared.backend.register_host(mem.as_ptr(), mem.len()) } {
        Some(Ok(r)) => {
            shared.registered.fetch_add(1, Ordering::Relaxed);
            Some(r)
        }
        Some(Err(e)) => {
            shared.log_once_registration(&e.to_string());
            None
        }
        None => None,
    };
    let buf = Arc::new(Buffer {
        _registration: registration,
        mem,
        held: Arc::clone(held),
    });
    let mut t = client.tables.lock().unwrap_or_else(|p| p.into_inner());
    let t = &mut *t;
    let id = next_free(&mut t.next_buffer, |id| t.buffers.contains_key(&id));
    t.buffers.insert(id, Arc::clone(&buf));
    Ok((id, buf))
}

/// The next id from `counter` (never 0) that `taken` does not claim: ids
/// wrap after 2^32 and must not land on a live entry.
fn next_free(counter: &mut u32, taken: impl Fn(u32) -> bool) -> u32 {
    loop {
        let id = *counter;
        *counter = counter.wrapping_add(1).max(1);
        if id != 0 && !taken(id) {
            return id;
        }
    }
}

/// Checks a run request against the client's own tables and makes it a
/// queued job: every buffer and key must be this client's, every segment
/// inside its buffer, in-place segments must not overlap, and the key must
/// be of the op's kind.
fn resolve(client: &Arc<Client>, id: u64, run: RunRequest) -> Result<Pending, Reply> {
    let t = client.tables.lock().unwrap_or_else(|p| p.into_inner());
    let key_of = |h: u32, kinds: &[KeyKind]| -> Result<Arc<Key>, Reply> {
        let k = t.keys.get(&h).ok_or_else(|| {
            error(
                ErrorCode::UnknownKey,
                format!("no key {h} on this connection"),
            )
        })?;
        let kind = match **k {
            Key::Aes256(_) => KeyKind::Aes256,
            Key::Blake3(_) => KeyKind::Blake3,
            Key::Tea(_) => KeyKind::Tea,
            Key::Blowfish(_) => KeyKind::Blowfish,
            Key::Rsa(_) => KeyKind::Rsa,
        };
        if !kinds.contains(&kind) {
            return Err(error(
                ErrorCode::BadRequest,
                format!(
                    "key {h} is a {kind:?} key; {} needs {kinds:?}",
                    run.op.kind()
                ),
            ));
        }
        Ok(Arc::clone(k))
    };
    let params = |p: crate::protocol::ChunkWire| {
        ChunkParams::new(p.min, p.avg, p.max, p.level)
            .map_err(|e| error(ErrorCode::BadRequest, format!("chunk parameters: {e}")))
    };
    let (key, chunk) = match run.op {
        RunOp::Seal { key } | RunOp::Open { key } => (Some(key_of(key, &[KeyKind::Aes256])?), None),
        RunOp::Ctr { cipher, key } => {
            let kind = match cipher {
                crate::protocol::CtrKind::Aes256 => KeyKind::Aes256,
                crate::protocol::CtrKind::Tea => KeyKind::Tea,
                crate::protocol::CtrKind::Blowfish => KeyKind::Blowfish,
            };
            (Some(key_of(key, &[kind])?), None)
        }
        RunOp::Digest { algo, key } => match algo {
            DigestKind::Blake3Keyed => (Some(key_of(key, &[KeyKind::Blake3])?), None),
            _ => (None, None),
        },
        RunOp::Chunk { params: p } => (None, Some(params(p)?)),
        RunOp::ChunkDigest { params: p, key, .. } => {
            (Some(key_of(key, &[KeyKind::Blake3])?), Some(params(p)?))
        }
        RunOp::Rsa { key } => (Some(key_of(key, &[KeyKind::Rsa])?), None),
    };
    let mut segments = Vec::with_capacity(run.segments.len());
    let mut bytes = 0u64;
    for (i, s) in run.segments.into_iter().enumerate() {
        let buf = t.buffers.get(&s.data.buffer).ok_or_else(|| {
            error(
                ErrorCode::UnknownBuffer,
                format!(
                    "segment {i}: no buffer {} on this connection",
                    s.data.buffer
                ),
            )
        })?;
        let inside = s
            .data
            .offset
            .checked_add(s.data.len)
            .is_some_and(|end| end <= buf.mem.len() as u64);
        if !inside {
            return Err(error(
                ErrorCode::BadSegment,
                format!(
                    "segment {i}: {} bytes at {} leave buffer {} ({} bytes)",
                    s.data.len,
                    s.data.offset,
                    s.data.buffer,
                    buf.mem.len()
                ),
            ));
        }
        if matches!(run.op, RunOp::Ctr { .. }) && ctr_iv(&s.iv).is_none() {
            return Err(error(
                ErrorCode::BadRequest,
                format!(
                    "segment {i}: a counter block is 8 or 16 bytes, not {}",
                    s.iv.len()
                ),
            ));
        }
        bytes += s.data.len;
        segments.push(Segment {
            buf: Arc::clone(buf),
            offset: s.data.offset as usize,
            len: s.data.len as usize,
            nonce: s.nonce,
            tag: s.tag,
            aad: s.aad,
            iv: s.iv,
        });
    }
    drop(t);
    if run.op.writes() {
        check_disjoint(&segments)?;
    }
    Ok(Pending {
        client: Arc::clone(client),
        id,
        op: run.op,
        key,
        params: chunk,
        segments,
        bytes,
    })
}

/// In-place segments must not overlap: each is handed to the backend as
/// its own mutable slice.
fn check_disjoint(segments: &[Segment]) -> Result<(), Reply> {
    let mut spans: Vec<(usize, usize, usize)> = segments
        .iter()
        .filter(|s| s.len > 0)
        .map(|s| (Arc::as_ptr(&s.buf) as usize, s.offset, s.offset + s.len))
        .collect();
    spans.sort_unstable();
    for w in spans.windows(2) {
        if w[0].0 == w[1].0 && w[1].1 < w[0].2 {
            return Err(error(
                ErrorCode::BadSegment,
                "in-place segments overlap in one buffer",
            ));
        }
    }
    Ok(())
}

impl Tables {
    /// Lets go of every buffer and key (each freed once no job holds it).
    fn clear(&mut self) {
        self.buffers.clear();
        self.keys.clear();
    }
}

impl From<io::Error> for Reply {
    fn from(e: io::Error) -> Reply {
        error(ErrorCode::Internal, e.to_string())
    }
}
