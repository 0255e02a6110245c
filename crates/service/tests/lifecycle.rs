//! Clients killed mid-request, a daemon that restarts under running
//! clients, and a clean shutdown with work in flight.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestDaemon;
use gvault_accel::{
    Aes256Key, Backend, CpuBackend, Data, DataMut, DigestAlgo, Job, Nonce96, SealSegment,
    SegmentResult,
};
use gvault_service::ServiceBackend;
use rand::{Rng, RngCore};

fn sha(b: &dyn Backend, data: &[u8]) -> Result<Vec<SegmentResult>, gvault_accel::BackendError> {
    b.run(&mut Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: vec![Data::Host(data)],
    })
}

/// One round of verified work: a seal and a digest of random sizes.
fn verified_round(svc: &dyn Backend, rng: &mut impl Rng) {
    let n = rng.gen_range(0..200_000);
    let mut data = vec![0u8; n];
    rng.fill_bytes(&mut data);
    let key = Aes256Key::from_bytes([rng.gen(); 32]);
    let seal = |b: &dyn Backend, d: &mut Vec<u8>| {
        b.run(&mut Job::Seal {
            key: &key,
            segments: vec![SealSegment {
                nonce: Nonce96::from_parts(7, 7),
                aad: b"a",
                data: DataMut::Host(d),
            }],
        })
        .unwrap()
    };
    let mut mine = data.clone();
    let got = seal(svc, &mut mine);
    let want = seal(CpuBackend::shared().as_ref(), &mut data);
    assert_eq!(got, want);
    assert!(mine == data);
    assert_eq!(
        sha(svc, &data).unwrap(),
        sha(CpuBackend::shared().as_ref(), &data).unwrap()
    );
}

/// Run by `killed_clients_cost_the_daemon_nothing` in a child process,
/// which it kills with SIGKILL mid-work.
#[test]
#[ignore = "a helper process for killed_clients_cost_the_daemon_nothing"]
fn busy_client_probe() {
    let Ok(socket) = std::env::var("GVAULT_TEST_BUSY_SOCKET") else {
        return;
    };
    let svc = ServiceBackend::connect(std::path::Path::new(&socket)).unwrap();
    let mut shared = svc.alloc_shared(1 << 20).unwrap();
    let mut rng = rand::thread_rng();
    rng.fill_bytes(&mut shared);
    println!("PROBE: working");
    loop {
        verified_round(&svc, &mut rng);
        let _ = sha(&svc, &shared);
    }
}

