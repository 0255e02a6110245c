//! RSA batches through the CPU emulation of the GPU kernels (the same
//! limbs, CIOS products, window schedule and Garner step as kernels/rsa.cu):
//! the batch host path (key precomputation, blinding, sorting, verification)
//! against the CPU backend and the `rsa` crate, with no GPU.

mod common;

use gvault_accel::rsa_batch::{run_emulated, run_with, Launch};
use gvault_accel::{
    Backend, CpuBackend, Job, RsaItem, RsaOptions, RsaPrivateKey, RsaSort, SegmentErrorKind,
};
use rand::{Rng, RngCore, SeedableRng};
use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use rsa::BigUint;

/// A fresh key from a seeded generator (many-key batches).
fn generated(bits: usize, seed: u64) -> RsaPrivateKey {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    RsaPrivateKey::from_key(rsa::RsaPrivateKey::new(&mut rng, bits).unwrap()).unwrap()
}

/// c^d mod n by the `rsa` crate without blinding: the reference.
fn reference(key: &RsaPrivateKey, c: &[u8]) -> Vec<u8> {
    let m = rsa::hazmat::rsa_decrypt_and_check::<rand::rngs::OsRng>(
        key.inner(),
        None,
        &BigUint::from_bytes_be(c),
    )
    .unwrap();
    let b = m.to_bytes_be();
    let mut out = vec![0u8; key.size()];
    out[key.size() - b.len()..].copy_from_slice(&b);
    out
}

fn be(v: &BigUint, size: usize) -> Vec<u8> {
    let b = v.to_bytes_be();
    let mut out = vec![0u8; size];
    out[size - b.len()..].copy_from_slice(&b);
    out
}

/// Messages of interest for `key`: 0, 1, 2, n-1, n-2, values at and
/// around p and q, and random ones below n.
fn messages(key: &RsaPrivateKey, random: usize, rng: &mut impl Rng) -> Vec<Vec<u8>> {
    let k = key.inner();
    let n = k.n();
    let size = key.size();
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
        let mut b = vec![0u8; size];
        rng.fill_bytes(&mut b);
        let c = BigUint::from_bytes_be(&b) % n;
        v.push(c);
    }
    v.iter().map(|c| be(c, size)).collect()
}

fn ok_bytes(r: &gvault_accel::SegmentResult) -> Vec<u8> {
    r.as_ref()
        .expect("segment ok")
        .bytes()
        .expect("bytes")
        .to_vec()
}

#[test]
fn emulation_matches_the_rsa_crate_and_the_cpu_backend_for_every_size() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(24);
    let cpu = CpuBackend::new();
    for bits in [1024, 2048, 4096] {
        let key = common::rsa_key(bits);
        let msgs = messages(&key, if bits == 4096 { 3 } else { 12 }, &mut rng);
        let items: Vec<RsaItem<'_>> = msgs
            .iter()
            .map(|m| RsaItem {
                key: &key,
                input: m,
            })
            .collect();
        let out = run_emulated(&items, RsaOptions::default()).unwrap();
        let mut job = Job::RsaPrivate {
            key: &key,
            segments: msgs.iter().map(|m| m.as_slice()).collect(),
        };
        let cpu_out = cpu.run(&mut job).unwrap();
        for (i, m) in msgs.iter().enumerate() {
            let want = reference(&key, m);
            assert_eq!(ok_bytes(&out[i]), want, "RSA-{bits} message {i}");
            assert_eq!(ok_bytes(&cpu_out[i]), want, "cpu RSA-{bits} message {i}");
        }
    }
}

#[test]
fn emulation_matches_openssl_vectors() {
    // tests/data/rsa{bits}.in decrypted by `openssl pkeyutl -decrypt
    // -pkeyopt rsa_padding_mode:none` into rsa{bits}.openssl.out.
    for bits in [1024, 2048, 4096] {
        let key = common::rsa_key(bits);
        let input = common::test_data(&format!("rsa{bits}.in"));
        let want = common::test_data(&format!("rsa{bits}.openssl.out"));
        let out = run_emulated(
            &[RsaItem {
                key: &key,
                input: &input,
            }],
            RsaOptions::default(),
        )
        .unwrap();
        assert_eq!(ok_bytes(&out[0]), want, "RSA-{bits}");
    }
}

