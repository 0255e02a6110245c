//! The daemon on a GPU: the same results as the CPU for every op, shared
//! buffers registered with the driver. Run by `scripts/gpu.sh service`
//! (#[ignore]d here: no GPU in CI).

mod common;

use std::sync::Arc;

use common::cases::{run_case, Keys, OPS};
use common::TestDaemon;
use gvault_accel::{
    Aes256Key, AutoBackend, Backend, CpuBackend, DataMut, GpuBackend, Job, Nonce96, SealSegment,
};
use gvault_service::ServiceBackend;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// The GPU, or `None` (a failure when GVAULT_REQUIRE_GPU=1).
fn gpu() -> Option<Arc<GpuBackend>> {
    match GpuBackend::probe() {
        Ok(g) => Some(Arc::new(g)),
        Err(why) if std::env::var("GVAULT_REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("GVAULT_REQUIRE_GPU=1 but no usable GPU: {why}")
        }
        Err(why) => {
            eprintln!("skipped: no usable GPU ({why})");
            None
        }
    }
}

/// A 64 MiB job over a buffer shared with the daemon, against the CPU.
fn zero_copy_seal(svc: &ServiceBackend) {
    let mut shared = svc.alloc_shared(64 << 20).unwrap();
    StdRng::seed_from_u64(5).fill_bytes(&mut shared);
    let mut copy = shared.to_vec();
    let key = Aes256Key::from_bytes([8; 32]);
    let seal = |b: &dyn Backend, d: &mut [u8]| {
        b.run(&mut Job::Seal {
            key: &key,
            segments: d
                .chunks_mut(16 << 20)
                .enumerate()
                .map(|(i, c)| SealSegment {
                    nonce: Nonce96::from_parts(1, i as u32),
                    aad: b"",
                    data: DataMut::Host(c),
                })
                .collect(),
        })
        .unwrap()
    };
    assert_eq!(
        seal(svc, &mut shared),
        seal(CpuBackend::shared().as_ref(), &mut copy)
    );
    assert!(shared[..] == copy[..]);
}

#[test]
#[ignore = "needs a GPU: scripts/gpu.sh service"]
fn a_gpu_daemon_matches_the_cpu_for_every_op() {
    let Some(gpu) = gpu() else { return };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gvault.sock");
    let d = TestDaemon::start_on(dir, socket, gpu, |_| {});
    let keys = Arc::new(Keys::new(&mut StdRng::seed_from_u64(11)));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (socket, keys) = (d.socket.clone(), Arc::clone(&keys));
            std::thread::spawn(move || {
                let svc = ServiceBackend::connect(&socket).unwrap();
                for i in 0..(2 * OPS as u64) {
                    let (seed, which) = (t * 100 + i, ((t + i) % OPS as u64) as u32);
                    let max = 20 << 20;
                    let want = run_case(CpuBackend::shared().as_ref(), which, seed, &keys, max);
                    let got = run_case(&svc, which, seed, &keys, max);
                    assert!(got == want, "op {which} seed {seed}");
                }
                zero_copy_seal(&svc);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = d.status();
    println!("status: {st}");
    assert!(st["gpu_registered_buffers"].as_u64().unwrap() > 0, "{st}");
}

#[test]
#[ignore = "needs a GPU: scripts/gpu.sh service"]
fn an_auto_daemon_places_large_jobs_and_matches_the_cpu() {
    let Some(_) = gpu() else { return };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("gvault.sock");
    let auto = Arc::new(AutoBackend::new());
    let d = TestDaemon::start_on(dir, socket, auto.clone(), |_| {});
    let svc = ServiceBackend::connect(&d.socket).unwrap();
    zero_copy_seal(&svc);
    let keys = Keys::new(&mut StdRng::seed_from_u64(12));
    for which in 0..OPS {
        let want = run_case(CpuBackend::shared().as_ref(), which, 77, &keys, 64 << 20);
        assert!(
            run_case(&svc, which, 77, &keys, 64 << 20) == want,
            "op {which}"
        );
    }
    println!("placements: {:?}", auto.placements());
}
