//! The CAS on a real S3 server (SeaweedFS, started by scripts/s3-server.sh):
//! the repository operations, and faults — the server killed during a
//! backup and restarted during a restore, injected 503s and slow
//! responses, wrong credentials, a missing bucket, a damaged object.
//!
//! Without a cached server binary (`scripts/s3-server.sh build` needs Go)
//! each test prints "skipped: …" on the terminal and passes, unless
//! `GVAULT_S3_REQUIRE=1` (CI with Go) makes that a failure.

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use gvault_cas::accel_jobs::cpu_backend;
use gvault_cas::{
    Backend, Chunker, Error, InitOptions, Kind, Repository, S3Backend, S3Credentials, S3Options,
};
use gvault_store::keys::generate_key;
use gvault_store::Encryption;
use rand::{Rng, RngCore, SeedableRng};

mod cache_scenario;
mod s3_server;

use s3_server::{skip, S3Server as Server};

const SMALL_CDC: Chunker = Chunker::Cdc {
    min: 4096,
    avg: 16384,
    max: 65536,
};

/// What the tests ask of the server beyond starting and stopping it.
trait ServerExt {
    fn kill9(&self);
    fn endpoint(&self) -> &str;
    fn creds(&self) -> S3Credentials;
    fn opts(&self) -> S3Options;
    fn url(&self, test: &str) -> String;
}

impl ServerExt for Server {
    fn kill9(&self) {
        let pid: i32 = self.var("GVAULT_S3_PID").parse().unwrap();
        // SAFETY: signals the server process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        for _ in 0..100 {
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn endpoint(&self) -> &str {
        self.var("AWS_ENDPOINT_URL")
    }

    fn creds(&self) -> S3Credentials {
        S3Credentials {
            access_key_id: self.var("AWS_ACCESS_KEY_ID").into(),
            secret_access_key: self.var("AWS_SECRET_ACCESS_KEY").into(),
            session_token: None,
        }
    }

    fn opts(&self) -> S3Options {
        S3Options {
            endpoint: Some(self.endpoint().into()),
            credentials: Some(self.creds()),
            region: Some("us-east-1".into()),
            ..S3Options::default()
        }
    }

    /// A fresh prefix of the bucket for one test.
    fn url(&self, test: &str) -> String {
        format!(
            "s3://{}/{test}-{}",
            self.var("GVAULT_S3_BUCKET"),
            hex::encode(rand::thread_rng().gen::<[u8; 4]>())
        )
    }
}

/// One server shared by the tests that do not stop or kill it.
fn shared(test: &str) -> Option<&'static Server> {
    static S: OnceLock<Option<Server>> = OnceLock::new();
    let s = S.get_or_init(|| Server::start("shared server")).as_ref();
    if s.is_none() {
        skip(test, "no server");
    }
    s
}

fn backend(url: &str, opts: &S3Options) -> Arc<dyn Backend> {
    Arc::new(S3Backend::connect(url, opts).unwrap())
}

fn init(url: &str, opts: &S3Options) -> (Repository, Encryption) {
    let enc = Encryption::with_key(generate_key());
    let r = Repository::init_on(
        backend(url, opts),
        url,
        &enc,
        InitOptions {
            chunker: SMALL_CDC,
            compression: true,
        },
        cpu_backend(),
    )
    .unwrap();
    (r, enc)
}

fn open(url: &str, opts: &S3Options, enc: &Encryption) -> Repository {
    Repository::open_on(backend(url, opts), url, Some(enc), cpu_backend()).unwrap()
}

/// Random files: nested directories, empty, small and `big` bytes of
/// random data, compressible text, a symlink.
fn tree(root: &Path, seed: u64, big: usize) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    fs::create_dir_all(root.join("a/b")).unwrap();
    fs::write(root.join("empty"), b"").unwrap();
    for i in 0..12 {
        let len = [1, 100, 4096, 70_000, 300_000][rng.gen_range(0..5)];
        let mut data = vec![0u8; len];
        if i % 2 == 0 {
            rng.fill_bytes(&mut data);
        } else {
            for (k, b) in data.iter_mut().enumerate() {
                *b = b"compressible text "[k % 18];
            }
        }
        fs::write(root.join(format!("a/b/f{i}")), &data).unwrap();
    }
    let mut data = vec![0u8; big];
    rng.fill_bytes(&mut data);
    fs::write(root.join("a/big"), &data).unwrap();
    std::os::unix::fs::symlink("a/b/f1", root.join("link")).unwrap();
}

