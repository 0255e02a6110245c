//! Properties of the CPU backend: seal/open round trips and rejects every
//! tampering; CTR matches an independent implementation; chunk boundaries
//! tile the input and respect min/max; multi-core results equal single-core
//! results for every op; bad input gets a typed error naming the segment.

mod common;

use common::*;
use gvault_accel::CpuBackend;
use gvault_accel::*;
use proptest::prelude::*;

fn key(seed: u8) -> Aes256Key {
    Aes256Key::from_bytes([seed; 32])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn seal_then_open_returns_the_input(len in 0usize..5000, aad_len in 0usize..64, seed in any::<u64>()) {
        let b = CpuBackend::with_threads(2);
        let plain = random_bytes(len, seed);
        let aad = random_bytes(aad_len, seed ^ 1);
        let nonce = Nonce96::from_parts(seed, 7);
        let mut data = plain.clone();
        let tag = seal(&b, &key(1), nonce, &aad, &mut data);
        if len >= 16 { prop_assert_ne!(&data, &plain); }
        open(&b, &key(1), nonce, &aad, tag, &mut data).unwrap();
        prop_assert_eq!(data, plain);
    }

    #[test]
    fn any_flipped_bit_makes_open_fail(len in 1usize..300, bit in any::<u16>(), seed in any::<u64>(), which in 0u8..4) {
        let b = CpuBackend::with_threads(1);
        let plain = random_bytes(len, seed);
        let aad = random_bytes(20, seed ^ 2);
        let nonce = Nonce96::from_parts(seed, 1);
        let mut data = plain.clone();
        let tag = seal(&b, &key(3), nonce, &aad, &mut data);
        let (mut nonce2, mut tag2, mut aad2) = (nonce, tag, aad.clone());
        match which {
            0 => { let i = bit as usize % (len * 8); data[i / 8] ^= 1 << (i % 8); }
            1 => { let i = bit as usize % 128; tag2 = { let mut b = *tag2.as_bytes(); b[i / 8] ^= 1 << (i % 8); Tag::from_bytes(b) }; }
            2 => { let i = bit as usize % 96; nonce2 = { let mut b = *nonce2.as_bytes(); b[i / 8] ^= 1 << (i % 8); Nonce96::from_bytes(b) }; }
            _ => { let i = bit as usize % 160; aad2[i / 8] ^= 1 << (i % 8); }
        }
        let err = open(&b, &key(3), nonce2, &aad2, tag2, &mut data).unwrap_err();
        prop_assert_eq!(err.kind, SegmentErrorKind::AuthenticationFailed);
        prop_assert!(data.iter().all(|&x| x == 0), "no plaintext of a forgery survives");
    }

    #[test]
    fn aes_ctr_matches_rustcrypto_including_counter_wrap(len in 0usize..2000, hi in any::<u64>(), lo_back in 0u64..4, seed in any::<u64>()) {
        use ctr::cipher::{KeyIvInit, StreamCipher};
        // Counters close to 2^64 and 2^128 boundaries exercise the carry.
        let counter = ((hi as u128) << 64) | (u64::MAX - lo_back) as u128;
        let iv = Iv128::from_bytes(counter.to_be_bytes());
        let k = key(9);
        let plain = random_bytes(len, seed);
        let mut want = plain.clone();
        ctr::Ctr128BE::<aes::Aes256>::new(k.expose().into(), iv.as_bytes().into()).apply_keystream(&mut want);
        for b in [CpuBackend::with_threads(1), CpuBackend::with_config(2, 64)] {
            let mut got = plain.clone();
            ctr(&b, CtrCipher::Aes256(&k), CtrIv::B128(iv), &mut got).unwrap();
            prop_assert_eq!(&got, &want);
        }
    }

    #[test]
    fn chunks_tile_the_input_and_respect_bounds(len in 0usize..400_000, seed in any::<u64>(), repetitive in any::<bool>()) {
        let data = if repetitive { vec![0xAB; len] } else { random_bytes(len, seed) };
        let params = ChunkParams::new(2048, 8192, 32768, 2).unwrap();
        let spans = chunks(&CpuBackend::with_threads(2), params, &data);
        let mut at = 0u64;
        for (i, s) in spans.iter().enumerate() {
            prop_assert_eq!(s.offset, at);
            prop_assert!(s.len as u64 <= 32768);
            if i + 1 < spans.len() { prop_assert!(s.len >= 2048, "only the last chunk may be short"); }
            at += s.len as u64;
        }
        prop_assert_eq!(at, len as u64);
    }
}

