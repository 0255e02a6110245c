//! Seed 001's primitives on the CPU against references built from the
//! plain digests: the parallel Merkle-Damgård digest, and sliding-window
//! matching against a naive scan. GPU agreement is in gpu_hash.rs.

mod common;

use common::*;
use gvault_accel::seed001::*;
use gvault_accel::CpuBackend;
use gvault_accel::*;

fn plain(hash: PmdHash, data: &[u8]) -> Vec<u8> {
    static CPU: std::sync::OnceLock<CpuBackend> = std::sync::OnceLock::new();
    let cpu = CPU.get_or_init(|| CpuBackend::with_threads(1));
    let algo = match hash {
        PmdHash::Md5 => DigestAlgo::Md5,
        PmdHash::Sha256 => DigestAlgo::Sha256,
    };
    digest(cpu, algo, data).as_bytes()
}

/// hash(hash(block 0) ‖ hash(block 1) ‖ ...), sequentially.
fn pmd_reference(hash: PmdHash, block: usize, data: &[u8]) -> Vec<u8> {
    let mut list = Vec::new();
    if data.is_empty() {
        list.extend(plain(hash, &[]));
    }
    for b in data.chunks(block) {
        list.extend(plain(hash, b));
    }
    plain(hash, &list)
}

#[test]
fn pmd_digest_is_the_hash_of_block_digests() {
    let data = random_bytes((1 << 20) + 77, 1);
    for hash in [PmdHash::Md5, PmdHash::Sha256] {
        for block in [1u32, 63, 64, 4096, 65536, 1 << 20, 1 << 21] {
            for n in [0usize, 1, 4095, 4096, 4097, data.len()] {
                if block < 64 && n > 4097 {
                    continue; // a million reference hashes: slow, no new case
                }
                let got = pmd_digest(hash, block, &data[..n]).unwrap();
                assert_eq!(got.value, pmd_reference(hash, block as usize, &data[..n]));
                assert_eq!((got.hash, got.block), (hash, block));
                assert_eq!(got.value.len(), hash.len());
            }
        }
        // Never the plain digest of the buffer, even with a single block.
        let one = pmd_digest(hash, 1 << 21, &data).unwrap();
        assert_ne!(one.value, plain(hash, &data));
        assert_eq!(one.value, plain(hash, &plain(hash, &data)));
        assert!(one.to_string().starts_with(hash.name()));
    }
    assert_ne!(
        pmd_digest(PmdHash::Md5, 4096, &data).unwrap().value,
        pmd_digest(PmdHash::Md5, 8192, &data).unwrap().value,
        "the block size is part of the function"
    );
    assert!(pmd_digest(PmdHash::Md5, 0, &data).is_err());
}

/// Every window's MD5 compared with the patterns, one at a time.
fn naive(params: &WindowParams, data: &[u8], patterns: &[[u8; 16]]) -> Vec<u64> {
    let (w, s) = (params.window() as usize, params.step() as usize);
    let mut out = Vec::new();
    let mut o = 0;
    while o + w <= data.len() {
        let d: [u8; 16] = plain(PmdHash::Md5, &data[o..o + w]).try_into().unwrap();
        if patterns.contains(&d) {
            out.push(o as u64);
        }
        o += s;
    }
    out
}

#[test]
fn sliding_windows_match_a_naive_scan() {
    // Repetitive data: a pattern taken from one window recurs.
    let period: Vec<u8> = (0..50_000u32).map(|k| (k % 36) as u8).collect();
    let random = random_bytes(30_000, 2);
    for params in [
        WindowParams::SEED,
        WindowParams::new(1, 1).unwrap(),
        WindowParams::new(55, 3).unwrap(),
        WindowParams::new(64, 64).unwrap(),
        WindowParams::new(200, 7).unwrap(),
    ] {
        for data in [&period[..], &random[..], &random[..10]] {
            let mut patterns: Vec<[u8; 16]> = [0usize, 4, 36, 1000, 29_000]
                .iter()
                .filter_map(|&o| window_md5(&params, data, o))
                .collect();
            patterns.push([0xAB; 16]);
            let want = naive(&params, data, &patterns);
            let got = window_matches(&params, data, &patterns);
            assert_eq!(got, want, "{params:?}, {} bytes", data.len());
            if data.len() >= 30_000 {
                assert!(!got.is_empty(), "{params:?}: patterns from the data match");
            }
            assert!(window_matches(&params, data, &[]).is_empty());
        }
    }
    assert_eq!(WindowParams::SEED.windows_in(19), 0);
    assert_eq!(WindowParams::SEED.windows_in(20), 1);
    assert_eq!(WindowParams::SEED.windows_in(24), 2);
    assert!(WindowParams::new(0, 4).is_err());
    assert!(WindowParams::new(20, 0).is_err());
}