#[test]
fn many_keys_of_mixed_sizes_in_one_batch_under_every_sort() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let mut keys: Vec<RsaPrivateKey> = (0..5).map(|s| generated(1024, 100 + s)).collect();
    keys.push(generated(2048, 7));
    keys.push(common::rsa_key(2048));
    keys.push(common::rsa_key(4096));
    // Uneven group sizes, interleaved: what the 2-pass order reorders.
    let mut items_src: Vec<(usize, Vec<u8>)> = Vec::new();
    for round in 0..6 {
        for (k, key) in keys.iter().enumerate() {
            if k == keys.len() - 1 && round > 0 {
                continue; // one 4096-bit message is enough time
            }
            if round >= 2 + k % 3 {
                continue;
            }
            let mut b = vec![0u8; key.size()];
            rng.fill_bytes(&mut b);
            let c = BigUint::from_bytes_be(&b) % key.inner().n();
            items_src.push((k, be(&c, key.size())));
        }
    }
    let items = common::rsa_items(&keys, &items_src);
    for sort in [RsaSort::None, RsaSort::ByKey, RsaSort::ByKeySmallFirst] {
        let out = run_emulated(&items, RsaOptions { sort }).unwrap();
        assert_eq!(out.len(), items.len());
        for (i, (k, m)) in items_src.iter().enumerate() {
            assert_eq!(
                ok_bytes(&out[i]),
                reference(&keys[*k], m),
                "{sort:?} item {i}"
            );
        }
    }
}

#[test]
fn a_job_under_many_keys_matches_one_job_a_key_on_the_cpu_and_auto_backends() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let keys = [
        generated(1024, 31),
        generated(1024, 32),
        common::rsa_key(2048),
    ];
    let mut src: Vec<(usize, Vec<u8>)> = Vec::new();
    for round in 0..4 {
        for (k, key) in keys.iter().enumerate() {
            let mut b = vec![0u8; key.size()];
            rng.fill_bytes(&mut b);
            let c = BigUint::from_bytes_be(&b) % key.inner().n();
            src.push((k, be(&c, key.size())));
            if round == 2 && k == 1 {
                src.push((k, vec![1u8; key.size() - 1])); // wrong length
            }
        }
    }
    let bad = src
        .iter()
        .position(|(k, m)| m.len() != keys[*k].size())
        .unwrap();
    let items = common::rsa_items(&keys, &src);
    let auto = gvault_accel::AutoBackend::new();
    for backend in [&CpuBackend::new() as &dyn Backend, &auto] {
        let out = backend
            .run(&mut Job::RsaPrivateKeys {
                items: items.clone(),
            })
            .unwrap();
        assert_eq!(out.len(), items.len());
        for (i, (k, m)) in src.iter().enumerate() {
            if i == bad {
                let e = out[i].as_ref().unwrap_err();
                assert_eq!(e.index, i);
                assert!(matches!(e.kind, SegmentErrorKind::InputLength { .. }));
                continue;
            }
            assert_eq!(
                ok_bytes(&out[i]),
                reference(&keys[*k], m),
                "{} item {i}",
                backend.name()
            );
        }
        // The same as one job a key.
        for (k, key) in keys.iter().enumerate() {
            let mine: Vec<usize> = (0..src.len()).filter(|&i| src[i].0 == k).collect();
            let one = backend
                .run(&mut Job::RsaPrivate {
                    key,
                    segments: mine.iter().map(|&i| &src[i].1[..]).collect(),
                })
                .unwrap();
            for (j, &i) in mine.iter().enumerate() {
                assert_eq!(one[j].is_ok(), out[i].is_ok());
                if let (Ok(a), Ok(b)) = (&one[j], &out[i]) {
                    assert_eq!(a, b);
                }
            }
        }
    }
}