/// Runs the same job on a one-thread backend and on a two-thread backend that
/// cuts segments at 64 bytes, and demands identical results and bytes.
#[test]
fn multi_core_equals_single_core_for_every_op() {
    let one = CpuBackend::with_threads(1);
    let many = CpuBackend::with_config(2, 64);
    let sizes = [0usize, 1, 15, 16, 17, 63, 64, 65, 1000, 4095, 4096, 70_001];
    let inputs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| random_bytes(n, i as u64))
        .collect();
    let aes = key(5);
    let tea = TeaKey::from_bytes([7; 16]);
    let bf = BlowfishKey::try_from_slice(b"gvault blowfish key").unwrap();
    let bk = Blake3Key::from_bytes([11; 32]);

    for algo in [
        DigestAlgo::Blake3,
        DigestAlgo::Blake3Keyed(&bk),
        DigestAlgo::Sha256,
        DigestAlgo::Md5,
        DigestAlgo::Crc32,
        DigestAlgo::Crc32c,
    ] {
        let run = |b: &CpuBackend| {
            let mut job = Job::Digest {
                algo,
                segments: inputs.iter().map(Data::from).collect(),
            };
            b.run(&mut job).unwrap()
        };
        assert_eq!(run(&one), run(&many), "{}", algo.op());
    }

    for (cipher, iv) in [
        (
            CtrCipher::Aes256(&aes),
            CtrIv::B128(Iv128::from_bytes([0xfe; 16])),
        ),
        (
            CtrCipher::Tea(&tea),
            CtrIv::B64(Iv64::from_bytes([0xff; 8])),
        ),
        (
            CtrCipher::Blowfish(&bf),
            CtrIv::B64(Iv64::from_bytes([1; 8])),
        ),
    ] {
        let run = |b: &CpuBackend| {
            let mut bufs = inputs.clone();
            let mut job = Job::Ctr {
                cipher,
                segments: bufs
                    .iter_mut()
                    .map(|d| CtrSegment { iv, data: d.into() })
                    .collect(),
            };
            let res = b.run(&mut job).unwrap();
            drop(job);
            (res, bufs)
        };
        let (r1, b1) = run(&one);
        let (r2, b2) = run(&many);
        assert_eq!(r1, r2);
        assert_eq!(b1, b2, "{}", cipher.op());
        assert_ne!(b1[5], inputs[5], "the keystream changed the data");
    }

    let seal_all = |b: &CpuBackend| {
        let mut bufs = inputs.clone();
        let mut job = Job::Seal {
            key: &aes,
            segments: bufs
                .iter_mut()
                .enumerate()
                .map(|(i, d)| SealSegment {
                    nonce: Nonce96::from_parts(1, i as u32),
                    aad: b"hdr",
                    data: d.into(),
                })
                .collect(),
        };
        let res = b.run(&mut job).unwrap();
        drop(job);
        (res, bufs)
    };
    assert_eq!(seal_all(&one), seal_all(&many));

    let params = ChunkParams::new(64, 256, 1024, 1).unwrap();
    let chunk_all = |b: &CpuBackend| {
        let mut job = Job::Chunk {
            params,
            segments: inputs.iter().map(Data::from).collect(),
        };
        b.run(&mut job).unwrap()
    };
    assert_eq!(chunk_all(&one), chunk_all(&many));
}