/// Path → contents (or link target) of every file under `root`.
fn contents(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            if m.file_type().is_symlink() {
                let t = fs::read_link(&p).unwrap();
                out.insert(rel, t.into_os_string().into_encoded_bytes());
            } else if m.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                stack.push(p);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn restore_and_compare(repo: &Repository, snapshot: &str, src: &Path, out: &Path) {
    let snap = gvault_cas::Snapshot::read(repo, snapshot).unwrap();
    let r = gvault_cas::restore(repo, &snap, out, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert_eq!(
        contents(src),
        contents(&out.join(src.strip_prefix("/").unwrap()))
    );
}

fn io_kind(e: &Error) -> Option<std::io::ErrorKind> {
    match e {
        Error::Io { source, .. } => Some(source.kind()),
        _ => None,
    }
}

#[test]
fn objects_round_trip_with_pagination_multipart_and_not_found() {
    let Some(srv) = shared("objects_round_trip") else {
        return;
    };
    let url = srv.url("objects");
    let mut opts = srv.opts();
    opts.multipart_threshold = 6 << 20;
    opts.part_size = 5 << 20;
    let b = S3Backend::connect(&url, &opts).unwrap();
    assert!(b.list(Kind::Pack).unwrap().is_empty());
    // More objects than one listing page (1000) holds.
    let names: Vec<String> = (0..1010).map(|i| format!("{i:06x}")).collect();
    std::thread::scope(|s| {
        for chunk in names.chunks(130) {
            let b = &b;
            s.spawn(move || {
                for n in chunk {
                    b.put(Kind::Index, n, n.as_bytes()).unwrap();
                }
            });
        }
    });
    assert_eq!(b.list(Kind::Index).unwrap(), names);
    assert!(b.list(Kind::Snapshot).unwrap().is_empty());
    // A multipart upload (three parts) reads back whole, and by ranges.
    let mut big = vec![0u8; (13 << 20) + 123];
    rand::thread_rng().fill_bytes(&mut big);
    b.put(Kind::Pack, "bb", &big).unwrap();
    assert_eq!(b.size(Kind::Pack, "bb").unwrap(), big.len() as u64);
    assert!(b.get(Kind::Pack, "bb").unwrap() == big);
    let off = (5 << 20) - 10;
    assert_eq!(
        b.get_range(Kind::Pack, "bb", off as u64, 20).unwrap(),
        &big[off..off + 20]
    );
    assert!(b
        .get_range(Kind::Pack, "bb", big.len() as u64 - 5, 10)
        .is_err());
    // Overwrite replaces; delete removes; a missing object is NotFound,
    // as a missing file of a local repository.
    b.put(Kind::Lock, "aa", b"one").unwrap();
    b.put(Kind::Lock, "aa", b"two").unwrap();
    assert_eq!(b.get(Kind::Lock, "aa").unwrap(), b"two");
    assert!(b.exists(Kind::Lock, "aa").unwrap());
    b.delete(Kind::Lock, "aa").unwrap();
    b.delete(Kind::Lock, "aa").unwrap();
    assert!(!b.exists(Kind::Lock, "aa").unwrap());
    let e = b.get(Kind::Lock, "aa").unwrap_err();
    assert_eq!(io_kind(&e), Some(std::io::ErrorKind::NotFound), "{e}");
    assert_eq!(
        io_kind(&b.size(Kind::Lock, "aa").unwrap_err()),
        Some(std::io::ErrorKind::NotFound)
    );
    assert!(matches!(
        b.put(Kind::Pack, "../x", b""),
        Err(Error::InvalidArgument(_))
    ));
    b.put_root("keys/KEYS", b"k").unwrap();
    assert_eq!(b.get_root("keys/KEYS").unwrap(), b"k");
}

#[test]
fn backup_restore_check_forget_and_prune() {
    let Some(srv) = shared("backup_restore_check_forget_and_prune") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 1, 3 << 20);
    let url = srv.url("roundtrip");
    let opts = srv.opts();
    let (repo, enc) = init(&url, &opts);
    // A second init of the same prefix is refused.
    let again = Repository::init_on(
        backend(&url, &opts),
        &url,
        &enc,
        InitOptions::default(),
        cpu_backend(),
    );
    assert!(
        matches!(&again, Err(Error::InvalidArgument(m)) if m.contains("already holds")),
        "{:?}",
        again.err()
    );
    let s1 = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert!(s1.packs_written > 0 && s1.warnings.is_empty());
    let repo = open(&url, &opts, &enc);
    restore_and_compare(&repo, &s1.snapshot, &src, &d.path().join("out1"));
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.chunks_read > 0, "{:?}", c.errors);
    // Change a little: the second backup adds little and dedups the rest.
    fs::write(src.join("a/b/f0"), b"changed").unwrap();
    fs::remove_file(src.join("a/big")).unwrap();
    let s2 = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert!(s2.files_unchanged > 0);
    assert!(s2.bytes_added < 100_000, "{}", s2.bytes_added);
    // Forget the first snapshot and prune: its big file's data goes.
    let before = gvault_cas::stats(&repo).unwrap();
    gvault_cas::forget(&repo, 1).unwrap();
    let repo = open(&url, &opts, &enc);
    let p = gvault_cas::prune(&repo).unwrap();
    assert!(p.bytes_freed > 2 << 20, "{p:?}");
    let repo = open(&url, &opts, &enc);
    let after = gvault_cas::stats(&repo).unwrap();
    assert!(after.stored_bytes < before.stored_bytes);
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.unindexed_packs.is_empty(), "{c:?}");
    restore_and_compare(&repo, &s2.snapshot, &src, &d.path().join("out2"));
    // A wrong key is refused when the registry is read.
    let wrong = Encryption::with_key(generate_key());
    assert!(Repository::open_on(backend(&url, &opts), &url, Some(&wrong), cpu_backend()).is_err());
}