#[test]
fn sorting_groups_keys_and_puts_small_groups_first() {
    let keys: Vec<RsaPrivateKey> = (0..3).map(|s| generated(1024, 300 + s)).collect();
    // key 0: 3 messages, key 1: 1, key 2: 2, interleaved.
    let pattern = [0usize, 2, 0, 1, 2, 0];
    let msg = vec![7u8; 128];
    let items: Vec<RsaItem<'_>> = pattern
        .iter()
        .map(|&k| RsaItem {
            key: &keys[k],
            input: &msg,
        })
        .collect();
    let order_of = |sort| {
        let mut seen = Vec::new();
        run_with(&items, RsaOptions { sort }, &mut |l: &Launch| {
            seen = l.msg_key.clone();
            Ok(gvault_accel::rsa_batch::emulate(l))
        })
        .unwrap();
        seen
    };
    // Key records are numbered in order of first appearance: 0, 2, 1 -> 0, 1, 2.
    assert_eq!(order_of(RsaSort::None), vec![0, 1, 0, 2, 1, 0]);
    assert_eq!(order_of(RsaSort::ByKey), vec![0, 0, 0, 1, 1, 2]);
    assert_eq!(order_of(RsaSort::ByKeySmallFirst), vec![2, 1, 1, 0, 0, 0]);
}

#[test]
fn a_faulty_result_is_an_error_never_a_value() {
    let key = common::rsa_key(1024);
    let msgs: Vec<Vec<u8>> = (0..4u8).map(|i| vec![i + 1; 128]).collect();
    let items: Vec<RsaItem<'_>> = msgs
        .iter()
        .map(|m| RsaItem {
            key: &key,
            input: m,
        })
        .collect();
    for flip_word in [0usize, 17, 31] {
        let out = run_with(&items, RsaOptions::default(), &mut |l: &Launch| {
            let mut w = gvault_accel::rsa_batch::emulate(l);
            // a fault in message 2's result (slot 2: one key, no reorder)
            w[2 * 32 + flip_word] ^= 1 << 5;
            Ok(w)
        })
        .unwrap();
        for (i, r) in out.iter().enumerate() {
            if i == 2 {
                let e = r
                    .as_ref()
                    .expect_err("a faulty result must not be returned");
                assert_eq!(e.index, 2);
                assert!(
                    matches!(e.kind, SegmentErrorKind::Internal(ref s) if s.contains("public-exponent"))
                );
            } else {
                assert_eq!(ok_bytes(r), reference(&key, &msgs[i]));
            }
        }
    }
    // A fault that makes the result p's multiple (the classic CRT fault,
    // which leaks a prime as gcd(m^e - c, n)) is caught the same way.
    let p = key.inner().primes()[0].clone();
    let out = run_with(&items, RsaOptions::default(), &mut |l: &Launch| {
        let mut w = gvault_accel::rsa_batch::emulate(l);
        let bytes = p.to_bytes_le();
        for (j, c) in bytes.chunks(4).enumerate() {
            let mut x = [0u8; 4];
            x[..c.len()].copy_from_slice(c);
            w[j] = u32::from_le_bytes(x);
        }
        for word in w.iter_mut().take(32).skip(bytes.len().div_ceil(4)) {
            *word = 0;
        }
        Ok(w)
    })
    .unwrap();
    assert!(out[0].is_err());
}

#[test]
fn wrong_inputs_are_typed_errors_as_on_the_cpu() {
    let key = common::rsa_key(2048);
    let n = be(key.inner().n(), key.size());
    let short = vec![1u8; 255];
    let long = vec![1u8; 257];
    let at_n = n.clone();
    let above = vec![0xffu8; 256];
    let good = vec![3u8; 256];
    let inputs = [&short, &at_n, &good, &long, &above];
    let items: Vec<RsaItem<'_>> = inputs
        .iter()
        .map(|m| RsaItem {
            key: &key,
            input: m,
        })
        .collect();
    let out = run_emulated(&items, RsaOptions::default()).unwrap();
    let mut job = Job::RsaPrivate {
        key: &key,
        segments: inputs.iter().map(|m| m.as_slice()).collect(),
    };
    let cpu = CpuBackend::new().run(&mut job).unwrap();
    assert_eq!(out, cpu, "same results and errors as the CPU backend");
    assert_eq!(
        out[0].as_ref().unwrap_err().kind,
        SegmentErrorKind::InputLength {
            expected: 256,
            got: 255
        }
    );
    assert_eq!(
        out[1].as_ref().unwrap_err().kind,
        SegmentErrorKind::InputOutOfRange
    );
    assert_eq!(ok_bytes(&out[2]), reference(&key, &good));
    assert_eq!(out[4].as_ref().unwrap_err().index, 4);
}

