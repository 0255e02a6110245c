//! Seeds for the service protocol: a session with a real daemon (CPU
//! backend, temporary socket) that sends every request and every op a
//! client sends, and provokes every error the daemon answers with; the
//! request bodies, the daemon's reply bodies and both byte streams (with
//! their frames) become the seeds. Replies the daemon cannot be made to
//! send on demand (every segment and backend error, `ShuttingDown`) are
//! encoded by the protocol's own encoder.

use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use gvault_accel::{
    Backend, BackendError, CpuBackend, OpKind, Output, SegmentError, SegmentErrorKind, Tag,
};
use gvault_service::protocol::{
    frame, BufRef, ChunkWire, CtrKind, DigestKind, ErrorCode, KeyKind, Reply, Request, RunOp,
    RunRequest, SegmentSpec, MAX_REPLY_BODY, MAX_REQUEST_BODY, VERSION,
};
use gvault_service::shm::SharedMemory;
use gvault_service::socket::{write_frame, Frame, FrameReader};
use gvault_service::{Daemon, ServeConfig};
use zeroize::Zeroizing;

use crate::seeds::SeedWriter;

/// The shared buffer every run of the session works on.
const BUF_LEN: usize = 64 << 10;
/// Small chunking parameters, so that 16 KiB hold several chunks.
const CHUNKS: ChunkWire = ChunkWire {
    min: 256,
    avg: 1024,
    max: 4096,
    level: 1,
};

/// A connection speaking the protocol by hand, keeping every byte both
/// ways.
struct Conn {
    stream: UnixStream,
    frames: FrameReader,
    next: u64,
    sent: Vec<u8>,
    received: Vec<u8>,
}

impl Conn {
    fn open(socket: &std::path::Path) -> Conn {
        let stream = UnixStream::connect(socket).expect("connecting to the seed daemon");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("read timeout");
        let frames = FrameReader::new(
            stream.try_clone().expect("cloning the socket"),
            MAX_REPLY_BODY,
            true,
        );
        Conn {
            stream,
            frames,
            next: 1,
            sent: Vec::new(),
            received: Vec::new(),
        }
    }

    /// Sends raw bytes (a frame or not).
    fn send_raw(&mut self, bytes: &[u8], w: &mut SeedWriter) {
        use std::io::Write;
        (&self.stream).write_all(bytes).expect("sending");
        self.sent.extend_from_slice(bytes);
        if let Some(body) = bytes.get(4..).filter(|b| !b.is_empty()) {
            w.add("service_request", body);
        }
    }

    fn send(&mut self, req: &Request, w: &mut SeedWriter) -> u64 {
        let id = self.next;
        self.next += 1;
        let body = req.encode(id);
        write_frame(&self.stream, &body, None).expect("sending a request");
        self.sent.extend_from_slice(&frame(&body));
        w.add("service_request", &body);
        id
    }

    /// The next reply, `None` once the daemon closed the connection.
    fn recv(&mut self, w: &mut SeedWriter) -> Option<Reply> {
        match self.frames.next_frame() {
            Ok(Frame::Body(body)) => {
                self.received.extend_from_slice(&frame(&body));
                w.add("service_reply", &body);
                Some(Reply::decode(&body).expect("the daemon's reply decodes").1)
            }
            Ok(Frame::Closed) => None,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("reading a reply: {e}"),
        }
    }

    fn call(&mut self, req: &Request, w: &mut SeedWriter) -> Reply {
        self.send(req, w);
        self.recv(w).expect("the daemon closed the connection")
    }

    fn hello(&mut self, w: &mut SeedWriter) {
        let r = self.call(
            &Request::Hello {
                min_version: VERSION,
                max_version: VERSION,
            },
            w,
        );
        assert!(matches!(r, Reply::Hello { .. }), "{r:?}");
    }

    /// Replies until the daemon closes the connection.
    fn until_closed(&mut self, w: &mut SeedWriter) {
        while self.recv(w).is_some() {}
    }

