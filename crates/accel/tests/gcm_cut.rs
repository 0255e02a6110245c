//! AES-GCM segments cut across CPU threads (jobs with fewer segments than
//! threads) give the whole-segment results bit for bit: tags, ciphertext,
//! plaintext, and every tampering fails with the whole segment wiped.

mod common;

use common::random_bytes;
use gvault_accel::cpu::{self, CpuBackend};
use gvault_accel::*;
use proptest::prelude::*;

fn seal_all(b: &CpuBackend, key: &Aes256Key, aads: &[Vec<u8>], bufs: &mut [Vec<u8>]) -> Vec<Tag> {
    let mut job = Job::Seal {
        key,
        segments: bufs
            .iter_mut()
            .zip(aads)
            .enumerate()
            .map(|(i, (d, aad))| SealSegment {
                nonce: Nonce96::from_parts(i as u64, 3),
                aad,
                data: DataMut::Host(d),
            })
            .collect(),
    };
    b.run(&mut job)
        .expect("job runs")
        .into_iter()
        .map(|r| r.expect("segment ok").tag().expect("a tag"))
        .collect()
}

fn open_all(
    b: &CpuBackend,
    key: &Aes256Key,
    aads: &[Vec<u8>],
    tags: &[Tag],
    bufs: &mut [Vec<u8>],
) -> Vec<SegmentResult> {
    let mut job = Job::Open {
        key,
        segments: bufs
            .iter_mut()
            .zip(aads)
            .zip(tags)
            .enumerate()
            .map(|(i, ((d, aad), tag))| OpenSegment {
                nonce: Nonce96::from_parts(i as u64, 3),
                aad,
                tag: *tag,
                data: DataMut::Host(d),
            })
            .collect(),
    };
    b.run(&mut job).expect("job runs")
}

/// Segments of the given lengths; the job is over 64 KiB so it runs on
/// the pool, where the cut applies.
fn segments(lens: &[usize], seed: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let bufs = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| random_bytes(n, seed + i as u64))
        .collect();
    let aads = lens
        .iter()
        .enumerate()
        .map(|(i, _)| random_bytes((seed as usize + 7 * i) % 70, seed ^ i as u64))
        .collect();
    (bufs, aads)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn cut_gcm_equals_whole_segment_gcm(
        first in 65_537usize..300_000,
        rest in proptest::collection::vec(0usize..100_000, 1..3),
        split in 1usize..600,
        threads in 5usize..9,
        seed in any::<u64>(),
    ) {
        // Few enough segments for the cut to apply (GCM_CUT_COST each).
        let mut lens = vec![first];
        lens.extend(rest);
        while lens.len() as f64 * cpu::GCM_CUT_COST >= threads as f64 {
            lens.pop();
        }
        let key = Aes256Key::from_bytes([seed as u8; 32]);
        let (plain, aads) = segments(&lens, seed);
        let whole = CpuBackend::with_threads(1);
        // Pieces of 16·split bytes (at least 64), at least four in the
        // first segment so it is cut: from 4 to thousands of pieces, and
        // cut sizes that are not powers of two. Two or more segments make
        // the job too large to run inline (uncut) on the caller.
        let split = 1 + split % (first / 64);
        let cut = CpuBackend::with_config(threads, split * 16);
        let mut want = plain.clone();
        let want_tags = seal_all(&whole, &key, &aads, &mut want);
        let mut got = plain.clone();
        let tags = seal_all(&cut, &key, &aads, &mut got);
        prop_assert_eq!(&tags, &want_tags);
        prop_assert!(got == want, "ciphertext differs");
        let results = open_all(&cut, &key, &aads, &tags, &mut got);
        prop_assert!(results.iter().all(|r| r.is_ok()), "{:?}", results);
        prop_assert!(got == plain, "plaintext differs");
    }

    #[test]
    fn tampered_cut_gcm_fails_and_wipes_the_segment(
        len in 65_537usize..200_000,
        bit in any::<u32>(),
        which in 0u8..3,
        seed in any::<u64>(),
    ) {
        let key = Aes256Key::from_bytes([7; 32]);
        let (plain, aads) = segments(&[len, 1000], seed);
        let cut = CpuBackend::with_config(8, 4096);
        let mut data = plain.clone();
        let mut tags = seal_all(&cut, &key, &aads, &mut data);
        let mut aads = aads;
        match which {
            0 => { let i = bit as usize % (len * 8); data[0][i / 8] ^= 1 << (i % 8); }
            1 => { let i = bit as usize % 128; tags[0] = { let mut b = *tags[0].as_bytes(); b[i / 8] ^= 1 << (i % 8); Tag::from_bytes(b) }; }
            _ => aads[0].push(0),
        }
        let results = open_all(&cut, &key, &aads, &tags, &mut data);
        prop_assert_eq!(
            results[0].as_ref().map_err(|e| e.kind.clone()),
            Err(SegmentErrorKind::AuthenticationFailed)
        );
        prop_assert!(data[0].iter().all(|&x| x == 0), "no plaintext of a forgery survives");
        prop_assert!(results[1].is_ok());
        prop_assert!(data[1] == plain[1]);
    }
}

/// A segment above 1 MiB alone in its job (the store's large values): cut
/// on every thread, still the whole-segment result; NIST-style check that
/// an empty AAD and an AAD not a multiple of 16 both hold.
#[test]
fn one_large_segment_is_cut_and_equal() {
    let key = Aes256Key::from_bytes([0x5a; 32]);
    for (len, aad_len) in [
        ((1 << 20) + 17, 0usize),
        (3 << 20, 13),
        ((2 << 20) + 32, 32),
    ] {
        let (plain, aads) = segments(&[len], len as u64);
        let aads = vec![aads[0][..aad_len.min(aads[0].len())].to_vec()];
        let mut want = plain.clone();
        let want_tags = seal_all(&CpuBackend::with_threads(1), &key, &aads, &mut want);
        let cut = CpuBackend::with_config(4, 64 << 10);
        let mut got = plain.clone();
        assert_eq!(seal_all(&cut, &key, &aads, &mut got), want_tags, "{len}");
        assert!(got == want, "{len}: ciphertext differs");
        assert!(open_all(&cut, &key, &aads, &want_tags, &mut got)[0].is_ok());
        assert!(got == plain, "{len}: plaintext differs");
    }
}