#[test]
fn killed_clients_cost_the_daemon_nothing() {
    let d = TestDaemon::start();
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let steady = {
        let (socket, stop, rounds) = (d.socket.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let svc = ServiceBackend::connect(&socket).unwrap();
            let mut rng = rand::thread_rng();
            while !stop.load(Ordering::Relaxed) {
                verified_round(&svc, &mut rng);
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut rng = rand::thread_rng();
    for _ in 0..15 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "busy_client_probe", "--nocapture"])
            .env("GVAULT_TEST_BUSY_SOCKET", &d.socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.gen_range(20..200)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let before = rounds.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        rounds.load(Ordering::Relaxed) > before,
        "the steady client stalled"
    );
    // Only the steady client remains, holding only its own buffers.
    d.wait_clients(1);
    let st = d.status();
    let clients = st["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1, "{st}");
    assert!(
        clients[0]["buffer_bytes"].as_u64().unwrap() <= 256 << 20,
        "{st}"
    );
    stop.store(true, Ordering::Relaxed);
    steady.join().unwrap();
}

#[test]
fn clients_fail_clearly_while_the_daemon_is_down_and_reconnect_after() {
    let d = TestDaemon::start();
    let socket = d.socket.clone();
    let svc = ServiceBackend::connect(&socket).unwrap();
    let data = vec![3u8; 70_000];
    let want = sha(CpuBackend::shared().as_ref(), &data).unwrap();
    assert_eq!(sha(&svc, &data).unwrap(), want);
    let dir = d.stop();
    let e = sha(&svc, &data).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(
            e,
            gvault_accel::BackendError::Unavailable {
                backend: "service",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(text.contains(&socket.display().to_string()), "{text}");
    let d2 = TestDaemon::start_at(dir, socket, |_| {});
    // The first job after the restart needs a key the new daemon has never
    // seen: the break shows while registering it, and the job still runs.
    let key = Aes256Key::from_bytes([42; 32]);
    let mut block = vec![1u8; 5000];
    svc.seal_block(&key, Nonce96::from_parts(1, 1), b"", &mut block)
        .expect("reconnected while registering a key");
    assert_eq!(sha(&svc, &data).unwrap(), want, "reconnected");
    drop(d2);
}

#[test]
fn a_restart_under_running_clients_gives_results_or_clear_errors_never_wrong_ones() {
    let d = TestDaemon::start();
    let socket = d.socket.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (socket, stop) = (socket.clone(), stop.clone());
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                let (mut ok, mut failed) = (0u32, 0u32);
                let mut rng = rand::thread_rng();
                while !stop.load(Ordering::Relaxed) {
                    let mut data = vec![0u8; rng.gen_range(0..100_000)];
                    rng.fill_bytes(&mut data);
                    match sha(&svc, &data) {
                        Ok(r) => {
                            assert_eq!(r, sha(CpuBackend::shared().as_ref(), &data).unwrap());
                            ok += 1;
                        }
                        Err(e) => {
                            assert!(
                                matches!(e, gvault_accel::BackendError::Unavailable { .. }),
                                "{e:?}"
                            );
                            failed += 1;
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let dir = d.stop();
    std::thread::sleep(Duration::from_millis(200));
    let d2 = TestDaemon::start_at(dir, socket, |_| {});
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let (ok, failed) = w.join().unwrap();
        assert!(ok > 0, "no work done");
        assert!(failed > 0, "the outage went unnoticed");
    }
    // After the restart the clients reconnected.
    assert!(d2.status()["ops"][0]["requests"].as_u64().unwrap() > 0);
}

#[test]
fn shutdown_finishes_the_running_job_and_fails_queued_ones_clearly() {
    let d = TestDaemon::start_with(|c| c.workers = 1);
    let big = vec![9u8; 192 << 20];
    let want_big = sha(CpuBackend::shared().as_ref(), &big).unwrap();
    let runner = {
        let socket = d.socket.clone();
        std::thread::spawn(move || {
            let svc = ServiceBackend::connect(&socket).unwrap();
            sha(&svc, &big)
        })
    };
    // Wait until the big job has been taken by the only worker.
    let t = Instant::now();
    loop {
        let st = d.status();
        let running = st["clients"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["in_flight"] == 1 && c["bytes"].as_u64() == Some(192 << 20));
        let queued: u64 = st["ops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["queued"].as_u64().unwrap())
            .sum();
        if running && queued == 0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{st}");
        std::thread::sleep(Duration::from_millis(2));
    }
    let queued: Vec<_> = (0..3)
        .map(|_| {
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                sha(&svc, b"small")
            })
        })
        .collect();
    let t = Instant::now();
    while d.status()["ops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["queued"].as_u64().unwrap())
        .sum::<u64>()
        < 3
    {
        assert!(t.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(2));
    }
    d.handle.shutdown();
    assert_eq!(runner.join().unwrap().unwrap(), want_big);
    for q in queued {
        let e = q.join().unwrap().unwrap_err();
        assert!(e.to_string().contains("shutting down"), "{e}");
    }
}

/// `gvault serve` runs the auto backend: its status says where jobs ran,
/// how many were explored (`GVAULT_AUTO_LEARN`) and what it has learned.
#[test]
fn status_reports_the_auto_backends_placements_and_learning() {
    let d = TestDaemon::start_auto();
    let svc = ServiceBackend::connect(&d.socket).unwrap();
    let data = vec![5u8; 1 << 20];
    let want = sha(CpuBackend::shared().as_ref(), &data).unwrap();
    for _ in 0..4 {
        assert_eq!(sha(&svc, &data).unwrap(), want);
    }
    let st = d.status();
    let b = &st["backend"];
    assert_eq!(b["name"], "auto", "{st}");
    let jobs = &b["jobs"];
    let placed = jobs["cpu"].as_u64().unwrap() + jobs["gpu"].as_u64().unwrap();
    assert!(placed >= 4, "{st}");
    assert!(jobs["explored"].as_u64().is_some(), "{st}");
    for f in b["learned"].as_array().expect("learned[]") {
        assert!(f["factor"].as_f64().unwrap() > 0.0, "{st}");
        assert!(f["observations"].as_u64().unwrap() > 0, "{st}");
        assert!(
            ["cpu", "gpu"].contains(&f["side"].as_str().unwrap()),
            "{st}"
        );
    }
}