#[test]
fn bad_input_gets_typed_errors_naming_the_segment() {
    let b = CpuBackend::with_threads(2);
    let aes = key(1);
    let tea = TeaKey::from_bytes([2; 16]);

    // A 64-bit IV for AES and a 128-bit IV for TEA: only those segments fail.
    let (mut a, mut c, mut d) = (vec![1u8; 32], vec![2u8; 32], vec![3u8; 32]);
    let mut job = Job::Ctr {
        cipher: CtrCipher::Aes256(&aes),
        segments: vec![
            CtrSegment {
                iv: CtrIv::B128(Iv128::default()),
                data: (&mut a).into(),
            },
            CtrSegment {
                iv: CtrIv::B64(Iv64::default()),
                data: (&mut c).into(),
            },
        ],
    };
    let out = b.run(&mut job).unwrap();
    assert!(out[0].is_ok());
    assert_eq!(
        out[1],
        Err(SegmentErrorKind::IvLength {
            expected: 16,
            got: 8
        }
        .at(1))
    );
    drop(job);
    assert_eq!(c, vec![2u8; 32], "a rejected segment is untouched");
    let err = ctr(
        &b,
        CtrCipher::Tea(&tea),
        CtrIv::B128(Iv128::default()),
        &mut d,
    )
    .unwrap_err();
    assert_eq!(
        err.kind,
        SegmentErrorKind::IvLength {
            expected: 8,
            got: 16
        }
    );

    // Nonces and keys of the wrong length do not construct.
    assert!(Nonce96::try_from_slice(&[0; 16]).is_err());
    assert!(Aes256Key::try_from_slice(&[0; 16]).is_err());
    assert!(BlowfishKey::try_from_slice(&[0; 3]).is_err());
    assert!(BlowfishKey::try_from_slice(&[0; 57]).is_err());
    assert!(ChunkParams::new(10, 256, 1024, 1).is_err());
    assert!(ChunkParams::new(4096, 1024, 65536, 1).is_err());
    assert!(ChunkParams::new(1024, 4096, 65536, 9).is_err());

    // Wrong key and truncated ciphertext fail authentication.
    let mut data = b"attack at dawn, bring snacks".to_vec();
    let nonce = Nonce96::from_parts(9, 9);
    let tag = seal(&b, &aes, nonce, b"", &mut data);
    let mut wrong = data.clone();
    assert_eq!(
        open(&b, &key(2), nonce, b"", tag, &mut wrong)
            .unwrap_err()
            .kind,
        SegmentErrorKind::AuthenticationFailed
    );
    let mut truncated = data[..data.len() - 1].to_vec();
    assert_eq!(
        open(&b, &aes, nonce, b"", tag, &mut truncated)
            .unwrap_err()
            .kind,
        SegmentErrorKind::AuthenticationFailed
    );

    // Empty segments are valid input wherever the algorithm defines them.
    let mut empty: Vec<u8> = vec![];
    let tag = seal(&b, &aes, nonce, b"aad only", &mut empty);
    open(&b, &aes, nonce, b"aad only", tag, &mut empty).unwrap();
    assert_eq!(chunks(&b, ChunkParams::DEFAULT, &[]), vec![]);

    // A segment over 4 GiB is refused before any byte is read (the zeroed
    // allocation is never touched, so this costs no memory).
    let mut huge = vec![0u8; (MAX_SEGMENT_LEN + 1) as usize];
    let mut small = vec![0u8; 10];
    let mut job = Job::Seal {
        key: &aes,
        segments: vec![
            SealSegment {
                nonce,
                aad: b"",
                data: (&mut small).into(),
            },
            SealSegment {
                nonce,
                aad: b"",
                data: (&mut huge).into(),
            },
        ],
    };
    let out = b.run(&mut job).unwrap();
    assert!(out[0].is_ok());
    assert_eq!(
        out[1],
        Err(SegmentErrorKind::TooLarge {
            len: MAX_SEGMENT_LEN + 1,
            max: MAX_SEGMENT_LEN
        }
        .at(1))
    );
    drop(job);
    drop(huge);

    // RSA: wrong length, and a value not below the modulus.
    let rsa = rsa_key(1024);
    let short = vec![1u8; 100];
    let too_big = vec![0xffu8; 128];
    let ok = test_data("rsa1024.in");
    let mut job = Job::RsaPrivate {
        key: &rsa,
        segments: vec![&short, &too_big, &ok],
    };
    let out = b.run(&mut job).unwrap();
    assert_eq!(
        out[0],
        Err(SegmentErrorKind::InputLength {
            expected: 128,
            got: 100
        }
        .at(0))
    );
    assert_eq!(out[1], Err(SegmentErrorKind::InputOutOfRange.at(1)));
    assert!(out[2].is_ok());
    assert!(RsaPrivateKey::from_pem(
        "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"
    )
    .is_err());

    // Device-resident input is not readable by the CPU backend: a typed error.
    let dev = unsafe { DeviceSlice::new(0, 0x1000, 64) };
    let mut job = Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: vec![Data::Device(dev)],
    };
    assert_eq!(
        b.run(&mut job).unwrap()[0],
        Err(SegmentErrorKind::DeviceResident.at(0))
    );
}