    /// Both streams as `service_frames` inputs: requests as the daemon
    /// reads them (no descriptors), replies as a client does.
    fn add_streams(&self, w: &mut SeedWriter, modes: &[u8]) {
        for &mode in modes {
            let mut input = vec![mode & !8];
            input.extend_from_slice(&self.sent);
            w.add("service_frames", &input);
            let mut input = vec![mode | 8];
            input.extend_from_slice(&self.received);
            w.add("service_frames", &input);
        }
    }
}

fn key(kind: KeyKind, material: &[u8]) -> Request {
    Request::RegisterKey {
        kind,
        material: Zeroizing::new(material.to_vec()),
    }
}

fn handle(r: Reply) -> u32 {
    match r {
        Reply::Key { handle } => handle,
        other => panic!("expected a key handle, got {other:?}"),
    }
}

fn seg(buffer: u32, offset: u64, len: u64) -> SegmentSpec {
    SegmentSpec {
        data: BufRef {
            buffer,
            offset,
            len,
        },
        ..SegmentSpec::default()
    }
}

fn run(op: RunOp, segments: Vec<SegmentSpec>) -> Request {
    Request::Run(RunRequest { op, segments })
}

/// The PKCS#1 DER of accel's 1024-bit test key.
fn rsa_der() -> Vec<u8> {
    let pem = include_str!("../../crates/accel/tests/data/rsa1024.pem");
    let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("the test key's PEM")
}

pub fn service(w: &mut SeedWriter) {
    let tmp = tempfile::tempdir().expect("temporary directory");
    let socket = tmp.path().join("gvault.sock");
    let mut config = ServeConfig::new(socket.clone());
    config.workers = 2;
    let backend: Arc<dyn Backend> = CpuBackend::shared();
    let daemon = Daemon::bind(config, backend, None).expect("binding the seed daemon");
    let stop = daemon.handle();
    let thread = std::thread::spawn(move || daemon.run());

    session(w, &socket);
    refusals(w, &socket);
    stop.shutdown();
    thread
        .join()
        .expect("the seed daemon's thread")
        .expect("the seed daemon");
    encoded(w);
}

