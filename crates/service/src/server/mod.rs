//! The daemon: it owns the backend (an `AutoBackend` in `gvault serve`:
//! every CPU core and GPU), accepts clients on a Unix socket, and runs
//! their requests through the scheduler's workers.
//!
//! Threads: one acceptor, two per client (`client.rs`: reader, writer),
//! `workers` workers (`sched.rs`). Shutdown ([`DaemonHandle::shutdown`],
//! SIGTERM in `gvault serve`) stops accepting, fails queued requests with
//! a clear error, lets running jobs finish and their replies go out, then
//! closes every connection and removes the socket file.

mod access;
mod activation;
mod client;
mod keys;
mod sched;
mod status;

use std::collections::HashMap;
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gvault_accel::{AutoBackend, Backend};

pub use access::Access;
pub use activation::systemd_listener;
pub use sched::BatchPolicy;

use crate::protocol::Limits;

/// How the daemon runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub socket: PathBuf,
    pub access: Access,
    pub batch: BatchPolicy,
    pub workers: usize,
    pub limits: Limits,
    /// A client that does not read a reply within this long is dropped.
    pub send_timeout: Duration,
    pub max_clients: usize,
    /// Log connections and refusals to stderr.
    pub verbose: bool,
}

impl ServeConfig {
    pub fn new(socket: PathBuf) -> Self {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self {
            socket,
            access: Access::owner_only(),
            batch: BatchPolicy {
                enabled: true,
                small_bytes: 256 << 10,
                max_bytes: 16 << 20,
                max_requests: 1024,
                per_op: usize::MAX,
            },
            workers: cores.clamp(2, 32),
            limits: Limits {
                client_memory: 4 << 30,
                client_queue: 256,
                max_buffers: 4096,
                max_keys: 1024,
                max_request_body: crate::protocol::MAX_REQUEST_BODY,
            },
            send_timeout: Duration::from_secs(30),
            max_clients: 1024,
            verbose: false,
        }
    }
}

/// The default socket: `$XDG_RUNTIME_DIR/gvault.sock`, else
/// `/run/user/<uid>/gvault.sock` where that exists, else
/// `/tmp/gvault-<uid>/gvault.sock`.
pub fn default_socket() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&d).join("gvault.sock");
    }
    let uid = rustix::process::getuid().as_raw();
    let run = PathBuf::from(format!("/run/user/{uid}"));
    if run.is_dir() {
        return run.join("gvault.sock");
    }
    PathBuf::from(format!("/tmp/gvault-{uid}/gvault.sock"))
}

pub(crate) struct Shared {
    config: ServeConfig,
    backend: Arc<dyn Backend>,
    auto: Option<Arc<AutoBackend>>,
    sched: sched::Scheduler,
    keys: keys::Interner,
    clients: Mutex<HashMap<u64, Arc<client::Client>>>,
    next_client: AtomicU64,
    closing: AtomicBool,
    started: Instant,
    registration_warned: Once,
    accepted: AtomicU64,
    refused: AtomicU64,
    /// Shared buffers registered with the GPU (page-locked for DMA).
    registered: AtomicU64,
    /// The address the acceptor listens on, for waking it at shutdown.
    listen_addr: Option<std::os::unix::net::SocketAddr>,
}

impl Shared {
    fn log(&self, line: &str) {
        if self.config.verbose {
            eprintln!("gvault serve: {line}");
        }
    }

    fn log_once_registration(&self, why: &str) {
        self.registration_warned.call_once(|| {
            eprintln!(
                "gvault serve: warning: shared buffers cannot be registered with the GPU \
                 ({why}); GPU jobs over them take a staging copy"
            )
        });
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn add_client(&self, c: &Arc<client::Client>) {
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(c.id, Arc::clone(c));
        self.log(&format!(
            "client {} connected (pid {}, uid {})",
            c.id, c.peer.pid, c.peer.uid
        ));
    }

    fn forget_client(&self, c: &client::Client) {
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&c.id);
        self.sched.forget_client(c.id);
        self.log(&format!("client {} left", c.id));
    }
}

/// Stops a running daemon from another thread.
#[derive(Clone)]
pub struct DaemonHandle {
    shared: Arc<Shared>,
}

