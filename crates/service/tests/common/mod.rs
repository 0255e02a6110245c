//! A daemon on a temporary socket, and a raw protocol client that can say
//! what a well-behaved client never would.

#![allow(dead_code)]

pub mod cases;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gvault_accel::{Backend, CpuBackend};
use gvault_service::protocol::{ErrorCode, Reply, Request, MAX_REPLY_BODY, VERSION};
use gvault_service::shm::SharedMemory;
use gvault_service::socket::{write_frame, Frame, FrameReader};
use gvault_service::{Daemon, DaemonHandle, ServeConfig};

pub struct TestDaemon {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub handle: DaemonHandle,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestDaemon {
    pub fn start() -> TestDaemon {
        Self::start_with(|_| {})
    }

    /// A CPU-backed daemon, its configuration adjusted by `tune`.
    pub fn start_with(tune: impl FnOnce(&mut ServeConfig)) -> TestDaemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gvault.sock");
        Self::start_at(dir, socket, tune)
    }

    pub fn start_at(
        dir: tempfile::TempDir,
        socket: PathBuf,
        tune: impl FnOnce(&mut ServeConfig),
    ) -> TestDaemon {
        Self::start_on(dir, socket, CpuBackend::shared(), tune)
    }

    /// A daemon running its jobs on `backend`.
    pub fn start_on(
        dir: tempfile::TempDir,
        socket: PathBuf,
        backend: Arc<dyn Backend>,
        tune: impl FnOnce(&mut ServeConfig),
    ) -> TestDaemon {
        let mut config = ServeConfig::new(socket.clone());
        config.workers = 4;
        tune(&mut config);
        Self::start_daemon(dir, socket, config, backend, None)
    }

    /// A daemon on the auto backend (CPU only where there is no GPU), as
    /// `gvault serve` runs by default: its status reports placements.
    pub fn start_auto() -> TestDaemon {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("gvault.sock");
        let mut config = ServeConfig::new(socket.clone());
        config.workers = 4;
        let auto = Arc::new(gvault_accel::AutoBackend::new());
        Self::start_daemon(dir, socket, config, auto.clone(), Some(auto))
    }

    fn start_daemon(
        dir: tempfile::TempDir,
        socket: PathBuf,
        config: ServeConfig,
        backend: Arc<dyn Backend>,
        auto: Option<Arc<gvault_accel::AutoBackend>>,
    ) -> TestDaemon {
        let daemon = Daemon::bind(config, backend, auto).unwrap();
        let handle = daemon.handle();
        let thread = Some(std::thread::spawn(move || daemon.run()));
        TestDaemon {
            dir,
            socket,
            handle,
            thread,
        }
    }

    /// Shuts down and waits for the daemon to finish; returns its directory.
    pub fn stop(mut self) -> tempfile::TempDir {
        self.shutdown_and_join();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.dir, dir)
    }

    fn shutdown_and_join(&mut self) {
        self.handle.shutdown();
        if let Some(t) = self.thread.take() {
            t.join().unwrap().unwrap();
        }
    }

    /// Waits (up to 10 s) until `n` clients are connected.
    pub fn wait_clients(&self, n: usize) {
        let t = Instant::now();
        while self.handle.clients() != n {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{} clients connected, expected {n}",
                self.handle.clients()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.handle.status_json()).unwrap()
    }

    /// The status's counters of op `name` ("sha256", "rsa-private", ...).
    pub fn op_status(&self, name: &str) -> serde_json::Value {
        let st = self.status();
        st["ops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["op"] == name)
            .unwrap_or_else(|| panic!("no op {name} in {st}"))
            .clone()
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shutdown_and_join();
        }
    }
}

/// A client that speaks the protocol by hand.
pub struct Raw {
    pub stream: UnixStream,
    frames: FrameReader,
    next: u64,
}

impl Raw {
    pub fn connect(socket: &Path) -> Raw {
        let stream = UnixStream::connect(socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let frames = FrameReader::new(stream.try_clone().unwrap(), MAX_REPLY_BODY, true);
        Raw {
            stream,
            frames,
            next: 1,
        }
    }

    /// Connects and says Hello.
    pub fn hello(socket: &Path) -> Raw {
        let mut r = Raw::connect(socket);
        match r.call(&Request::Hello {
            min_version: VERSION,
            max_version: VERSION,
        }) {
            Reply::Hello { version, .. } => assert_eq!(version, VERSION),
            other => panic!("{other:?}"),
        }
        r
    }

    pub fn send(&mut self, req: &Request) -> u64 {
        let id = self.next;
        self.next += 1;
        write_frame(&self.stream, &req.encode(id), None).unwrap();
        id
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        (&self.stream).write_all(bytes)
    }

    /// The next reply, or `None` when the daemon closed the connection.
    pub fn recv(&mut self) -> Option<(u64, Reply)> {
        match self.frames.next_frame() {
            Ok(Frame::Body(b)) => Some(Reply::decode(&b).unwrap()),
            Ok(Frame::Closed) => None,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("reading a reply: {e}"),
        }
    }

    pub fn call(&mut self, req: &Request) -> Reply {
        let id = self.send(req);
        let (got, reply) = self.recv().expect("the daemon closed the connection");
        assert_eq!(got, id);
        reply
    }

    pub fn take_fd(&mut self) -> Option<OwnedFd> {
        self.frames.take_fd()
    }

    /// A shared buffer: (id, mapping).
    pub fn alloc(&mut self, len: usize) -> (u32, SharedMemory) {
        match self.call(&Request::Alloc { len: len as u64 }) {
            Reply::Alloc { buffer, .. } => {
                let fd = self.take_fd().expect("no fd with the buffer");
                (buffer, SharedMemory::map(fd, len).unwrap())
            }
            other => panic!("{other:?}"),
        }
    }

    /// Waits for the daemon to close the connection (replies before that
    /// are returned).
    pub fn until_closed(&mut self) -> Vec<Reply> {
        let mut out = Vec::new();
        while let Some((_, r)) = self.recv() {
            out.push(r);
        }
        out
    }
}

/// The error code of a reply that must be an error.
pub fn code(r: &Reply) -> ErrorCode {
    match r {
        Reply::Error { code, .. } => *code,
        other => panic!("expected an error, got {other:?}"),
    }
}

pub const RSA_PEM: &str = include_str!("../../../accel/tests/data/rsa1024.pem");
