//! RSA batches on the GPU (kernels/rsa.cu) against the CPU backend and the
//! kernel's CPU emulation, word for word. Every test is `#[ignore]`d: the
//! `rsa` phase of scripts/gpu.sh runs this binary with `--include-ignored`
//! and `GVAULT_REQUIRE_GPU=1`, under which a missing GPU fails the test;
//! without that variable and without a GPU a test prints SKIPPED and passes.

mod common;

use std::sync::OnceLock;

use gvault_accel::rsa_batch::{emulate, run_with, Launch};
use gvault_accel::{
    Backend, CpuBackend, GpuBackend, Job, RsaItem, RsaOptions, RsaPrivateKey, RsaSort,
    SegmentErrorKind, SegmentResult,
};
use rand::{RngCore, SeedableRng};
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use rsa::BigUint;

fn gpu() -> Option<&'static GpuBackend> {
    static GPU: OnceLock<Result<GpuBackend, String>> = OnceLock::new();
    match GPU.get_or_init(GpuBackend::probe) {
        Ok(g) => Some(g),
        Err(why) => {
            assert!(
                std::env::var_os("GVAULT_REQUIRE_GPU").is_none(),
                "GVAULT_REQUIRE_GPU is set but no GPU can be used: {why}"
            );
            println!("SKIPPED (no GPU): {why}");
            None
        }
    }
}

fn generated(bits: usize, seed: u64) -> RsaPrivateKey {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    RsaPrivateKey::from_key(rsa::RsaPrivateKey::new(&mut rng, bits).unwrap()).unwrap()
}

fn be(v: &BigUint, size: usize) -> Vec<u8> {
    let b = v.to_bytes_be();
    let mut out = vec![0u8; size];
    out[size - b.len()..].copy_from_slice(&b);
    out
}

/// 0, 1, 2, n-1, n-2, values at and around p and q and their multiples,
/// and `random` random values below n.
fn messages(key: &RsaPrivateKey, random: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let k = key.inner();
    let n = k.n();
    let one = BigUint::from(1u32);
    let mut v: Vec<BigUint> = vec![
        BigUint::from(0u32),
        one.clone(),
        BigUint::from(2u32),
        n - &one,
        n - BigUint::from(2u32),
    ];
    for p in k.primes() {
        v.push(p.clone());
        v.push(p - &one);
        v.push(p + &one);
        v.push(p * BigUint::from(2u32));
        v.push(p * BigUint::from(3u32) + &one);
    }
    for _ in 0..random {
        let mut b = vec![0u8; key.size()];
        rng.fill_bytes(&mut b);
        v.push(BigUint::from_bytes_be(&b) % n);
    }
    v.iter().map(|c| be(c, key.size())).collect()
}

/// The CPU backend's results for each item (one job per item's key).
fn cpu_results(items: &[RsaItem<'_>]) -> Vec<SegmentResult> {
    let cpu = CpuBackend::new();
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let mut job = Job::RsaPrivate {
                key: it.key,
                segments: vec![it.input],
            };
            let r = cpu.run(&mut job).unwrap().remove(0);
            r.map_err(|e| e.kind.at(i))
        })
        .collect()
}

