//! `gvault bench service`: seed 004 §5 (issue 23), the overhead and the
//! concurrency of a shared crypto service. Throughput (GB/s and requests/s
//! over all clients) against request size, for 1 to 64 clients, side by
//! side in one run:
//!
//! - `in-process`: N threads, each with its own buffer, running one-segment
//!   jobs in a loop on one backend shared by the process (the auto backend,
//!   or the CPU backend with `--accel cpu`);
//! - `service`: N clients, each its own connection
//!   (`ServiceBackend::connect`) on its own thread, running the same jobs
//!   through a `gvault serve` daemon with batching on;
//! - `service-nobatch`: the same through a second daemon started with
//!   `--no-batching`.
//!
//! The bench starts both daemons itself (this executable's `serve`, on
//! sockets in a temporary directory) and stops them at the end, error or
//! not; `--socket` measures a daemon already running instead. Per cell it
//! reports the service's overhead against in-process (1 - service /
//! in-process) and what batching gains (service / service-nobatch), then
//! issue 23's targets where the run covers them. Each service mode's
//! results are first checked against the in-process backend's (same key,
//! nonce and data) at every op and size.
//!
//! Beside the streaming ops, two GPU-bound ones (issue 28): `fastcdc-blake3`
//! (one segment a request, chunked with [`CDC_PARAMS`] and each chunk
//! digested with the client's keyed BLAKE3 key) and `rsa-private` (a request
//! is `max(1, size / 256)` RSA-2048 private-key operations with the test key
//! `crates/accel/tests/data/rsa2048.pem`, reported in messages per second as
//! well as GB/s).

use rayon::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gvault_accel::{
    Aes256Key, AutoBackend, Backend, Blake3Key, ChunkParams, CpuBackend, CtrCipher, CtrIv,
    CtrSegment, Data, DataMut, DigestAlgo, Iv128, Job, Nonce96, OpKind, Output, RsaPrivateKey,
    SealSegment,
};
use gvault_service::{ServiceBackend, SharedBuffer};
use serde::Serialize;

use super::measure::{parse_nonzero_size, size_label};

#[derive(clap::Args, Debug)]
pub struct ServiceArgs {
    /// A shorter run: 100 ms cells, sizes 4K,64K,1M and 1 and 16 clients
    /// (unless --sizes, --clients or --min-ms say otherwise).
    #[arg(long)]
    quick: bool,
    /// Request sizes, comma separated [default: 512,4K,64K,1M,16M].
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<String>>,
    /// Client counts, comma separated [default: 1,4,16,64]. A client is one
    /// thread with its own buffer: in process, on the shared backend; through
    /// the service, with its own connection (one connection = one client).
    #[arg(long, value_delimiter = ',')]
    clients: Option<Vec<usize>>,
    /// Ops, comma separated [default: aes256gcm-seal,sha256,blake3]; also
    /// aes256ctr, blake3-keyed, md5, crc32, crc32c, and the GPU-bound
    /// fastcdc-blake3 and rsa-private. fastcdc-blake3: each request is one
    /// segment, chunked with fixed parameters whatever the request size
    /// (4 KiB min, 16 KiB average, 64 KiB max, normalization level 2; a
    /// request of at most 4 KiB is one chunk, digested without a boundary
    /// search), each chunk with the client's keyed BLAKE3 digest, no CRC-32C.
    /// rsa-private: each request is max(1, size / 256) RSA-2048 private-key
    /// operations on 256-byte messages (one test key for every client); the
    /// table gives its messages/s where the other ops give GB/s.
    #[arg(long, value_delimiter = ',')]
    ops: Option<Vec<String>>,
    /// Measured time of each run of a cell, in milliseconds [default: 300;
    /// 100 with --quick]; each mode first warms up for a tenth of it.
    #[arg(long)]
    min_ms: Option<u64>,
    /// Timed runs per cell and mode (the modes in turn, round by round);
    /// the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// The accelerators, in this process and in the daemons the bench
    /// starts: auto (every core and GPU, by the calibrated cost model),
    /// cpu, or gpu (every job on the GPU: seed 004's setting, where
    /// batching small requests into one launch is what pays).
    #[arg(long, value_name = "A", default_value = "auto", value_parser = ["auto", "cpu", "gpu"])]
    accel: String,
    /// Measure the daemon already listening on this socket instead of
    /// starting two: its `service` column is batched or not as that daemon
    /// runs, and there is no service-nobatch column (nor batching gain).
    /// --accel then picks the in-process backend only.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Every client uses the same AES key and keyed-BLAKE3 key (default: keys
    /// of its own, as different users' processes would). The daemon interns
    /// keys by their material, and a batch only joins requests under the
    /// same key: with a key each, AES (and blake3-keyed, fastcdc-blake3)
    /// requests from different clients never share a job, so batching
    /// cannot help them; with one key they coalesce like the digests.
    /// SHA-256 and BLAKE3 have no key: their small requests from all
    /// clients coalesce either way. rsa-private uses one key for every
    /// client either way.
    #[arg(long)]
    shared_key: bool,
    /// Each client's buffer comes from `ServiceBackend::alloc_shared`:
    /// memory mapped by the daemon too, which a request names in place, so
    /// nothing is copied. Default: ordinary Vec buffers, which the client
    /// copies into its shared staging buffer for each request (and, for
    /// in-place ops such as AES-GCM, copies back). In-process clients
    /// always use ordinary buffers.
    #[arg(long)]
    zero_copy: bool,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file (the table still prints).
    #[arg(long, value_name = "FILE.json")]
    save: Option<PathBuf>,
    /// Also draw the figure into this PNG: a row of panels per op, a panel
    /// per client count, GB/s against request size, a line per mode.
    #[arg(long, value_name = "FILE.png")]
    plot: Option<PathBuf>,
}

/// The modes, in column order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Mode {
    InProcess,
    Service,
    NoBatch,
}

impl Mode {
    pub(super) fn name(self) -> &'static str {
        match self {
            Mode::InProcess => "in-process",
            Mode::Service => "service",
            Mode::NoBatch => "service-nobatch",
        }
    }
}

pub(super) const MODES: [Mode; 3] = [Mode::InProcess, Mode::Service, Mode::NoBatch];

const DEFAULT_OPS: [OpKind; 3] = [OpKind::AesGcmSeal, OpKind::Sha256, OpKind::Blake3];
/// Ops whose requests this bench knows how to make.
const SUPPORTED: [OpKind; 10] = [
    OpKind::AesGcmSeal,
    OpKind::AesCtr,
    OpKind::Sha256,
    OpKind::Blake3,
    OpKind::Blake3Keyed,
    OpKind::Md5,
    OpKind::Crc32,
    OpKind::Crc32c,
    OpKind::ChunkDigest,
    OpKind::RsaPrivate,
];

