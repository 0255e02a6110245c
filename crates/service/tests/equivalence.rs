//! Many clients at once get exactly what an in-process backend gives: every
//! op, awkward and random sizes, good and bad segments.

mod common;

use std::sync::Arc;

use common::cases::{run_case, Keys, OPS};
use common::TestDaemon;
use gvault_accel::{
    Aes256Key, Backend, CpuBackend, Data, DataMut, DigestAlgo, Job, Nonce96, SealSegment,
};
use gvault_service::ServiceBackend;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

#[test]
fn many_clients_get_in_process_results_for_every_op() {
    let d = TestDaemon::start();
    let local = CpuBackend::shared();
    let keys = Arc::new(Keys::new(&mut StdRng::seed_from_u64(7)));
    let threads: Vec<_> = (0..6u64)
        .map(|t| {
            let socket = d.socket.clone();
            let local = Arc::clone(&local);
            let keys = Arc::clone(&keys);
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                for i in 0..30u64 {
                    let seed = t * 1000 + i;
                    let which = ((t + i * 7) % OPS as u64) as u32;
                    let (want, want_bufs) = run_case(local.as_ref(), which, seed, &keys, 300_000);
                    let (got, got_bufs) = run_case(&svc, which, seed, &keys, 300_000);
                    assert_eq!(got, want, "op {which} seed {seed}");
                    assert!(
                        got_bufs == want_bufs,
                        "buffers differ: op {which} seed {seed}"
                    );
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = d.status();
    assert!(st["ops"].as_array().unwrap().len() >= 14, "{st}");
}

#[test]
fn a_sealed_block_opens_through_the_daemon_and_a_bad_tag_wipes_it() {
    let d = TestDaemon::start();
    let svc = ServiceBackend::connect(&d.socket).unwrap();
    let key = Aes256Key::from_bytes([9; 32]);
    let plain = b"secret bytes of a database block".to_vec();
    let mut data = plain.clone();
    let nonce = Nonce96::from_parts(1, 2);
    let tag = svc.seal_block(&key, nonce, b"aad", &mut data).unwrap();
    assert_ne!(data, plain);
    let mut opened = data.clone();
    svc.open_block(&key, nonce, b"aad", tag, &mut opened)
        .unwrap();
    assert_eq!(opened, plain);
    let mut forged = data.clone();
    forged[0] ^= 1;
    let e = svc
        .open_block(&key, nonce, b"aad", tag, &mut forged)
        .unwrap_err();
    assert!(e.is_authentication_failure(), "{e}");
    assert!(
        forged.iter().all(|&b| b == 0),
        "a failed open wipes the block"
    );
}

#[test]
fn shared_buffers_cross_no_copy_and_match_staged_results() {
    let d = TestDaemon::start();
    let svc = ServiceBackend::connect(&d.socket).unwrap();
    let mut rng = StdRng::seed_from_u64(3);
    let mut shared = svc.alloc_shared(1 << 20).unwrap();
    rng.fill_bytes(&mut shared);
    let mut copy = shared.to_vec();
    let key = Aes256Key::from_bytes([4; 32]);
    let seal = |b: &dyn Backend, data: &mut [u8]| {
        let (head, tail) = data.split_at_mut(4096);
        let mut job = Job::Seal {
            key: &key,
            segments: vec![
                SealSegment {
                    nonce: Nonce96::from_parts(0, 0),
                    aad: b"",
                    data: DataMut::Host(head),
                },
                SealSegment {
                    nonce: Nonce96::from_parts(0, 1),
                    aad: b"x",
                    data: DataMut::Host(tail),
                },
            ],
        };
        b.run(&mut job).unwrap()
    };
    let got = seal(&svc, &mut shared);
    let want = seal(CpuBackend::shared().as_ref(), &mut copy);
    assert_eq!(got, want);
    assert!(shared[..] == copy[..]);
    let st = d.status();
    // One user buffer and no staging buffer: nothing was copied.
    assert_eq!(st["clients"][0]["buffers"], 1, "{st}");
}

#[test]
fn device_resident_segments_are_refused_per_segment() {
    let d = TestDaemon::start();
    let svc = ServiceBackend::connect(&d.socket).unwrap();
    // SAFETY: the slice is never dereferenced: the client answers it
    // locally without sending it.
    let dev = unsafe { gvault_accel::DeviceSlice::new(0, 0x1000, 64) };
    let host = vec![5u8; 100];
    let mut job = Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: vec![Data::Host(&host), Data::Device(dev)],
    };
    let r = svc.run(&mut job).unwrap();
    assert!(r[0].is_ok());
    let e = r[1].as_ref().unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(e.kind, gvault_accel::SegmentErrorKind::DeviceResident);
}

#[test]
fn small_requests_from_many_clients_are_batched_unless_told_not_to() {
    for batching in [true, false] {
        let d = TestDaemon::start_with(|c| {
            c.workers = 1;
            c.batch.enabled = batching;
        });
        let threads: Vec<_> = (0..12)
            .map(|_| {
                let socket = d.socket.clone();
                std::thread::spawn(move || {
                    let svc = ServiceBackend::connect(&socket).unwrap();
                    let data = vec![7u8; 4096];
                    let want = CpuBackend::shared()
                        .run(&mut Job::Digest {
                            algo: DigestAlgo::Sha256,
                            segments: vec![Data::Host(&data)],
                        })
                        .unwrap();
                    for _ in 0..300 {
                        let got = svc
                            .run(&mut Job::Digest {
                                algo: DigestAlgo::Sha256,
                                segments: vec![Data::Host(&data)],
                            })
                            .unwrap();
                        assert_eq!(got, want);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let op = d.op_status("sha256");
        assert_eq!(op["requests"], 12 * 300);
        let largest = op["largest_batch"].as_u64().unwrap();
        if batching {
            assert!(largest > 1, "no batch formed: {op}");
        } else {
            assert_eq!(largest, 1, "{op}");
        }
    }
}

#[test]
fn clients_with_the_same_key_share_jobs_whatever_their_handles() {
    let d = TestDaemon::start_with(|c| c.workers = 1);
    let key = Aes256Key::from_bytes([6; 32]);
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let (socket, key) = (d.socket.clone(), key.clone());
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                // Different numbers of keys first: the shared key gets a
                // different handle on each connection.
                for i in 0..t {
                    let other = Aes256Key::from_bytes([100 + i; 32]);
                    svc.seal_block(&other, Nonce96::from_parts(9, 9), b"", &mut [0u8; 16])
                        .unwrap();
                }
                for i in 0..200u32 {
                    let mut data = [t; 4096];
                    svc.seal_block(&key, Nonce96::from_parts(t as u64, i), b"", &mut data)
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let seal = d.op_status("aes256gcm-seal");
    assert!(seal["largest_batch"].as_u64().unwrap() > 1, "{seal}");
}

#[test]
fn a_bound_on_jobs_per_op_makes_larger_batches_and_the_same_results() {
    let d = TestDaemon::start_with(|c| {
        c.workers = 4;
        c.batch.per_op = 1;
    });
    let threads: Vec<_> = (0..8u8)
        .map(|t| {
            let socket = d.socket.clone();
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                for i in 0..100u8 {
                    // Every tenth request is large (never batched, never
                    // held back by the bound).
                    let len = if i % 10 == 0 { 300_000 } else { 3000 };
                    let data = vec![t ^ i; len];
                    let job = |b: &dyn Backend| {
                        b.run(&mut Job::Digest {
                            algo: DigestAlgo::Blake3,
                            segments: vec![Data::Host(&data)],
                        })
                        .unwrap()
                    };
                    assert_eq!(job(&svc), job(CpuBackend::shared().as_ref()));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = d.status();
    let op = st["ops"][0].clone();
    assert_eq!(op["requests"], 800, "{st}");
    assert!(op["largest_batch"].as_u64().unwrap() > 1, "{op}");
}

#[test]
fn rsa_requests_under_different_keys_share_jobs() {
    let d = TestDaemon::start_with(|c| {
        c.workers = 1;
        c.batch.per_op = 1;
    });
    let keys: Vec<Arc<gvault_accel::RsaPrivateKey>> = (0..12u64)
        .map(|s| {
            let mut rng = StdRng::seed_from_u64(40 + s);
            let k = rsa::RsaPrivateKey::new(&mut rng, 1024).unwrap();
            Arc::new(gvault_accel::RsaPrivateKey::from_key(k).unwrap())
        })
        .collect();
    let threads: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(t, key)| {
            let (socket, key) = (d.socket.clone(), key.clone());
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                let mut rng = StdRng::seed_from_u64(t as u64);
                let inputs: Vec<Vec<u8>> = (0..40)
                    .map(|_| {
                        let mut m = vec![0u8; key.size()];
                        rng.fill_bytes(&mut m[1..]); // below the modulus
                        m
                    })
                    .collect();
                let job = |b: &dyn Backend, m: &[u8]| {
                    b.run(&mut Job::RsaPrivate {
                        key: &key,
                        segments: vec![m],
                    })
                    .unwrap()
                };
                // Back to back (the checks after), so that requests meet.
                let got: Vec<_> = inputs.iter().map(|m| job(&svc, m)).collect();
                for (m, g) in inputs.iter().zip(got) {
                    assert_eq!(g, job(CpuBackend::shared().as_ref(), m));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let op = d.op_status("rsa-private");
    assert_eq!(op["requests"], 12 * 40, "{op}");
    // Requests of different clients, each under its own key, ran together.
    assert!(op["largest_batch"].as_u64().unwrap() > 1, "{op}");
}

#[test]
fn a_job_under_many_keys_through_the_service_equals_the_cpu() {
    let d = TestDaemon::start();
    let keys: Vec<gvault_accel::RsaPrivateKey> = (0..3u64)
        .map(|s| {
            let mut rng = StdRng::seed_from_u64(70 + s);
            let k = rsa::RsaPrivateKey::new(&mut rng, 1024).unwrap();
            gvault_accel::RsaPrivateKey::from_key(k).unwrap()
        })
        .collect();
    let mut rng = StdRng::seed_from_u64(5);
    let inputs: Vec<(usize, Vec<u8>)> = (0..12)
        .map(|i| {
            let k = i % 3;
            let mut m = vec![0u8; keys[k].size()];
            rng.fill_bytes(&mut m[1..]);
            if i == 4 {
                m.pop(); // wrong length: a typed error at its index
            }
            (k, m)
        })
        .collect();
    let items: Vec<gvault_accel::RsaItem<'_>> = inputs
        .iter()
        .map(|(k, m)| gvault_accel::RsaItem {
            key: &keys[*k],
            input: m,
        })
        .collect();
    let svc = ServiceBackend::connect(&d.socket).unwrap();
    let mut job = Job::RsaPrivateKeys { items };
    let want = CpuBackend::new().run(&mut job).unwrap();
    assert_eq!(want[4].as_ref().unwrap_err().index, 4);
    assert_eq!(svc.run(&mut job).unwrap(), want);
}