/// A file large enough to be restored through a mapping (its chunks read
/// in runs of ranges, each chunk opened where it belongs) comes back bit
/// for bit from object storage.
#[test]
fn a_large_file_restores_from_object_storage_in_place() {
    let Some(srv) = shared("large_file_in_place") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let url = srv.url("inplace");
    let opts = srv.opts();
    let (repo, _) = init(&url, &opts);
    let mut data = vec![0u8; 36 << 20];
    rand::thread_rng().fill_bytes(&mut data);
    for b in &mut data[8 << 20..10 << 20] {
        *b = b'a' + (*b & 3);
    }
    let s = gvault_cas::backup_reader(&repo, "big", &mut &data[..], &mut |_| {}).unwrap();
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let target = d.path().join("out");
    let r = gvault_cas::restore(&repo, &snap, &target, None, &|_, _| {}).unwrap();
    assert!(r.failed.is_empty(), "{:?}", r.failed);
    assert!(fs::read(target.join("big")).unwrap() == data);
}

#[test]
fn concurrent_backups_and_an_excluded_prune() {
    let Some(srv) = shared("concurrent_backups") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let url = srv.url("concurrent");
    let opts = srv.opts();
    let (repo, enc) = init(&url, &opts);
    drop(repo);
    let srcs: Vec<PathBuf> = (0..3).map(|i| d.path().join(format!("src{i}"))).collect();
    for (i, s) in srcs.iter().enumerate() {
        tree(s, 10 + i as u64, 1 << 20);
    }
    let names: Vec<String> = std::thread::scope(|sc| {
        let hs: Vec<_> = srcs
            .iter()
            .map(|s| {
                let (url, opts, enc) = (&url, &opts, &enc);
                sc.spawn(move || {
                    let repo = open(url, opts, enc);
                    gvault_cas::backup(&repo, std::slice::from_ref(s), &mut |_| {})
                        .unwrap()
                        .snapshot
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let repo = open(&url, &opts, &enc);
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean(), "{:?}", c.errors);
    assert_eq!(c.snapshots, 3);
    for (i, (name, src)) in names.iter().zip(&srcs).enumerate() {
        restore_and_compare(&repo, name, src, &d.path().join(format!("out{i}")));
    }
    // A shared lock (a backup in progress) keeps prune out.
    let held = gvault_cas::lock::Lock::shared(repo.backend.clone()).unwrap();
    assert!(matches!(gvault_cas::prune(&repo), Err(Error::Locked(_))));
    drop(held);
    gvault_cas::prune(&repo).unwrap();
    assert!(repo.backend.list(Kind::Lock).unwrap().is_empty());
}

#[test]
fn wrong_credentials_missing_bucket_and_no_repository_are_clear_errors() {
    let Some(srv) = shared("wrong_credentials") else {
        return;
    };
    let mut opts = srv.opts();
    opts.credentials = Some(S3Credentials {
        access_key_id: srv.creds().access_key_id,
        secret_access_key: "not-the-secret".into(),
        session_token: None,
    });
    let e = S3Backend::connect(&srv.url("creds"), &opts).unwrap_err();
    assert_eq!(io_kind(&e), Some(std::io::ErrorKind::PermissionDenied));
    assert!(e.to_string().contains("refused the credentials"), "{e}");
    opts.credentials = Some(S3Credentials {
        access_key_id: "nosuchkey".into(),
        secret_access_key: "x".into(),
        session_token: None,
    });
    let e = S3Backend::connect(&srv.url("creds"), &opts).unwrap_err();
    assert!(e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");
    let e = S3Backend::connect("s3://no-such-bucket-here/x", &srv.opts()).unwrap_err();
    assert!(
        e.to_string()
            .contains("bucket \"no-such-bucket-here\" does not exist"),
        "{e}"
    );
    // An empty prefix is no repository.
    let url = srv.url("empty");
    let e = Repository::open_on(backend(&url, &srv.opts()), &url, None, cpu_backend())
        .err()
        .unwrap();
    assert!(matches!(e, Error::NotARepository { .. }), "{e}");
    // A refused plain-HTTP endpoint, and a server that is not there.
    let mut o = srv.opts();
    o.endpoint = Some("ftp://127.0.0.1:1".into());
    assert!(matches!(
        S3Backend::connect(&url, &o),
        Err(Error::InvalidArgument(_))
    ));
    o.endpoint = Some("http://127.0.0.1:1".into());
    o.max_retries = 1;
    o.retry_timeout = Duration::from_secs(2);
    let t = Instant::now();
    assert!(S3Backend::connect(&url, &o).is_err());
    assert!(t.elapsed() < Duration::from_secs(30));
}

#[test]
fn an_object_damaged_on_the_server_is_found_by_check() {
    let Some(srv) = shared("damaged_object") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 3, 1 << 20);
    let url = srv.url("damage");
    let opts = srv.opts();
    let (repo, enc) = init(&url, &opts);
    gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let b = &repo.backend;
    let packs = b.list(Kind::Pack).unwrap();
    let victim = &packs[0];
    let mut bytes = b.get(Kind::Pack, victim).unwrap();
    bytes[100] ^= 0x40;
    b.put(Kind::Pack, victim, &bytes).unwrap();
    let repo = open(&url, &opts, &enc);
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(!c.is_clean());
    assert!(
        c.errors.iter().any(|e| e.contains(&victim[..16])),
        "{:?}",
        c.errors
    );
    assert!(!c.affected.is_empty());
}

/// Kills the server (SIGKILL) once a backup has uploaded a pack: the
/// backup fails with a clear error; after a restart the next backup
/// finishes, reusing the packs already uploaded, and restores whole.
#[test]
fn server_killed_mid_backup_then_the_next_backup_reuses_uploads() {
    let Some(mut srv) = Server::start("server_killed_mid_backup") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 5, 48 << 20);
    let url = srv.url("killed");
    let mut opts = srv.opts();
    // Fail fast once the server is gone.
    opts.max_retries = 2;
    opts.retry_timeout = Duration::from_secs(3);
    opts.connect_timeout = Duration::from_secs(2);
    let (repo, enc) = init(&url, &opts);
    let watcher = S3Backend::connect(&url, &opts).unwrap();
    // The backup pauses in its progress callback once most of the tree is
    // read, so the kill lands while work is left however fast the machine.
    let paused = AtomicBool::new(false);
    let killed = AtomicBool::new(false);
    let (r, killed_at) = std::thread::scope(|s| {
        let h = s.spawn(|| {
            gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |p| {
                if p.bytes >= 40 << 20 && !paused.swap(true, Ordering::SeqCst) {
                    let t = Instant::now();
                    while !killed.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(120) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        });
        let t = Instant::now();
        let mut n = 0;
        while t.elapsed() < Duration::from_secs(60) && !h.is_finished() {
            if paused.load(Ordering::SeqCst) {
                n = watcher.list(Kind::Pack).unwrap().len();
                if n >= 1 {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        srv.kill9();
        killed.store(true, Ordering::SeqCst);
        (h.join().unwrap(), n)
    });
    drop(repo);
    let e = r.expect_err("the backup outlived the server");
    assert!(killed_at >= 1, "no pack uploaded before the kill");
    let text = e.to_string();
    assert!(
        text.contains("s3://") && matches!(e, Error::Io { .. }),
        "not a clear error: {text}"
    );
    srv.launch();
    let repo = open(&url, &opts, &enc);
    let uploaded = repo.backend.list(Kind::Pack).unwrap().len();
    assert!(uploaded >= 1);
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    assert!(
        s.packs_adopted > 0 || s.chunks_known > 0,
        "nothing reused: {s:?}"
    );
    let repo = open(&url, &opts, &enc);
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean() && c.unindexed_packs.is_empty(), "{c:?}");
    restore_and_compare(&repo, &s.snapshot, &src, &d.path().join("out"));
    drop(srv);
}

/// Stops and restarts the server while a restore runs: the client retries
/// (connection refused is retried with backoff) and the restore completes.
#[test]
fn server_restarted_during_a_restore() {
    let Some(mut srv) = Server::start("server_restarted_during_a_restore") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 6, 40 << 20);
    let url = srv.url("restart");
    let opts = srv.opts();
    let (repo, enc) = init(&url, &opts);
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let repo = open(&url, &opts, &enc);
    let snap = gvault_cas::Snapshot::read(&repo, &s.snapshot).unwrap();
    let out = d.path().join("out");
    let done = AtomicUsize::new(0);
    std::thread::scope(|sc| {
        let h = sc.spawn(|| {
            gvault_cas::restore(&repo, &snap, &out, None, &|_, b| {
                done.store(b as usize, Ordering::Relaxed)
            })
        });
        let t = Instant::now();
        while done.load(Ordering::Relaxed) == 0 && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            !h.is_finished(),
            "the restore finished before the restart; the test proves nothing"
        );
        srv.stop();
        std::thread::sleep(Duration::from_millis(1500));
        srv.launch();
        let r = h.join().unwrap().unwrap();
        assert!(r.failed.is_empty(), "{:?}", r.failed);
    });
    assert_eq!(
        contents(&src),
        contents(&out.join(src.strip_prefix("/").unwrap()))
    );
    drop(srv);
}

/// A proxy in front of the server that answers some requests with 503
/// SlowDown and delays others, one request per connection.
struct FaultProxy {
    addr: String,
    requests: Arc<AtomicUsize>,
    faults: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

/// What the proxy does to request number n.
#[derive(Clone, Copy)]
enum Plan {
    /// Every `every_503`th request gets a 503; every `every_slow`th waits
    /// `slow` before it is forwarded.
    Mixed {
        every_503: usize,
        every_slow: usize,
        slow: Duration,
    },
    /// Every request gets a 503.
    Always503,
}

impl FaultProxy {
    fn start(upstream: &str, plan: Plan) -> FaultProxy {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = format!("http://{}", l.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let faults = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (rq, fl, st) = (requests.clone(), faults.clone(), stop.clone());
        std::thread::spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(c) = c else { continue };
                let n = rq.fetch_add(1, Ordering::Relaxed) + 1;
                let (up, fl) = (upstream.clone(), fl.clone());
                std::thread::spawn(move || {
                    let _ = serve(c, &up, n, plan, &fl);
                });
            }
        });
        FaultProxy {
            addr,
            requests,
            faults,
            stop,
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr.trim_start_matches("http://"));
    }
}

/// Serves one request of a client connection: reads its head and body,
/// then answers 503, or waits, or forwards it (with `Connection: close`, so
/// that the server's answer ends with the connection) and relays the answer.
fn serve(
    mut c: TcpStream,
    upstream: &str,
    n: usize,
    plan: Plan,
    faults: &AtomicUsize,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 65536];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let k = c.read(&mut tmp)?;
        if k == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..k]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let k = c.read(&mut tmp)?;
        if k == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..k]);
    }
    let (fail, delay) = match plan {
        Plan::Always503 => (true, None),
        Plan::Mixed {
            every_503,
            every_slow,
            slow,
        } => (
            n.is_multiple_of(every_503),
            n.is_multiple_of(every_slow).then_some(slow),
        ),
    };
    if fail {
        faults.fetch_add(1, Ordering::Relaxed);
        let body = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code><Message>injected</Message></Error>";
        write!(
            c,
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )?;
        return Ok(());
    }
    if let Some(d) = delay {
        faults.fetch_add(1, Ordering::Relaxed);
        std::thread::sleep(d);
    }
    let mut head_out: String = head
        .trim_end_matches("\r\n")
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect::<Vec<_>>()
        .join("\r\n");
    head_out.push_str("\r\nConnection: close\r\n\r\n");
    let mut u = TcpStream::connect(upstream)?;
    u.write_all(head_out.as_bytes())?;
    u.write_all(&buf[head_end..])?;
    std::io::copy(&mut u, &mut c)?;
    Ok(())
}