/// The chunking of `fastcdc-blake3` requests, whatever their size: 4 KiB
/// min, 16 KiB average, 64 KiB max, normalization level 2, so that requests
/// from 8 KiB up get a boundary search (the store's 512 KiB default minimum
/// would leave every request below it one chunk, only digested).
const CDC_PARAMS: (u32, u32, u32, u8) = (4 << 10, 16 << 10, 64 << 10, 2);

/// The `rsa-private` key: RSA-2048, the accel crate's test key.
const RSA_PEM: &str = include_str!("../../../accel/tests/data/rsa2048.pem");

/// The `rsa-private` key, parsed once.
fn rsa_key() -> Result<&'static RsaPrivateKey, String> {
    static KEY: OnceLock<Result<RsaPrivateKey, String>> = OnceLock::new();
    KEY.get_or_init(|| {
        RsaPrivateKey::from_pem(RSA_PEM).map_err(|e| format!("the RSA-2048 test key: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Bytes of one `rsa-private` message: the modulus size.
const RSA_BYTES: usize = 2048 / 8;

/// Operations per request: RSA messages for `rsa-private`, else 1.
fn ops_per_request(op: OpKind, size: usize) -> usize {
    match op {
        OpKind::RsaPrivate => (size / RSA_BYTES).max(1),
        _ => 1,
    }
}

/// The bytes a request of `size` carries: `size`, but for `rsa-private`
/// whole messages (at least one).
fn request_len(op: OpKind, size: usize) -> usize {
    match op {
        OpKind::RsaPrivate => ops_per_request(op, size) * RSA_BYTES,
        _ => size,
    }
}

/// A client's request data for `op` at `size`: the fixed pattern, and for
/// `rsa-private` each message's top byte cleared (below the modulus). For
/// `fastcdc-blake3`, whose speed does depend on the data (where it cuts),
/// a fixed aperiodic stream instead: the pattern's 4 KiB period would cut
/// every chunk alike.
fn request_data(op: OpKind, size: usize) -> Vec<u8> {
    if op == OpKind::ChunkDigest {
        return aperiodic(size);
    }
    let mut v = pattern(request_len(op, size));
    if op == OpKind::RsaPrivate {
        for m in v.chunks_exact_mut(RSA_BYTES) {
            m[0] = 0;
        }
    }
    v
}

/// How long the bench waits for a daemon it started to answer.
const DAEMON_START: Duration = Duration::from_secs(10);
/// How long a stopping daemon has after SIGTERM before it is killed.
const DAEMON_STOP: Duration = Duration::from_secs(5);
/// A run whose clients have not all finished this long after its measured
/// time is reported as stuck (the service stopped answering).
const STALL: Duration = Duration::from_secs(30);

/// One mode's figures in a cell.
#[derive(Serialize, Clone, Copy)]
struct Rate {
    /// Input bytes per second over all clients, in GB (for rsa-private, its
    /// messages' bytes).
    gbps: f64,
    requests_per_s: f64,
    /// rsa-private: private-key operations (messages) per second.
    #[serde(skip_serializing_if = "Option::is_none")]
    ops_per_s: Option<f64>,
}

#[derive(Serialize)]
struct Cell {
    op: &'static str,
    request_bytes: usize,
    /// rsa-private: the messages of a request (`max(1, request_bytes /
    /// 256)`, each of 256 bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    messages_per_request: Option<usize>,
    clients: usize,
    /// Mode -> throughput over all clients.
    results: BTreeMap<&'static str, Rate>,
    /// 1 - service / in-process (negative: the service was faster).
    overhead: Option<f64>,
    /// service / service-nobatch.
    batching_gain: Option<f64>,
    /// Requests per job in the batching daemon over this cell's runs (from
    /// its status counters).
    service_mean_batch: Option<f64>,
}

impl Cell {
    fn gbps(&self, mode: Mode) -> Option<f64> {
        self.results.get(mode.name()).map(|r| r.gbps)
    }

    /// The table's figure for `mode`: messages/s for rsa-private, else GB/s.
    fn shown(&self, mode: Mode) -> Option<String> {
        let r = self.results.get(mode.name())?;
        Some(match r.ops_per_s {
            Some(ops) => format!("{ops:.0}"),
            None => format!("{:.3}", r.gbps),
        })
    }
}

#[derive(Serialize)]
struct Target {
    target: &'static str,
    /// Whether the run measured what the target needs.
    covered: bool,
    pass: Option<bool>,
    detail: String,
}

#[derive(Serialize)]
struct Report {
    cores: usize,
    /// One 64-byte round trip between two threads over a Unix socket, in
    /// microseconds: the floor of a request's latency (service_floor.rs).
    round_trip_floor_us: f64,
    accel: String,
    in_process_backend: String,
    /// "started by the bench ...", or the socket of the daemon measured.
    daemon: String,
    /// With --socket: whether the measured daemon batches (from its status).
    service_batching: Option<bool>,
    shared_key: bool,
    zero_copy: bool,
    min_ms: u64,
    repeat: usize,
    cells: Vec<Cell>,
    targets: Vec<Target>,
}

/// A client's keys. With `--shared-key` every client holds the same ones;
/// without it, an RSA key each too when the run has `rsa-private` (RSA-2048
/// generated from the client's seed; else the test key, [`rsa_key`]).
struct Keys {
    aes: Aes256Key,
    blake3: Blake3Key,
    rsa: Option<RsaPrivateKey>,
}

impl Keys {
    fn new(seed: u64, own_rsa: bool) -> Result<Keys, String> {
        let material = |what: &str| -> [u8; 32] {
            blake3::hash(format!("gvault bench service {what} key {seed}").as_bytes()).into()
        };
        let rsa = if own_rsa {
            let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(seed);
            let k = rsa::RsaPrivateKey::new(&mut rng, 2048).map_err(|e| e.to_string())?;
            Some(RsaPrivateKey::from_key(k).map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(Keys {
            aes: Aes256Key::from_bytes(material("aes")),
            blake3: Blake3Key::from_bytes(material("blake3")),
            rsa,
        })
    }

    fn rsa(&self) -> Result<&RsaPrivateKey, String> {
        match &self.rsa {
            Some(k) => Ok(k),
            None => rsa_key(),
        }
    }
}

enum Buf {
    Plain(Vec<u8>),
    Shared(SharedBuffer),
}

impl Buf {
    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Buf::Plain(v) => v,
            Buf::Shared(s) => s,
        }
    }
}

/// One client: a thread's backend handle, buffer and keys.
struct Client {
    backend: Arc<dyn Backend>,
    buf: Buf,
    keys: Arc<Keys>,
    /// Tells its nonces apart from other clients' (which may share a key).
    id: u32,
    seq: u64,
}

impl Client {
    fn request(&mut self, op: OpKind) -> Result<Vec<Output>, String> {
        self.seq += 1;
        one_request(
            self.backend.as_ref(),
            op,
            &self.keys,
            self.id,
            self.seq,
            self.buf.bytes(),
        )
    }
}

/// Runs `op` over `data` as one job: one segment, or for `rsa-private` one
/// per 256-byte message ([`request_data`]); its results.
fn one_request(
    b: &dyn Backend,
    op: OpKind,
    keys: &Keys,
    id: u32,
    seq: u64,
    data: &mut [u8],
) -> Result<Vec<Output>, String> {
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(&id.to_le_bytes());
    nonce[4..].copy_from_slice(&seq.to_le_bytes());
    let mut job = match op {
        OpKind::AesGcmSeal => Job::Seal {
            key: &keys.aes,
            segments: vec![SealSegment {
                nonce: Nonce96::from_bytes(nonce),
                aad: b"",
                data: DataMut::Host(data),
            }],
        },
        OpKind::AesCtr => {
            let mut iv = [0u8; 16];
            iv[..12].copy_from_slice(&nonce);
            Job::Ctr {
                cipher: CtrCipher::Aes256(&keys.aes),
                segments: vec![CtrSegment {
                    iv: CtrIv::B128(Iv128::from_bytes(iv)),
                    data: DataMut::Host(data),
                }],
            }
        }
        OpKind::ChunkDigest => {
            let (min, avg, max, level) = CDC_PARAMS;
            Job::ChunkDigest {
                params: ChunkParams::new(min, avg, max, level).map_err(|e| e.to_string())?,
                key: &keys.blake3,
                crc32c: false,
                segments: vec![Data::Host(data)],
            }
        }
        OpKind::RsaPrivate => Job::RsaPrivate {
            key: keys.rsa()?,
            segments: data.chunks_exact(RSA_BYTES).collect(),
        },
        _ => Job::Digest {
            algo: match op {
                OpKind::Sha256 => DigestAlgo::Sha256,
                OpKind::Blake3Keyed => DigestAlgo::Blake3Keyed(&keys.blake3),
                OpKind::Md5 => DigestAlgo::Md5,
                OpKind::Crc32 => DigestAlgo::Crc32,
                OpKind::Crc32c => DigestAlgo::Crc32c,
                _ => DigestAlgo::Blake3,
            },
            segments: vec![Data::Host(data)],
        },
    };
    let segments = job.len();
    let results = b.run(&mut job).map_err(|e| e.to_string())?;
    if results.len() != segments {
        return Err(format!(
            "a job of {segments} segments returned {} results",
            results.len()
        ));
    }
    results
        .into_iter()
        .map(|r| r.map_err(|e| e.to_string()))
        .collect()
}

/// `len` bytes of a fixed, non-trivial pattern (the ops' speed does not
/// depend on the data; filling gigabytes with random bytes would).
fn pattern(len: usize) -> Vec<u8> {
    let block: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let n = (len - v.len()).min(block.len());
        v.extend_from_slice(&block[..n]);
    }
    v
}

/// `len` bytes of a fixed aperiodic stream (splitmix64: a few GB/s, so
/// cheap next to the op at any size).
fn aperiodic(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        v.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// Start signal for a run's threads: they count themselves ready, then
/// wait for go (true) or abort (false).
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, Option<bool>)>,
    cv: Condvar,
}

impl Gate {
    fn ready_then_wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += 1;
        self.cv.notify_all();
        loop {
            if let Some(go) = s.1 {
                return go;
            }
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Waits until `n` threads are ready (or `limit` passes), then opens.
    fn open_when_ready(&self, n: usize, limit: Duration) -> bool {
        let start = Instant::now();
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.0 < n && start.elapsed() < limit {
            s = self
                .cv
                .wait_timeout(s, limit.saturating_sub(start.elapsed()))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let all = s.0 >= n;
        s.1 = Some(all);
        self.cv.notify_all();
        all
    }

    fn abort(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).1 = Some(false);
        self.cv.notify_all();
    }
}

/// Every client on its own thread, each running `op` in a loop for `dur`
/// (from a common start); returns the time until the last one finished and
/// the requests run in all. The clients come back in `clients`; if the
/// service stops answering, the run fails after `STALL` instead of hanging.
fn run_clients(
    clients: &mut Vec<Client>,
    op: OpKind,
    dur: Duration,
) -> Result<(Duration, u64), String> {
    let n = clients.len();
    if n == 0 {
        return Err("no clients left (an earlier run failed)".into());
    }
    let gate = Arc::new(Gate::default());
    let (tx, rx) = mpsc::channel();
    for (i, mut c) in clients.drain(..).enumerate() {
        let (gate2, tx) = (gate.clone(), tx.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("bench-client-{i}"))
            .spawn(move || {
                if !gate2.ready_then_wait() {
                    return;
                }
                let until = Instant::now() + dur;
                let mut done = 0u64;
                let result = loop {
                    if let Err(e) = c.request(op) {
                        break Err(e);
                    }
                    done += 1;
                    if Instant::now() >= until {
                        break Ok(done);
                    }
                };
                let _ = tx.send((i, c, result));
            });
        if let Err(e) = spawned {
            gate.abort();
            return Err(format!("cannot start client thread {i}: {e}"));
        }
    }
    drop(tx);
    if !gate.open_when_ready(n, STALL) {
        return Err(format!("the {n} client threads did not start"));
    }
    let start = Instant::now();
    let deadline = start + dur + STALL;
    let mut back: Vec<Option<Client>> = (0..n).map(|_| None).collect();
    let mut requests = 0u64;
    let mut failure = None;
    for finished in 0..n {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((i, c, r)) => {
                back[i] = Some(c);
                match r {
                    Ok(k) => requests += k,
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
            Err(_) => {
                return Err(format!(
                    "{} of {n} clients were still waiting for a request {:.0} s after \
                     their {} ms run ended: the service stopped answering",
                    n - finished,
                    STALL.as_secs_f64(),
                    dur.as_millis()
                ))
            }
        }
    }
    let elapsed = start.elapsed();
    *clients = back.into_iter().flatten().collect();
    match failure {
        Some(e) => Err(e),
        None => Ok((elapsed, requests)),
    }
}

/// The modes of one cell timed in turn, as `bench primitive` times the
/// columns it compares: a warm-up run of each (a tenth of `min_time`), then
/// `reps` rounds of one `min_time` run of each; each mode's median rate. A
/// host that drifts (the 2-core test host's round trips switch between two
/// speeds for seconds at a time) then moves every mode alike, and the
/// ratios between them hold. `Err((mode index, why))`.
fn measure_modes(
    sets: &mut [Vec<Client>],
    op: OpKind,
    size: usize,
    min_time: Duration,
    reps: usize,
) -> Result<Vec<Rate>, (usize, String)> {
    let warm_up = (min_time / 10).max(Duration::from_millis(1));
    for (i, clients) in sets.iter_mut().enumerate() {
        run_clients(clients, op, warm_up).map_err(|e| (i, e))?;
    }
    let mut rates: Vec<Vec<f64>> = vec![Vec::with_capacity(reps); sets.len()];
    for _ in 0..reps {
        for (i, clients) in sets.iter_mut().enumerate() {
            let (elapsed, requests) = run_clients(clients, op, min_time).map_err(|e| (i, e))?;
            rates[i].push(requests as f64 / elapsed.as_secs_f64().max(1e-9));
        }
    }
    let (bytes, ops) = (request_len(op, size), ops_per_request(op, size));
    Ok(rates
        .into_iter()
        .map(|mut r| {
            r.sort_by(f64::total_cmp);
            let requests_per_s = r[r.len() / 2];
            Rate {
                gbps: requests_per_s * bytes as f64 / 1e9,
                requests_per_s,
                ops_per_s: (op == OpKind::RsaPrivate).then_some(requests_per_s * ops as f64),
            }
        })
        .collect())
}

/// A daemon this bench started: SIGTERM and a wait when dropped, on every
/// path out of the bench (a kill if it does not stop).
struct Daemon {
    child: Child,
    name: &'static str,
    log: PathBuf,
}

impl Daemon {
    /// Starts `<this executable> serve` on `dir/<name>.sock` and waits until
    /// it answers; returns it and the first connection.
    fn start(
        dir: &Path,
        name: &'static str,
        batching: bool,
        accel: &str,
    ) -> Result<(Daemon, ServiceBackend), String> {
        let exe = std::env::current_exe()
            .map_err(|e| format!("cannot find this executable to start a daemon: {e}"))?;
        let socket = dir.join(format!("{name}.sock"));
        let log = dir.join(format!("{name}.log"));
        let log_file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let mut cmd = Command::new(&exe);
        cmd.arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(["--accel", accel]);
        if !batching {
            cmd.arg("--no-batching");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        // If the bench dies without its guards running (SIGKILL, a signal
        // sent to it alone), the daemon gets SIGTERM instead of living on.
        // SAFETY: prctl(2) is async-signal-safe and touches no memory of
        // the parent; the closure allocates nothing.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start `{} serve`: {e}", exe.display()))?;
        let mut daemon = Daemon { child, name, log };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = daemon.child.try_wait() {
                return Err(format!(
                    "the {name} daemon exited ({status}) before it answered; its log: {}",
                    daemon.log_text()
                ));
            }
            match ServiceBackend::connect(&socket) {
                Ok(b) => return Ok((daemon, b)),
                Err(e) if started.elapsed() >= DAEMON_START => {
                    return Err(format!(
                        "the {name} daemon did not answer on {} within {} s: {e}; its log: {}",
                        socket.display(),
                        DAEMON_START.as_secs(),
                        daemon.log_text()
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    fn log_text(&self) -> String {
        match std::fs::read_to_string(&self.log) {
            Ok(t) if t.trim().is_empty() => "(empty)".into(),
            Ok(t) => t.trim().to_string(),
            Err(e) => format!("(unreadable: {e})"),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // SAFETY: kill(2) on our own child, which has not been waited for,
        // so its pid cannot have been reused.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let t = Instant::now();
        while t.elapsed() < DAEMON_STOP {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                _ => return,
            }
        }
        eprintln!(
            "gvault bench service: the {} daemon (pid {}) did not stop within {} s of SIGTERM; killing it",
            self.name,
            self.child.id(),
            DAEMON_STOP.as_secs()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A service mode: its connections, one per client, and the daemon behind
/// them when the bench started it (dropped after the connections).
struct Service {
    mode: Mode,
    conns: Vec<Arc<ServiceBackend>>,
    _daemon: Option<Daemon>,
}

/// Runs `f` on a thread of its own and waits for it at most `STALL`: a
/// daemon that stops answering fails the bench instead of hanging it (the
/// client's calls have no timeout of their own).
fn bounded<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("bench-call".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match rx.recv_timeout(STALL) {
        Ok(r) => r,
        Err(_) => Err(format!(
            "no answer within {} s: the service stopped answering",
            STALL.as_secs()
        )),
    }
}

impl Service {
    /// Opens connections until there are `n`.
    fn connect(&mut self, n: usize) -> Result<(), String> {
        let socket = self.conns[0].socket().to_path_buf();
        while self.conns.len() < n {
            let at = self.conns.len() + 1;
            let socket = socket.clone();
            let b = bounded(move || ServiceBackend::connect(&socket))
                .map_err(|e| format!("{}: connection {at} of {n}: {e}", self.mode.name()))?;
            self.conns.push(Arc::new(b));
        }
        Ok(())
    }

    /// Client `i`'s zero-copy buffer for `op` at `size`, filled
    /// ([`request_data`]).
    fn alloc(&self, i: usize, op: OpKind, size: usize) -> Result<SharedBuffer, String> {
        let conn = self.conns[i].clone();
        let data = request_data(op, size);
        let len = data.len();
        let mut b = bounded(move || conn.alloc_shared(len).map_err(|e| e.to_string()))
            .map_err(|e| format!("{}: alloc_shared({len}): {e}", self.mode.name()))?;
        b.copy_from_slice(&data);
        Ok(b)
    }

    /// The daemon's status report.
    fn status(&self) -> Option<serde_json::Value> {
        let conn = self.conns[0].clone();
        let text = bounded(move || conn.status()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// (requests, jobs) the daemon has run for `op` so far.
    fn counters(&self, op: OpKind) -> Option<(u64, u64)> {
        let v = self.status()?;
        let ops = v["ops"].as_array()?;
        Some(
            ops.iter()
                .find(|o| o["op"] == op.name())
                .map_or((0, 0), |o| {
                    (
                        o["requests"].as_u64().unwrap_or(0),
                        o["jobs"].as_u64().unwrap_or(0),
                    )
                }),
        )
    }

    /// The service's result for one request against the in-process
    /// backend's, from the same key, nonce and data (and the bytes an
    /// in-place op left behind).
    fn check_results(
        &self,
        local: &Arc<dyn Backend>,
        op: OpKind,
        size: usize,
        zero_copy: bool,
    ) -> Result<(), String> {
        let what = || {
            format!(
                "{} {} through {}",
                op.name(),
                size_label(size),
                self.mode.name()
            )
        };
        let (local, conn) = (local.clone(), self.conns[0].clone());
        let mismatch = bounded(move || {
            let keys = Keys::new(u64::MAX, false)?;
            let data = request_data(op, size);
            let mut want_bytes = data.clone();
            let want = one_request(local.as_ref(), op, &keys, 7, 7, &mut want_bytes)?;
            let mut buf = if zero_copy {
                let mut s = conn.alloc_shared(data.len()).map_err(|e| e.to_string())?;
                s.copy_from_slice(&data);
                Buf::Shared(s)
            } else {
                Buf::Plain(data)
            };
            let got = one_request(conn.as_ref(), op, &keys, 7, 7, buf.bytes())?;
            let bytes_differ = buf.bytes() != &want_bytes[..];
            Ok((got != want || bytes_differ).then(|| {
                format!(
                    "{got:?} against {want:?}{}",
                    if bytes_differ {
                        "; the output bytes differ too"
                    } else {
                        ""
                    }
                )
            }))
        })
        .map_err(|e| format!("{}: {e}", what()))?;
        match mismatch {
            Some(why) => Err(format!(
                "{}: the result differs from the in-process backend's ({why})",
                what()
            )),
            None => Ok(()),
        }
    }
}

#[derive(Debug)]
struct Plan {
    ops: Vec<OpKind>,
    sizes: Vec<usize>,
    clients: Vec<usize>,
    min_time: Duration,
}

fn plan(args: &ServiceArgs) -> Result<Plan, String> {
    let ops: Vec<OpKind> = match &args.ops {
        Some(names) => names
            .iter()
            .map(|n| {
                OpKind::from_name(n.trim())
                    .filter(|op| SUPPORTED.contains(op))
                    .ok_or_else(|| {
                        let names: Vec<&str> = SUPPORTED.iter().map(|o| o.name()).collect();
                        format!("--ops: unknown op {n:?}; ops: {}", names.join(", "))
                    })
            })
            .collect::<Result<_, _>>()?,
        None => DEFAULT_OPS.to_vec(),
    };
    let mut sizes: Vec<usize> = match &args.sizes {
        Some(s) => s
            .iter()
            .map(|s| parse_nonzero_size(s, "--sizes"))
            .collect::<Result<_, _>>()?,
        None if args.quick => vec![4 << 10, 64 << 10, 1 << 20],
        None => vec![512, 4 << 10, 64 << 10, 1 << 20, 16 << 20],
    };
    if let Some(&big) = sizes
        .iter()
        .find(|&&s| s as u64 > gvault_accel::MAX_SEGMENT_LEN)
    {
        return Err(format!(
            "--sizes {}: a request is at most {} bytes",
            size_label(big),
            gvault_accel::MAX_SEGMENT_LEN
        ));
    }
    let mut clients = match &args.clients {
        Some(c) if c.contains(&0) => return Err("--clients: at least 1 client".into()),
        Some(c) => c.clone(),
        None if args.quick => vec![1, 16],
        None => vec![1, 4, 16, 64],
    };
    if args.repeat == 0 {
        return Err("--repeat: at least 1 run".into());
    }
    let min_ms = args.min_ms.unwrap_or(if args.quick { 100 } else { 300 });
    if min_ms == 0 {
        return Err("--min-ms: at least 1 ms".into());
    }
    let mut seen = Vec::new();
    let ops = ops.into_iter().filter(|o| {
        let new = !seen.contains(o);
        seen.push(*o);
        new
    });
    sizes.sort_unstable();
    sizes.dedup();
    clients.sort_unstable();
    clients.dedup();
    Ok(Plan {
        ops: ops.collect(),
        sizes,
        clients,
        min_time: Duration::from_millis(min_ms),
    })
}

/// The batching and the non-batching daemon, each with its first
/// connection.
fn start_daemons(dir: &Path, accel: &str) -> Result<Vec<Service>, String> {
    let mut services = Vec::new();
    for (mode, name, batching) in [
        (Mode::Service, "batching", true),
        (Mode::NoBatch, "nobatch", false),
    ] {
        let (daemon, b) = Daemon::start(dir, name, batching, accel)?;
        services.push(Service {
            mode,
            conns: vec![Arc::new(b)],
            _daemon: Some(daemon),
        });
    }
    Ok(services)
}

/// What every cell is measured with.
struct Setup<'a> {
    local: &'a Arc<dyn Backend>,
    services: &'a [Service],
    modes: &'a [Mode],
    /// Client i's keys.
    keys: &'a [Arc<Keys>],
    zero_copy: bool,
    min_time: Duration,
    reps: usize,
}

impl Setup<'_> {
    /// One cell: `clients` clients of each mode, timed in turn. Plain
    /// buffers come from (and go back to) `pool`.
    fn cell(
        &self,
        op: OpKind,
        size: usize,
        clients: usize,
        pool: &mut Vec<Vec<u8>>,
    ) -> Result<Cell, String> {
        let mut sets = Vec::with_capacity(self.modes.len());
        for &mode in self.modes {
            let svc = self.services.iter().find(|s| s.mode == mode);
            let mut set = Vec::with_capacity(clients);
            for (i, key) in self.keys.iter().take(clients).enumerate() {
                let mut plain = || Buf::Plain(pool.pop().unwrap_or_else(|| request_data(op, size)));
                let (backend, buf): (Arc<dyn Backend>, Buf) = match svc {
                    None => (self.local.clone(), plain()),
                    Some(s) if self.zero_copy => {
                        (s.conns[i].clone(), Buf::Shared(s.alloc(i, op, size)?))
                    }
                    Some(s) => (s.conns[i].clone(), plain()),
                };
                set.push(Client {
                    backend,
                    buf,
                    keys: key.clone(),
                    id: i as u32,
                    seq: 0,
                });
            }
            sets.push(set);
        }
        let batching = self.services.iter().find(|s| s.mode == Mode::Service);
        let before = batching.and_then(|s| s.counters(op));
        let rates =
            measure_modes(&mut sets, op, size, self.min_time, self.reps).map_err(|(i, e)| {
                format!(
                    "{} {} x{clients} {}: {e}",
                    op.name(),
                    size_label(size),
                    self.modes[i].name()
                )
            })?;
        let mut cell = Cell {
            op: op.name(),
            request_bytes: size,
            messages_per_request: (op == OpKind::RsaPrivate).then(|| ops_per_request(op, size)),
            clients,
            results: self.modes.iter().map(|m| m.name()).zip(rates).collect(),
            overhead: None,
            batching_gain: None,
            service_mean_batch: None,
        };
        if let (Some(s), Some((r0, j0))) = (batching, before) {
            if let Some((r1, j1)) = s.counters(op) {
                cell.service_mean_batch = (j1 > j0).then(|| (r1 - r0) as f64 / (j1 - j0) as f64);
            }
        }
        for c in sets.into_iter().flatten() {
            if let Buf::Plain(v) = c.buf {
                pool.push(v);
            }
        }
        let (local, svc, nobatch) = (
            cell.gbps(Mode::InProcess),
            cell.gbps(Mode::Service),
            cell.gbps(Mode::NoBatch),
        );
        cell.overhead = local.zip(svc).map(|(l, s)| 1.0 - s / l);
        cell.batching_gain = svc.zip(nobatch).map(|(s, nb)| s / nb);
        Ok(cell)
    }
}

pub fn run(args: ServiceArgs) -> Result<(), String> {
    let plan = plan(&args)?;
    if let Some(path) = &args.plot {
        // Refuse a bad path before the sweep, not after it.
        if !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("png"))
        {
            return Err(format!("--plot {}: name the figure *.png", path.display()));
        }
    }
    if let Some(path) = &args.save {
        std::fs::File::create(path).map_err(|e| format!("--save {}: {e}", path.display()))?;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let floor_us = super::service_floor::socket_round_trip_us(5000, 3)?;
    let (local, local_name): (Arc<dyn Backend>, String) = match args.accel.as_str() {
        "cpu" => {
            let c = CpuBackend::shared();
            let name = format!("cpu ({} threads)", c.threads());
            (c, name)
        }
        "gpu" => {
            let g = gvault_accel::GpuBackend::probe()
                .map_err(|why| format!("--accel gpu: no usable GPU: {why}"))?;
            (Arc::new(g), "gpu (every job on the GPU)".to_string())
        }
        _ => {
            let a = AutoBackend::shared();
            let name = format!(
                "auto ({} CPU threads, {})",
                a.cpu_threads(),
                if a.has_gpu() { "GPU" } else { "no GPU" }
            );
            (a, name)
        }
    };
    let max_clients = plan.clients.iter().copied().max().unwrap_or(1);

    // Dropped last: the daemons' sockets and logs.
    let dir = match &args.socket {
        Some(_) => None,
        None => Some(daemon_dir()?),
    };
    let mut services = match (&args.socket, &dir) {
        (Some(socket), _) => {
            let b = ServiceBackend::connect(socket).map_err(|e| {
                format!(
                    "--socket {}: no gvault service answers: {e}",
                    socket.display()
                )
            })?;
            vec![Service {
                mode: Mode::Service,
                conns: vec![Arc::new(b)],
                _daemon: None,
            }]
        }
        (None, Some(dir)) => start_daemons(dir.path(), &args.accel)?,
        (None, None) => unreachable!("a directory is made when no --socket is given"),
    };
    // As the measured daemon runs (with --socket), else the two started.
    let batching: Option<bool> = match &args.socket {
        Some(_) => services[0]
            .status()
            .and_then(|v| v["config"]["batching"].as_bool()),
        None => None,
    };
    let daemon_desc = match &args.socket {
        Some(socket) => format!(
            "{} (running; batching {})",
            socket.display(),
            match batching {
                Some(true) => "on",
                Some(false) => "off",
                None => "unknown",
            }
        ),
        None => "started by the bench, one with batching, one with --no-batching".into(),
    };
    for s in &mut services {
        s.connect(max_clients)?;
    }
    let modes: Vec<Mode> = std::iter::once(Mode::InProcess)
        .chain(services.iter().map(|s| s.mode))
        .collect();
    let keys: Vec<Arc<Keys>> = match args.shared_key {
        true => {
            let one = Arc::new(Keys::new(0, false)?);
            (0..max_clients).map(|_| one.clone()).collect()
        }
        false => {
            let own_rsa = plan.ops.contains(&OpKind::RsaPrivate);
            (0..max_clients as u64)
                .into_par_iter()
                .map(|i| Keys::new(i, own_rsa).map(Arc::new))
                .collect::<Result<_, String>>()?
        }
    };

    if !args.json {
        let cells = plan.ops.len() * plan.sizes.len() * plan.clients.len() * modes.len();
        let secs = cells as f64 * (plan.min_time.as_secs_f64() * (args.repeat as f64 + 0.1))
            + 0.05 * cells as f64;
        println!(
            "gvault bench service: {cores} cores; in process: {local_name}; daemons (--accel {}): {daemon_desc}",
            args.accel
        );
        println!(
            "round-trip floor: {floor_us:.1} us for 64 bytes between two threads over a Unix socket \
             (a request costs at least that plus a hand-off in the daemon)"
        );
        println!(
            "clients: {}; buffers: {}; GB/s over all clients, median of {} runs of >= {} ms (modes in turn) after a warm-up; about {:.0} s",
            if args.shared_key {
                "one key of each kind for all (their requests may share a job)"
            } else {
                "keys of their own (AES requests never share a job; RSA ones do, as a many-key job)"
            },
            if args.zero_copy {
                "shared with the daemon (zero copy)"
            } else {
                "ordinary (staged by a copy)"
            },
            args.repeat,
            plan.min_time.as_millis(),
            secs
        );
        if plan.ops.contains(&OpKind::RsaPrivate) {
            println!(
                "rsa-private: RSA-2048 private-key operations per second (not GB/s) in the \
                 in-process/service/service-nobatch columns; a request of SIZE is max(1, SIZE / 256) \
                 messages of 256 bytes (the JSON has both)"
            );
        }
        if plan.ops.contains(&OpKind::ChunkDigest) {
            let (min, avg, max, level) = CDC_PARAMS;
            println!(
                "fastcdc-blake3: GB/s of input; chunks of {} min, {} average, {} max (level {level}), \
                 each with a keyed BLAKE3 digest",
                size_label(min as usize),
                size_label(avg as usize),
                size_label(max as usize)
            );
        }
        println!(
            "{:<15} {:>7} {:>7} {:>10} {:>10} {:>15} {:>9} {:>10} {:>11} {:>6}",
            "op",
            "size",
            "clients",
            "in-process",
            "service",
            "service-nobatch",
            "overhead",
            "batch gain",
            "svc req/s",
            "batch"
        );
    }

    let setup = Setup {
        local: &local,
        services: &services,
        modes: &modes,
        keys: &keys,
        zero_copy: args.zero_copy,
        min_time: plan.min_time,
        reps: args.repeat,
    };
    let mut cells = Vec::new();
    for &op in &plan.ops {
        for &size in &plan.sizes {
            for s in &services {
                s.check_results(&local, op, size, args.zero_copy)?;
            }
            // Plain buffers, reused by every client count and mode.
            let mut pool: Vec<Vec<u8>> = Vec::new();
            for &n in &plan.clients {
                let cell = setup.cell(op, size, n, &mut pool)?;
                if !args.json {
                    print_cell(&cell);
                }
                cells.push(cell);
            }
        }
    }

    let targets = targets(&cells, &plan, args.shared_key);
    if !args.json {
        println!("\nissue 23 targets:");
        for t in &targets {
            let verdict = match t.pass {
                Some(true) => "PASS",
                Some(false) => "FAIL",
                None => "not covered",
            };
            println!("  {:<60} {verdict}: {}", t.target, t.detail);
        }
    }
    if let Some(path) = &args.plot {
        let points: Vec<super::service_plot::Point> = cells
            .iter()
            .flat_map(|c| {
                c.results
                    .iter()
                    .map(|(mode, r)| super::service_plot::Point {
                        op: c.op,
                        size: c.request_bytes,
                        clients: c.clients,
                        mode,
                        gbps: r.gbps,
                    })
            })
            .collect();
        let title = format!(
            "gvault bench service ({}, {cores} cores): GB/s over all clients vs request size",
            args.accel
        );
        let (w, h) = super::service_plot::draw(&points, &title, path)?;
        if !args.json {
            println!("figure: {} ({w}x{h})", path.display());
        }
    }
    if args.json || args.save.is_some() {
        let report = Report {
            cores,
            round_trip_floor_us: floor_us,
            accel: args.accel.clone(),
            in_process_backend: local_name,
            daemon: daemon_desc,
            service_batching: batching,
            shared_key: args.shared_key,
            zero_copy: args.zero_copy,
            min_ms: plan.min_time.as_millis() as u64,
            repeat: args.repeat,
            cells,
            targets,
        };
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        if let Some(path) = &args.save {
            std::fs::write(path, &text).map_err(|e| format!("--save {}: {e}", path.display()))?;
        }
        if args.json {
            println!("{text}");
        }
    }
    // Connections close before the daemons get SIGTERM (field order).
    drop(services);
    Ok(())
}

/// A private directory (mode 0700, as the daemon wants its socket's) for
/// the daemons' sockets and logs: in the temporary directory, unless its
/// path leaves too little of a socket address's 108 bytes.
fn daemon_dir() -> Result<tempfile::TempDir, String> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = std::env::temp_dir();
    let parent = if tmp.as_os_str().len() <= 64 {
        tmp
    } else {
        PathBuf::from("/tmp")
    };
    let fail = |e: std::io::Error| format!("cannot create a directory for the daemons: {e}");
    let dir = tempfile::Builder::new()
        .prefix("gvault-bench-service")
        .tempdir_in(parent)
        .map_err(fail)?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).map_err(fail)?;
    Ok(dir)
}

fn print_cell(c: &Cell) {
    let col = |m: Mode| c.shown(m).unwrap_or_else(|| "-".into());
    println!(
        "{:<15} {:>7} {:>7} {:>10} {:>10} {:>15} {:>9} {:>10} {:>11} {:>6}",
        c.op,
        size_label(c.request_bytes),
        c.clients,
        col(Mode::InProcess),
        col(Mode::Service),
        col(Mode::NoBatch),
        c.overhead
            .map_or("-".into(), |o| format!("{:.1}%", o * 100.0)),
        c.batching_gain.map_or("-".into(), |g| format!("{g:.2}x")),
        c.results
            .get(Mode::Service.name())
            .map_or("-".into(), |r| match r.requests_per_s {
                // rsa-private's 1 MiB requests (4096 messages) take seconds.
                x if x < 10.0 => format!("{x:.2}"),
                x => format!("{x:.0}"),
            }),
        c.service_mean_batch
            .map_or("-".into(), |b| format!("{b:.1}")),
    );
}

/// Issue 23's targets, over the cells the run measured.
fn targets(cells: &[Cell], plan: &Plan, shared_key: bool) -> Vec<Target> {
    let mut out = Vec::new();

    // 1. Overhead <= 5% against in-process at >= 64 KiB requests.
    const OVERHEAD: &str = "overhead <= 5% against in-process at >= 64 KiB";
    let big: Vec<&Cell> = cells
        .iter()
        .filter(|c| c.request_bytes >= 64 << 10 && c.overhead.is_some())
        .collect();
    if big.is_empty() {
        out.push(Target {
            target: OVERHEAD,
            covered: false,
            pass: None,
            detail: "needs requests of 64 KiB or more".into(),
        });
    } else {
        let above: Vec<String> = big
            .iter()
            .filter(|c| c.overhead.unwrap_or(0.0) > 0.05)
            .map(|c| {
                format!(
                    "{} {} x{} {:.1}%",
                    c.op,
                    size_label(c.request_bytes),
                    c.clients,
                    c.overhead.unwrap_or(0.0) * 100.0
                )
            })
            .collect();
        let worst = big
            .iter()
            .filter_map(|c| c.overhead)
            .fold(f64::MIN, f64::max);
        let mut detail = format!(
            "{} of {} cells; worst {:.1}%",
            big.len() - above.len(),
            big.len(),
            worst * 100.0
        );
        if !above.is_empty() {
            detail.push_str(&format!("; above: {}", above.join(", ")));
        }
        out.push(Target {
            target: OVERHEAD,
            covered: true,
            pass: Some(above.is_empty()),
            detail,
        });
    }

    // 2. 64 clients of 4 KiB AES-GCM: batching >= 3x no batching.
    const BATCHING: &str = "64 clients x 4 KiB AES-GCM: batching >= 3x no batching";
    let cell = cells.iter().find(|c| {
        c.op == OpKind::AesGcmSeal.name() && c.request_bytes == 4 << 10 && c.clients == 64
    });
    match cell.and_then(|c| c.batching_gain.map(|g| (c, g))) {
        Some((c, g)) => out.push(Target {
            target: BATCHING,
            covered: true,
            pass: Some(g >= 3.0),
            detail: format!(
                "{g:.2}x ({:.3} against {:.3} GB/s{}){}",
                c.gbps(Mode::Service).unwrap_or(0.0),
                c.gbps(Mode::NoBatch).unwrap_or(0.0),
                c.service_mean_batch
                    .map_or(String::new(), |b| format!(", {b:.1} requests a job")),
                if shared_key {
                    ""
                } else {
                    "; each client has its own key, so no two clients' AES requests share \
                     a job (--shared-key lets them)"
                }
            ),
        }),
        None => out.push(Target {
            target: BATCHING,
            covered: false,
            pass: None,
            detail: "needs aes256gcm-seal at 4KiB with 64 clients, both service modes".into(),
        }),
    }

    // 3. 64 clients together >= 80% of one client's peak, per op.
    const SCALING: &str = "64 clients >= 80% of one client's peak (per op)";
    if !(plan.clients.contains(&1) && plan.clients.contains(&64)) {
        out.push(Target {
            target: SCALING,
            covered: false,
            pass: None,
            detail: "needs 1 and 64 clients".into(),
        });
    } else {
        let peak = |op: &str, n: usize| {
            cells
                .iter()
                .filter(|c| c.op == op && c.clients == n)
                .filter_map(|c| Some((c.gbps(Mode::Service)?, c.request_bytes)))
                .max_by(|a, b| a.0.total_cmp(&b.0))
        };
        let mut pass = true;
        let mut details = Vec::new();
        for op in &plan.ops {
            if let (Some((one, s1)), Some((many, s64))) = (peak(op.name(), 1), peak(op.name(), 64))
            {
                let r = many / one;
                pass &= r >= 0.8;
                details.push(format!(
                    "{} {:.0}% ({:.3} GB/s at {} against {:.3} at {})",
                    op.name(),
                    r * 100.0,
                    many,
                    size_label(s64),
                    one,
                    size_label(s1)
                ));
            }
        }
        out.push(Target {
            target: SCALING,
            covered: !details.is_empty(),
            pass: (!details.is_empty()).then_some(pass),
            detail: details.join("; "),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(op: OpKind, size: usize, clients: usize, figures: [f64; 3]) -> Cell {
        let mut results = BTreeMap::new();
        for (m, g) in MODES.iter().zip(figures) {
            results.insert(
                m.name(),
                Rate {
                    gbps: g,
                    requests_per_s: g * 1e9 / size as f64,
                    ops_per_s: None,
                },
            );
        }
        Cell {
            op: op.name(),
            request_bytes: size,
            messages_per_request: None,
            clients,
            results,
            overhead: Some(1.0 - figures[1] / figures[0]),
            batching_gain: Some(figures[1] / figures[2]),
            service_mean_batch: None,
        }
    }

    fn plan_of(ops: Vec<OpKind>, clients: Vec<usize>) -> Plan {
        Plan {
            ops,
            sizes: vec![4 << 10, 64 << 10],
            clients,
            min_time: Duration::from_millis(1),
        }
    }

    #[test]
    fn targets_pass_fail_and_coverage() {
        let aes = OpKind::AesGcmSeal;
        let cells = vec![
            cell(aes, 4 << 10, 1, [1.0, 0.5, 0.5]),
            cell(aes, 4 << 10, 64, [4.0, 3.0, 0.5]),
            cell(aes, 64 << 10, 1, [2.0, 1.96, 1.9]),
            cell(aes, 64 << 10, 64, [8.0, 7.0, 6.0]),
        ];
        let t = targets(&cells, &plan_of(vec![aes], vec![1, 64]), true);
        // 64 KiB x64 is 12.5% over.
        assert_eq!(t[0].pass, Some(false), "{}", t[0].detail);
        assert!(t[0].detail.contains("1 of 2"), "{}", t[0].detail);
        // 3.0 / 0.5 = 6x.
        assert_eq!(t[1].pass, Some(true), "{}", t[1].detail);
        // 7.0 against 1.96.
        assert_eq!(t[2].pass, Some(true), "{}", t[2].detail);

        let few = vec![cell(aes, 4 << 10, 1, [1.0, 1.0, 1.0])];
        let t = targets(&few, &plan_of(vec![aes], vec![1]), false);
        assert!(t.iter().all(|t| !t.covered && t.pass.is_none()));
    }

    #[test]
    fn plan_defaults_and_refusals() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: ServiceArgs,
        }
        let p = |a: &[&str]| {
            let mut v = vec!["x"];
            v.extend_from_slice(a);
            plan(&Cli::parse_from(v).args)
        };
        let full = p(&[]).unwrap();
        assert_eq!(full.sizes, vec![512, 4096, 65536, 1 << 20, 16 << 20]);
        assert_eq!(full.clients, vec![1, 4, 16, 64]);
        assert_eq!(full.ops, DEFAULT_OPS.to_vec());
        assert_eq!(full.min_time, Duration::from_millis(300));
        let quick = p(&["--quick", "--clients", "2,1,2"]).unwrap();
        assert_eq!(quick.sizes, vec![4096, 65536, 1 << 20]);
        assert_eq!(quick.clients, vec![1, 2]);
        assert_eq!(quick.min_time, Duration::from_millis(100));
        assert!(p(&["--ops", "aes256gcm-open"])
            .unwrap_err()
            .contains("unknown op"));
        let gpu_bound = p(&["--ops", "fastcdc-blake3,rsa-private"]).unwrap();
        assert_eq!(gpu_bound.ops, vec![OpKind::ChunkDigest, OpKind::RsaPrivate]);
        assert!(p(&["--clients", "0"]).is_err());
        assert!(p(&["--sizes", "0"]).is_err());
        assert!(p(&["--repeat", "0"]).is_err());
    }

    #[test]
    fn one_request_on_the_cpu() {
        let cpu = CpuBackend::with_threads(1);
        let keys = Keys::new(1, false).unwrap();
        for op in SUPPORTED {
            let mut data = request_data(op, 1000);
            let out = one_request(&cpu, op, &keys, 1, 1, &mut data).unwrap();
            assert_eq!(out.len(), ops_per_request(op, 1000), "{op:?}");
            assert_eq!(out[0].tag().is_some(), op == OpKind::AesGcmSeal, "{op:?}");
        }
    }

    #[test]
    fn gpu_bound_requests() {
        // rsa-private: whole messages, at least one, each below the modulus.
        assert_eq!(request_len(OpKind::RsaPrivate, 100), 256);
        assert_eq!(request_len(OpKind::RsaPrivate, 64 << 10), 64 << 10);
        assert_eq!(ops_per_request(OpKind::RsaPrivate, 1000), 3);
        assert_eq!(request_len(OpKind::ChunkDigest, 1000), 1000);
        let cpu = CpuBackend::with_threads(1);
        let keys = Keys::new(1, false).unwrap();
        let mut data = request_data(OpKind::RsaPrivate, 512);
        assert!(data.chunks(256).all(|m| m[0] == 0));
        let out = one_request(&cpu, OpKind::RsaPrivate, &keys, 1, 1, &mut data).unwrap();
        assert!(out
            .iter()
            .all(|o| o.bytes().is_some_and(|b| b.len() == 256)));
        assert_ne!(out[0], out[1], "different messages");
        // fastcdc-blake3 at 64 KiB: several chunks, covering the request.
        let mut data = request_data(OpKind::ChunkDigest, 64 << 10);
        let out = one_request(&cpu, OpKind::ChunkDigest, &keys, 1, 1, &mut data).unwrap();
        let chunks = out[0].digested_chunks().unwrap();
        assert!(chunks.len() > 1, "{} chunks", chunks.len());
        assert_eq!(
            chunks.iter().map(|c| c.span.len as usize).sum::<usize>(),
            64 << 10
        );
        // Aperiodic data: chunk lengths vary (the 4 KiB pattern's period
        // would make them all alike).
        let mut data = request_data(OpKind::ChunkDigest, 1 << 20);
        let out = one_request(&cpu, OpKind::ChunkDigest, &keys, 1, 1, &mut data).unwrap();
        let mut lens: Vec<u32> = out[0]
            .digested_chunks()
            .unwrap()
            .iter()
            .map(|c| c.span.len)
            .collect();
        lens.sort_unstable();
        lens.dedup();
        assert!(lens.len() > 10, "chunk lengths {lens:?}");
    }
}