/// The batch on the GPU with every launch compared word for word with the
/// emulation, and every result with the CPU backend's.
fn check_batch(g: &GpuBackend, items: &[RsaItem<'_>], sort: RsaSort, what: &str) {
    let mut launches = 0;
    let out = run_with(items, RsaOptions { sort }, &mut |l: &Launch| {
        let got = g.rsa_execute(l).map_err(|e| e.to_string())?;
        let want = emulate(l);
        assert_eq!(got.len(), want.len(), "{what}: output length");
        if let Some(k) = (0..l.messages()).find(|&k| {
            got[k * 2 * l.limbs..(k + 1) * 2 * l.limbs]
                != want[k * 2 * l.limbs..(k + 1) * 2 * l.limbs]
        }) {
            panic!(
                "{what}: {}-limb launch of {} messages: slot {k} differs from the emulation",
                l.limbs,
                l.messages()
            );
        }
        launches += 1;
        Ok(got)
    })
    .unwrap();
    assert!(launches > 0 || items.is_empty());
    assert_eq!(
        out,
        cpu_results(items),
        "{what}: GPU batch against the CPU backend"
    );
    // The public entry point (blinding with fresh randomness) agrees too.
    assert_eq!(
        g.rsa_private_batch(items, RsaOptions { sort }).unwrap(),
        out,
        "{what}: rsa_private_batch"
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn one_key_per_batch_every_size_edge_messages() {
    let Some(g) = gpu() else { return };
    for bits in [1024, 2048, 4096] {
        let key = common::rsa_key(bits);
        let msgs = messages(&key, 40, bits as u64);
        let items: Vec<RsaItem<'_>> = msgs
            .iter()
            .map(|m| RsaItem {
                key: &key,
                input: m,
            })
            .collect();
        check_batch(g, &items, RsaSort::default(), &format!("RSA-{bits}"));
        // openssl's raw decryption of the test vector
        let input = common::test_data(&format!("rsa{bits}.in"));
        let want = common::test_data(&format!("rsa{bits}.openssl.out"));
        let out = g
            .rsa_private_batch(
                &[RsaItem {
                    key: &key,
                    input: &input,
                }],
                RsaOptions::default(),
            )
            .unwrap();
        assert_eq!(
            out[0].as_ref().unwrap().bytes().unwrap(),
            &want[..],
            "RSA-{bits} openssl"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn job_api_on_the_gpu_equals_the_cpu_backend() {
    let Some(g) = gpu() else { return };
    for bits in [1024, 2048, 4096] {
        let key = common::rsa_key(bits);
        let msgs = messages(&key, 100, 7 + bits as u64);
        let mut job = Job::RsaPrivate {
            key: &key,
            segments: msgs.iter().map(|m| m.as_slice()).collect(),
        };
        let want = CpuBackend::new().run(&mut job).unwrap();
        assert_eq!(g.run(&mut job).unwrap(), want, "RSA-{bits}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn a_job_under_many_keys_on_the_gpu_equals_the_cpu_backend() {
    let Some(g) = gpu() else { return };
    // 1024, 2048 and 4096 bits in one job, with a key the kernels do not
    // take (3072 bits: the CPU path) and a wrong-length input among them.
    let keys = [
        common::rsa_key(1024),
        generated(2048, 801),
        common::rsa_key(4096),
        generated(3072, 802),
    ];
    let mut src: Vec<(usize, Vec<u8>)> = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        for m in messages(key, 20, 900 + k as u64) {
            src.push((k, m));
        }
    }
    src.insert(7, (1, vec![3u8; keys[1].size() + 1]));
    let items = common::rsa_items(&keys, &src);
    let mut job = Job::RsaPrivateKeys { items };
    let want = CpuBackend::new().run(&mut job).unwrap();
    assert!(want[7].is_err());
    assert_eq!(g.run(&mut job).unwrap(), want);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn many_keys_of_every_size_in_one_batch_under_every_sort() {
    let Some(g) = gpu() else { return };
    let mut keys: Vec<RsaPrivateKey> = (0..6).map(|s| generated(1024, 500 + s)).collect();
    keys.extend((0..3).map(|s| generated(2048, 600 + s)));
    keys.push(common::rsa_key(2048));
    keys.push(common::rsa_key(4096));
    keys.push(common::rsa_key(1024));
    let mut rng = rand::rngs::StdRng::seed_from_u64(77);
    let mut src: Vec<(usize, Vec<u8>)> = Vec::new();
    for round in 0..40 {
        for (k, key) in keys.iter().enumerate() {
            // uneven group sizes: key k has 40 / (1 + k % 5) messages
            if round % (1 + k % 5) != 0 {
                continue;
            }
            let mut b = vec![0u8; key.size()];
            rng.fill_bytes(&mut b);
            src.push((
                k,
                be(&(BigUint::from_bytes_be(&b) % key.inner().n()), key.size()),
            ));
        }
    }
    let items = common::rsa_items(&keys, &src);
    for sort in [RsaSort::None, RsaSort::ByKey, RsaSort::ByKeySmallFirst] {
        check_batch(g, &items, sort, &format!("{} keys, {sort:?}", keys.len()));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn a_large_batch_spans_many_blocks() {
    let Some(g) = gpu() else { return };
    let key = common::rsa_key(2048);
    let msgs = messages(&key, 5000, 99);
    let items: Vec<RsaItem<'_>> = msgs
        .iter()
        .map(|m| RsaItem {
            key: &key,
            input: m,
        })
        .collect();
    let out = g.rsa_private_batch(&items, RsaOptions::default()).unwrap();
    // Emulating 5000 messages is slow: compare every 97th with the CPU.
    let cpu = CpuBackend::new();
    for (i, m) in msgs.iter().enumerate().step_by(97) {
        let mut job = Job::RsaPrivate {
            key: &key,
            segments: vec![m],
        };
        let want = cpu.run(&mut job).unwrap().remove(0).unwrap();
        assert_eq!(out[i].as_ref().unwrap(), &want, "message {i}");
    }
    assert!(out.iter().all(|r| r.is_ok()));
    let t = g.rsa_kernel_time(&items, RsaOptions::default(), 2).unwrap();
    assert!(t.as_nanos() > 0);
    println!(
        "RSA-2048, {} messages: kernel {:.3} ms ({:.0} ops/s)",
        items.len(),
        t.as_secs_f64() * 1e3,
        items.len() as f64 / t.as_secs_f64()
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn wrong_inputs_are_typed_errors_as_on_the_cpu() {
    let Some(g) = gpu() else { return };
    let key = common::rsa_key(2048);
    let n = be(key.inner().n(), key.size());
    let short = vec![1u8; 255];
    let long = vec![1u8; 257];
    let above = vec![0xffu8; 256];
    let good = vec![3u8; 256];
    let inputs = [&short, &n, &good, &long, &above];
    let mut job = Job::RsaPrivate {
        key: &key,
        segments: inputs.iter().map(|m| m.as_slice()).collect(),
    };
    let want = CpuBackend::new().run(&mut job).unwrap();
    let got = g.run(&mut job).unwrap();
    assert_eq!(got, want);
    assert_eq!(
        got[0].as_ref().unwrap_err().kind,
        SegmentErrorKind::InputLength {
            expected: 256,
            got: 255
        }
    );
    assert_eq!(
        got[1].as_ref().unwrap_err().kind,
        SegmentErrorKind::InputOutOfRange
    );
    assert!(got[2].is_ok());
    // A key size the kernels do not take fails the job with the reason.
    let odd = generated(1536, 3);
    let m = vec![1u8; odd.size()];
    let err = g
        .rsa_private_batch(
            &[RsaItem {
                key: &odd,
                input: &m,
            }],
            RsaOptions::default(),
        )
        .unwrap_err();
    assert!(err.to_string().contains("RSA-1536"), "{err}");
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh rsa runs it with --include-ignored"]
fn a_batch_cut_into_pieces_keeps_order_and_error_indices() {
    let Some(g) = gpu() else { return };
    // Past two pieces (16384 messages each): three pieces in flight two at
    // a time, under four keys, with bad inputs in the later pieces.
    let keys: Vec<RsaPrivateKey> = (0..4).map(|s| generated(1024, 40 + s)).collect();
    let n = 3 * 16384 + 7;
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let mut msgs: Vec<Vec<u8>> = (0..n)
        .map(|_| {
            let mut b = vec![0u8; 128];
            rng.fill_bytes(&mut b);
            b[0] &= 0x3f;
            b
        })
        .collect();
    let bad = [20_000, 40_000, n - 1];
    msgs[bad[0]].truncate(100);
    msgs[bad[1]] = vec![0xff; 128];
    msgs[bad[2]].push(0);
    let items: Vec<RsaItem<'_>> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| RsaItem {
            key: &keys[(i / 5) % keys.len()],
            input: m,
        })
        .collect();
    let got = g.rsa_private_batch(&items, RsaOptions::default()).unwrap();
    let mut job = Job::RsaPrivateKeys {
        items: items.clone(),
    };
    let want = CpuBackend::new().run(&mut job).unwrap();
    assert_eq!(got.len(), n);
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a, b, "message {i}");
    }
    for i in bad {
        assert_eq!(got[i].as_ref().unwrap_err().index, i);
    }
    assert_eq!(got.iter().filter(|r| r.is_err()).count(), bad.len());
}