#[test]
fn injected_503s_and_slow_responses_are_retried_within_bounds() {
    let Some(srv) = shared("injected_503s") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    tree(&src, 8, 2 << 20);
    let proxy = FaultProxy::start(
        srv.endpoint(),
        Plan::Mixed {
            every_503: 3,
            every_slow: 5,
            slow: Duration::from_millis(1500),
        },
    );
    let url = srv.url("faults");
    let mut opts = srv.opts();
    opts.endpoint = Some(proxy.addr.clone());
    // Slow answers beyond the request timeout are retried too.
    opts.request_timeout = Duration::from_secs(1);
    let (repo, enc) = init(&url, &opts);
    let s = gvault_cas::backup(&repo, std::slice::from_ref(&src), &mut |_| {}).unwrap();
    let repo = open(&url, &opts, &enc);
    restore_and_compare(&repo, &s.snapshot, &src, &d.path().join("out"));
    let c = gvault_cas::check(&repo, true, &mut |_, _| {}).unwrap();
    assert!(c.is_clean(), "{:?}", c.errors);
    assert!(
        proxy.faults.load(Ordering::Relaxed) >= 10,
        "{} faults in {} requests",
        proxy.faults.load(Ordering::Relaxed),
        proxy.requests.load(Ordering::Relaxed)
    );
    // A server that only ever answers 503: the error comes within the
    // retry bound and says what happened.
    let bad = FaultProxy::start(srv.endpoint(), Plan::Always503);
    let mut o = srv.opts();
    o.endpoint = Some(bad.addr.clone());
    o.max_retries = 3;
    o.retry_timeout = Duration::from_secs(5);
    let t = Instant::now();
    let e = S3Backend::connect(&url, &o).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(e.to_string().contains("503"), "{e}");
    assert!(bad.requests.load(Ordering::Relaxed) >= 3);
}

/// The local metadata cache against the server: a second open reads no
/// index file or snapshot again, new ones from another client are learned,
/// damaged cache files are never trusted, and objects pruned by another
/// client are neither served nor lose a chunk (tests/cache_scenario).
#[test]
fn the_metadata_cache_saves_requests_and_stays_correct() {
    let Some(srv) = shared("the_metadata_cache_saves_requests_and_stays_correct") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let url = srv.url("cache");
    cache_scenario::run(backend(&url, &srv.opts()), &url, d.path());
}