impl DaemonHandle {
    /// Begins shutdown; [`Daemon::run`] returns once it is complete.
    pub fn shutdown(&self) {
        if self.shared.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.sched.close();
        // Wake the acceptor: a connection to the address it listens on
        // (under socket activation, not necessarily the configured path).
        let _ = match &self.shared.listen_addr {
            Some(a) => UnixStream::connect_addr(a),
            None => UnixStream::connect(&self.shared.config.socket),
        };
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.shared
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// The status report `gvault serve status` prints.
    pub fn status_json(&self) -> String {
        self.shared.status_json()
    }
}

pub struct Daemon {
    shared: Arc<Shared>,
    listener: UnixListener,
    owns_socket: bool,
}

impl Daemon {
    /// Binds the socket (mode 0600, or 0660 with a group) and starts the
    /// workers. A stale socket file (no daemon answers on it) is replaced;
    /// a live one is an `AddrInUse` error.
    pub fn bind(
        config: ServeConfig,
        backend: Arc<dyn Backend>,
        auto: Option<Arc<AutoBackend>>,
    ) -> io::Result<Daemon> {
        let listener = access::bind(&config.socket, &config.access)?;
        Ok(Self::start(config, backend, auto, listener, true))
    }

    /// Serves on a socket someone else bound (systemd socket activation);
    /// the socket file is left in place at exit.
    pub fn from_listener(
        config: ServeConfig,
        backend: Arc<dyn Backend>,
        auto: Option<Arc<AutoBackend>>,
        listener: UnixListener,
    ) -> Daemon {
        Self::start(config, backend, auto, listener, false)
    }

    fn start(
        config: ServeConfig,
        backend: Arc<dyn Backend>,
        auto: Option<Arc<AutoBackend>>,
        listener: UnixListener,
        owns_socket: bool,
    ) -> Daemon {
        let shared = Arc::new(Shared {
            sched: sched::Scheduler::new(config.batch, config.workers),
            config,
            backend,
            auto,
            keys: keys::Interner::new(),
            clients: Mutex::new(HashMap::new()),
            next_client: AtomicU64::new(1),
            closing: AtomicBool::new(false),
            started: Instant::now(),
            registration_warned: Once::new(),
            accepted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            registered: AtomicU64::new(0),
            listen_addr: listener.local_addr().ok(),
        });
        Daemon {
            shared,
            listener,
            owns_socket,
        }
    }

    pub fn handle(&self) -> DaemonHandle {
        DaemonHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.shared.config.socket
    }

    /// Accepts and serves clients until shutdown, then cleans up.
    pub fn run(self) -> io::Result<()> {
        let shared = &self.shared;
        let workers: Vec<JoinHandle<()>> = (0..shared.config.workers)
            .map(|i| {
                let s = Arc::clone(shared);
                std::thread::Builder::new()
                    .name(format!("gvault-serve-job{i}"))
                    .spawn(move || s.sched.work(s.backend.as_ref()))
            })
            .collect::<io::Result<_>>()?;
        let mut conns: Vec<JoinHandle<()>> = Vec::new();
        for stream in self.listener.incoming() {
            if shared.closing.load(Ordering::Acquire) {
                break;
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of file descriptors and the like: back off, go on.
                    eprintln!("gvault serve: accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            };
            conns.retain(|h| !h.is_finished());
            if conns.len() >= shared.config.max_clients {
                shared.refused.fetch_add(1, Ordering::Relaxed);
                shared.log("too many clients; a connection was refused");
                continue;
            }
            shared.accepted.fetch_add(1, Ordering::Relaxed);
            let id = shared.next_client.fetch_add(1, Ordering::Relaxed);
            let s = Arc::clone(shared);
            match std::thread::Builder::new()
                .name(format!("gvault-serve-r{id}"))
                .spawn(move || client::serve(s, stream, id))
            {
                Ok(h) => conns.push(h),
                Err(e) => eprintln!("gvault serve: cannot start a client thread: {e}"),
            }
        }
        // Running jobs finish and reply; queued ones were failed by close().
        for w in workers {
            let _ = w.join();
        }
        let clients: Vec<_> = shared
            .clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        // Each connection ends once its queued replies are sent.
        for c in clients {
            c.stop_reading();
        }
        for h in conns {
            let _ = h.join();
        }
        if self.owns_socket {
            let _ = std::fs::remove_file(&shared.config.socket);
        }
        Ok(())
    }
}