/// One client's life: every request kind, every op, and the errors a
/// connection survives.
fn session(w: &mut SeedWriter, socket: &std::path::Path) {
    let mut c = Conn::open(socket);
    c.hello(w);
    c.call(&Request::Status, w);
    let id = c.send(
        &Request::Alloc {
            len: BUF_LEN as u64,
        },
        w,
    );
    let (buf, mem) = match c.recv(w) {
        Some(Reply::Alloc { buffer, .. }) => {
            let fd = c.frames.take_fd().expect("a buffer's descriptor");
            (buffer, SharedMemory::map(fd, BUF_LEN).expect("mapping it"))
        }
        other => panic!("reply {id} to Alloc: {other:?}"),
    };
    // SAFETY: nothing else in this process holds the mapping, and the
    // daemon touches it only while a job over it runs (each call below
    // waits for its reply).
    let bytes = unsafe { mem.slice_mut(0, BUF_LEN) }.expect("the whole buffer");
    let mut xof = blake3::Hasher::new()
        .update(b"gvault service seeds")
        .finalize_xof();
    xof.fill(bytes);

    let aes = handle(c.call(&key(KeyKind::Aes256, &[7; 32]), w));
    let b3 = handle(c.call(&key(KeyKind::Blake3, &[9; 32]), w));
    let tea = handle(c.call(&key(KeyKind::Tea, &[3; 16]), w));
    let bf = handle(c.call(&key(KeyKind::Blowfish, b"a blowfish key"), w));
    let rsa = handle(c.call(&key(KeyKind::Rsa, &rsa_der()), w));
    // The same material again: another handle, the same key inside.
    c.call(&key(KeyKind::Aes256, &[7; 32]), w);

    // AES-GCM: seal three segments, open two (one with a wrong tag).
    let sealed: Vec<SegmentSpec> = (0..3u8)
        .map(|i| SegmentSpec {
            nonce: [i; 12],
            aad: vec![i; usize::from(i) * 5],
            ..seg(buf, u64::from(i) * 1024, 1000)
        })
        .collect();
    let tags = match c.call(&run(RunOp::Seal { key: aes }, sealed.clone()), w) {
        Reply::Run(r) => r
            .into_iter()
            .map(|r| match r {
                Ok(Output::Tag(t)) => t,
                other => panic!("a seal result: {other:?}"),
            })
            .collect::<Vec<Tag>>(),
        other => panic!("a seal reply: {other:?}"),
    };
    let mut opened: Vec<SegmentSpec> = sealed[..2].to_vec();
    opened[0].tag = *tags[0].as_bytes();
    opened[1].tag = [0xee; 16];
    c.call(&run(RunOp::Open { key: aes }, opened), w);

    for (cipher, key, iv) in [
        (CtrKind::Aes256, aes, 16),
        (CtrKind::Tea, tea, 8),
        (CtrKind::Blowfish, bf, 8),
    ] {
        let segments = vec![
            SegmentSpec {
                iv: vec![1; iv],
                ..seg(buf, 4096, 777)
            },
            SegmentSpec {
                iv: vec![2; iv],
                ..seg(buf, 8192, 0)
            },
        ];
        c.call(&run(RunOp::Ctr { cipher, key }, segments), w);
    }
    for (algo, key) in [
        (DigestKind::Blake3, 0),
        (DigestKind::Blake3Keyed, b3),
        (DigestKind::Sha256, 0),
        (DigestKind::Md5, 0),
        (DigestKind::Crc32, 0),
        (DigestKind::Crc32c, 0),
    ] {
        let segments = vec![seg(buf, 0, 3000), seg(buf, 100, 0)];
        c.call(&run(RunOp::Digest { algo, key }, segments), w);
    }
    c.call(
        &run(RunOp::Chunk { params: CHUNKS }, vec![seg(buf, 0, 16 << 10)]),
        w,
    );
    for crc32c in [false, true] {
        let op = RunOp::ChunkDigest {
            params: CHUNKS,
            key: b3,
            crc32c,
        };
        c.call(&run(op, vec![seg(buf, 16 << 10, 12 << 10)]), w);
    }
    // RSA: a good input, a short one, one past the modulus.
    bytes[32768] = 0;
    bytes[33024..33152].fill(0xff);
    let segments = vec![
        seg(buf, 32768, 128),
        seg(buf, 32768, 5),
        seg(buf, 33024, 128),
    ];
    c.call(&run(RunOp::Rsa { key: rsa }, segments), w);
    // A request of no segments.
    c.call(
        &run(
            RunOp::Digest {
                algo: DigestKind::Sha256,
                key: 0,
            },
            vec![],
        ),
        w,
    );

    // Errors the connection survives.
    c.call(&Request::Free { buffer: 999 }, w);
    c.call(&Request::ReleaseKey { handle: 999 }, w);
    c.call(&run(RunOp::Seal { key: 999 }, vec![seg(buf, 0, 16)]), w);
    c.call(&run(RunOp::Seal { key: tea }, vec![seg(buf, 0, 16)]), w);
    c.call(
        &run(
            RunOp::Digest {
                algo: DigestKind::Md5,
                key: 0,
            },
            vec![seg(buf + 1, 0, 16)],
        ),
        w,
    );
    c.call(
        &run(
            RunOp::Digest {
                algo: DigestKind::Md5,
                key: 0,
            },
            vec![seg(buf, BUF_LEN as u64 - 8, 16)],
        ),
        w,
    );
    let overlap = vec![
        SegmentSpec {
            nonce: [1; 12],
            ..seg(buf, 0, 100)
        },
        SegmentSpec {
            nonce: [2; 12],
            ..seg(buf, 50, 100)
        },
    ];
    c.call(&run(RunOp::Seal { key: aes }, overlap), w);
    c.call(&Request::Alloc { len: 0 }, w);
    c.call(&Request::Alloc { len: u64::MAX }, w);
    c.call(&key(KeyKind::Aes256, &[1; 5]), w);
    c.call(&key(KeyKind::Rsa, b"not a key"), w);
    let bad = ChunkWire { min: 1, ..CHUNKS };
    c.call(&run(RunOp::Chunk { params: bad }, vec![seg(buf, 0, 64)]), w);
    c.call(
        &run(
            RunOp::Ctr {
                cipher: CtrKind::Aes256,
                key: aes,
            },
            vec![SegmentSpec {
                iv: vec![0; 12],
                ..seg(buf, 0, 64)
            }],
        ),
        w,
    );
    c.call(
        &Request::Hello {
            min_version: VERSION,
            max_version: VERSION,
        },
        w,
    );

    c.call(&Request::ReleaseKey { handle: tea }, w);
    c.call(&Request::Free { buffer: buf }, w);
    c.call(&Request::Status, w);
    drop(mem);
    c.add_streams(w, &[0x00, 0x10, 0x51, 0xa1, 0xf1]);
}

