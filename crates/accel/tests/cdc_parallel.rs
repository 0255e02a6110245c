//! Chunking one large segment on several threads (candidates of pieces in
//! parallel, then the crate's size rules in order) gives exactly the
//! boundaries of `fastcdc::v2020`, and the fused job the same chunks and
//! digests as one thread. The backends here cut at tiny split sizes so that
//! pieces are short and many chunks cross piece edges; segments are over
//! 64 KiB so that the job is not run inline on the caller (serially).

mod common;

use common::*;
use gvault_accel::*;
use proptest::prelude::*;

fn crate_chunks(p: &ChunkParams, data: &[u8]) -> Vec<ChunkSpan> {
    let level = match p.level() {
        0 => fastcdc::v2020::Normalization::Level0,
        1 => fastcdc::v2020::Normalization::Level1,
        2 => fastcdc::v2020::Normalization::Level2,
        _ => fastcdc::v2020::Normalization::Level3,
    };
    fastcdc::v2020::FastCDC::with_level(data, p.min(), p.avg(), p.max(), level)
        .map(|c| ChunkSpan {
            offset: c.offset as u64,
            len: c.length as u32,
        })
        .collect()
}

fn fused(
    b: &CpuBackend,
    p: ChunkParams,
    key: &Blake3Key,
    segments: &[&[u8]],
) -> Vec<SegmentResult> {
    let mut job = Job::ChunkDigest {
        params: p,
        key,
        crc32c: true,
        segments: segments.iter().map(|s| Data::from(*s)).collect(),
    };
    b.run(&mut job).expect("job runs")
}

/// Data of one of several kinds: random, all zeros, short periods, random
/// blocks repeated (chunks that repeat), text.
fn data_of(kind: u8, len: usize, seed: u64) -> Vec<u8> {
    match kind % 5 {
        0 => random_bytes(len, seed),
        1 => vec![0u8; len],
        2 => (0..len)
            .map(|k| (k % (3 + seed as usize % 61)) as u8)
            .collect(),
        3 => {
            let block = random_bytes(1000 + seed as usize % 9000, seed);
            block.iter().copied().cycle().take(len).collect()
        }
        _ => include_bytes!("cdc_parallel.rs")
            .iter()
            .copied()
            .cycle()
            .take(len)
            .collect(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn one_segment_on_two_threads_matches_fastcdc(
        min in 64u32..3000,
        avg_extra in 0u32..6000,
        max_extra in 0u32..20_000,
        level in 0u8..4,
        len in 65_537usize..400_000,
        split in prop::sample::select(vec![64usize, 65, 100, 1000, 4096, 65_536]),
        kind in 0u8..5,
        seed in any::<u64>(),
    ) {
        let avg = (min + avg_extra).max(256);
        let p = ChunkParams::new(min, avg, avg + max_extra.max(1024), level).unwrap();
        let data = data_of(kind, len, seed);
        let b = CpuBackend::with_config(2, split);
        prop_assert_eq!(chunks(&b, p, &data), crate_chunks(&p, &data));
    }
}

/// Sizes around the chunk sizes and the split sizes, and the smallest
/// segments (run inline, serially), on two threads.
#[test]
fn sizes_around_the_edges_match_fastcdc() {
    let random = random_bytes(300_000, 5);
    for p in [
        ChunkParams::new(64, 256, 1024, 1).unwrap(),
        ChunkParams::new(2048, 8192, 65_536, 2).unwrap(),
        ChunkParams::new(16_384, 65_536, 262_144, 1).unwrap(),
    ] {
        for split in [64usize, 4096, 1 << 20] {
            let b = CpuBackend::with_config(2, split);
            let mut lens = vec![0, 1, 63, 64, 65, 65_536, 65_537, 300_000];
            for s in [p.min(), p.avg(), p.max(), split as u32] {
                let s = s as usize + 65_536;
                lens.extend([s - 1, s, s + 1]);
            }
            for len in lens.into_iter().filter(|&l| l <= random.len()) {
                let d = &random[..len];
                assert_eq!(
                    chunks(&b, p, d),
                    crate_chunks(&p, d),
                    "{p:?}, {len} B, split {split}"
                );
            }
        }
    }
}

/// The default sizes over one 24 MiB segment: many pieces per thread.
#[test]
fn default_sizes_over_a_large_segment_match_fastcdc() {
    let data = random_bytes(24 << 20, 9);
    let p = ChunkParams::DEFAULT;
    let want = crate_chunks(&p, &data);
    assert!(want.len() > 10);
    assert_eq!(chunks(&CpuBackend::with_threads(2), p, &data), want);
    assert_eq!(chunks(&CpuBackend::with_config(4, 100_003), p, &data), want);
    // The fused job hashes these large chunks as subtrees on the pool.
    let key = Blake3Key::from_bytes([5; 32]);
    let res = fused(&CpuBackend::with_threads(2), p, &key, &[&data]);
    let Ok(Output::DigestedChunks(c)) = &res[0] else {
        panic!("not digested chunks: {res:?}")
    };
    assert_eq!(c.iter().map(|d| d.span).collect::<Vec<_>>(), want);
    for d in c {
        let bytes = &data[d.span.offset as usize..][..d.span.len as usize];
        assert_eq!(d.digest, *blake3::keyed_hash(&[5; 32], bytes).as_bytes());
        assert_eq!(d.crc32c, Some(crc32c::crc32c(bytes)));
    }
}

/// The fused job on several threads: the same chunks as the crate, each
/// with its own keyed BLAKE3 and CRC-32C, the same as on one thread.
#[test]
fn fused_job_on_several_threads_equals_one_thread() {
    let key = Blake3Key::from_bytes([4; 32]);
    let p = ChunkParams::new(1024, 4096, 16_384, 1).unwrap();
    let a = data_of(0, 3 << 20, 1);
    let z = data_of(1, 200_000, 2);
    let r = data_of(3, 1 << 20, 3);
    for segments in [
        vec![&a[..]],
        vec![&a[..], &z[..]],
        vec![&r[..], &z[..], &a[..]],
    ] {
        let one = fused(&CpuBackend::with_threads(1), p, &key, &segments);
        let many = fused(&CpuBackend::with_config(4, 1000), p, &key, &segments);
        assert_eq!(many, one);
        for (seg, res) in segments.iter().zip(&many) {
            let Ok(Output::DigestedChunks(c)) = res else {
                panic!("not digested chunks: {res:?}")
            };
            let spans: Vec<ChunkSpan> = c.iter().map(|d| d.span).collect();
            assert_eq!(spans, crate_chunks(&p, seg));
            for d in c {
                let bytes = &seg[d.span.offset as usize..][..d.span.len as usize];
                assert_eq!(d.digest, *blake3::keyed_hash(&[4; 32], bytes).as_bytes());
                assert_eq!(d.crc32c, Some(crc32c::crc32c(bytes)));
            }
        }
    }
}