#[test]
fn keys_the_kernels_do_not_take_fail_the_batch_with_a_reason() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let key = RsaPrivateKey::from_key(rsa::RsaPrivateKey::new(&mut rng, 1536).unwrap()).unwrap();
    let msg = vec![1u8; key.size()];
    let err = run_emulated(
        &[RsaItem {
            key: &key,
            input: &msg,
        }],
        RsaOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("RSA-1536"), "{err}");
    // Prime order does not matter: a key given with p < q gives the same.
    let k = common::rsa_key(1024);
    let inner = k.inner();
    let (p, q) = (&inner.primes()[0], &inner.primes()[1]);
    let swapped = rsa::RsaPrivateKey::from_components(
        inner.n().clone(),
        inner.e().clone(),
        inner.d().clone(),
        vec![q.clone(), p.clone()],
    )
    .unwrap();
    let swapped = RsaPrivateKey::from_key(swapped).unwrap();
    let mut b = vec![0u8; 128];
    rng.fill(&mut b[..]);
    let c = be(&(BigUint::from_bytes_be(&b) % inner.n()), 128);
    for key in [&k, &swapped] {
        let out = run_emulated(&[RsaItem { key, input: &c }], RsaOptions::default()).unwrap();
        assert_eq!(ok_bytes(&out[0]), reference(&k, &c));
    }
}

#[test]
fn the_kernel_sees_blinded_inputs_fresh_each_batch() {
    let key = common::rsa_key(1024);
    let msgs: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 128]).collect();
    let items: Vec<RsaItem<'_>> = msgs
        .iter()
        .map(|m| RsaItem {
            key: &key,
            input: m,
        })
        .collect();
    let words_of = |m: &[u8]| -> Vec<u32> {
        m.rchunks(4)
            .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
            .collect()
    };
    let mut seen: Vec<Vec<u32>> = Vec::new();
    for _ in 0..2 {
        let out = run_with(&items, RsaOptions::default(), &mut |l: &Launch| {
            seen.push(l.input.clone());
            Ok(gvault_accel::rsa_batch::emulate(l))
        })
        .unwrap();
        for (i, m) in msgs.iter().enumerate() {
            assert_eq!(ok_bytes(&out[i]), reference(&key, m));
        }
    }
    for (i, m) in msgs.iter().enumerate().skip(2) {
        let raw = words_of(m);
        let a = &seen[0][i * 32..(i + 1) * 32];
        let b = &seen[1][i * 32..(i + 1) * 32];
        assert_ne!(a, &raw[..], "message {i} reached the kernel unblinded");
        assert_ne!(a, b, "message {i} blinded the same way twice");
    }
    // Within a batch no two messages share a blinding factor: equal
    // inputs reach the kernel as different values.
    let same = vec![vec![9u8; 128]; 40];
    let items: Vec<RsaItem<'_>> = same
        .iter()
        .map(|m| RsaItem {
            key: &key,
            input: m,
        })
        .collect();
    let mut input = Vec::new();
    run_with(&items, RsaOptions::default(), &mut |l: &Launch| {
        input = l.input.clone();
        Ok(gvault_accel::rsa_batch::emulate(l))
    })
    .unwrap();
    let mut slots: Vec<&[u32]> = input.chunks(32).collect();
    slots.sort();
    slots.dedup();
    assert_eq!(slots.len(), 40);
}