/// Connections the daemon ends: each gets its error, then the close.
fn refusals(w: &mut SeedWriter, socket: &std::path::Path) {
    let mut versions = Conn::open(socket);
    versions.send(
        &Request::Hello {
            min_version: VERSION + 1,
            max_version: VERSION + 3,
        },
        w,
    );
    versions.until_closed(w);
    versions.add_streams(w, &[0x00, 0xf0]);

    let mut no_hello = Conn::open(socket);
    no_hello.send(&Request::Status, w);
    no_hello.until_closed(w);
    no_hello.add_streams(w, &[0x20]);

    let mut malformed = Conn::open(socket);
    malformed.hello(w);
    let mut body = Request::Free { buffer: 1 }.encode(77);
    body.push(0);
    malformed.send_raw(&frame(&body), w);
    malformed.until_closed(w);
    malformed.add_streams(w, &[0x30]);

    let mut too_long = Conn::open(socket);
    too_long.hello(w);
    too_long.send_raw(&(MAX_REQUEST_BODY + 1).to_le_bytes(), w);
    too_long.until_closed(w);
    too_long.add_streams(w, &[0x00, 0xf0]);
}

/// Replies the session cannot provoke, from the protocol's encoder.
fn encoded(w: &mut SeedWriter) {
    let errors = [
        SegmentErrorKind::AuthenticationFailed,
        SegmentErrorKind::IvLength {
            expected: 16,
            got: 12,
        },
        SegmentErrorKind::TooLarge {
            len: 1 << 33,
            max: u32::MAX as u64,
        },
        SegmentErrorKind::InputLength {
            expected: 256,
            got: 5,
        },
        SegmentErrorKind::InputOutOfRange,
        SegmentErrorKind::DeviceResident,
        SegmentErrorKind::Internal("a kernel failed".into()),
    ];
    let results = errors
        .iter()
        .enumerate()
        .map(|(i, k)| {
            Err(SegmentError {
                index: i,
                kind: k.clone(),
            })
        })
        .chain([Ok(Output::Done)])
        .collect();
    w.add("service_reply", &Reply::Run(results).encode(3));
    let failures = [
        BackendError::Unavailable {
            backend: "gpu",
            reason: "no CUDA driver".into(),
        },
        BackendError::Unsupported {
            backend: "cpu",
            op: OpKind::RsaPrivate,
        },
        BackendError::InvalidJob("key kind".into()),
        BackendError::Device("the job panicked in the daemon".into()),
    ];
    for (i, f) in failures.into_iter().enumerate() {
        w.add("service_reply", &Reply::RunFailed(f).encode(i as u64 + 10));
    }
    for code in [ErrorCode::ShuttingDown, ErrorCode::Internal] {
        let r = Reply::Error {
            code,
            message: "the gvault service is shutting down; the request did not run".into(),
        };
        w.add("service_reply", &r.encode(u64::MAX));
    }
    w.add("service_reply", &Reply::Run(Vec::new()).encode(0));
}
