//! GPU hashing and chunking kernels bit for bit against their CPU twins.
//! Every test that needs a GPU is `#[ignore]`d, so a plain `cargo test`
//! reports it as ignored (not passed); scripts/gpu-check.sh runs this
//! binary on the GPU machine with `--include-ignored` and
//! `GVAULT_REQUIRE_GPU=1`, under which a missing GPU fails the test. The
//! CPU-twin tests here need no GPU and always run.

mod common;

use common::*;
use gvault_accel::gpu::{DeviceAllocation, GpuBackend};
use gvault_accel::CpuBackend;
use gvault_accel::*;
use std::sync::OnceLock;

fn gpu() -> Option<&'static GpuBackend> {
    static GPU: OnceLock<Result<GpuBackend, String>> = OnceLock::new();
    match GPU.get_or_init(GpuBackend::probe) {
        Ok(g) => Some(g),
        Err(why) => {
            assert!(
                std::env::var_os("GVAULT_REQUIRE_GPU").is_none(),
                "GVAULT_REQUIRE_GPU is set but no GPU can be used: {why}"
            );
            println!("SKIPPED: no GPU ({why})");
            eprintln!("SKIPPED: no GPU ({why})");
            None
        }
    }
}

const ODD: [usize; 10] = [0, 1, 63, 64, 65, 1023, 1024, 1025, 4095, (1 << 20) + 13];

/// Random, all-zero and short-period inputs of the given sizes.
fn inputs(sizes: &[usize], seed: u64) -> Vec<Vec<u8>> {
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| match i % 3 {
            0 => random_bytes(n, seed + i as u64),
            1 => vec![0u8; n],
            _ => (0..n).map(|k| (k % 7) as u8 * 31).collect(),
        })
        .collect()
}

fn mixed_sizes(n: usize, seed: u64, max: u32) -> Vec<usize> {
    let r = random_bytes(n * 4, seed);
    r.chunks(4)
        .map(|c| (u32::from_le_bytes(c.try_into().unwrap()) % max) as usize)
        .collect()
}

fn algos(key: &Blake3Key) -> Vec<DigestAlgo<'_>> {
    vec![
        DigestAlgo::Blake3,
        DigestAlgo::Blake3Keyed(key),
        DigestAlgo::Sha256,
        DigestAlgo::Md5,
        DigestAlgo::Crc32,
        DigestAlgo::Crc32c,
    ]
}

fn digest_job(b: &dyn Backend, algo: DigestAlgo<'_>, data: &[Vec<u8>]) -> Vec<SegmentResult> {
    let mut job = Job::Digest {
        algo,
        segments: data.iter().map(Data::from).collect(),
    };
    b.run(&mut job).expect("job runs")
}

fn digests_equal(gpu: &GpuBackend, data: &[Vec<u8>], what: &str) {
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes(*b"gvault gpu hash test key 32 byte");
    for algo in algos(&key) {
        let want = digest_job(&cpu, algo, data);
        let got = digest_job(gpu, algo, data);
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                w,
                g,
                "{} {what}: segment {i} of {} bytes differs",
                algo.op(),
                data[i].len()
            );
        }
        assert_eq!(want.len(), got.len());
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn digests_of_odd_sizes_random_and_repetitive() {
    let Some(g) = gpu() else { return };
    digests_equal(g, &inputs(&ODD, 1), "odd sizes");
    // Each size in each data kind.
    for rot in 1..3 {
        let mut sizes = ODD.to_vec();
        sizes.rotate_left(rot);
        digests_equal(g, &inputs(&sizes, 10 + rot as u64), "odd sizes, rotated");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn digests_of_thousands_of_mixed_segments() {
    let Some(g) = gpu() else { return };
    digests_equal(g, &inputs(&mixed_sizes(5000, 2, 20_000), 3), "5000 mixed");
    digests_equal(
        g,
        &inputs(&mixed_sizes(300, 4, 300_000), 5),
        "300 mixed up to 300 KB",
    );
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn digests_of_segments_larger_than_a_slot() {
    let Some(g) = gpu() else { return };
    // 200 MiB + 13 spans four staging slots: BLAKE3 chunk counters and the
    // carried SHA/MD5/CRC state must line up across them.
    let sizes = [(200 << 20) + 13, 7, (64 << 20) + 1024, 64 << 20];
    digests_equal(g, &inputs(&sizes, 6), "larger than a slot");
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn blake3_tree_shapes() {
    let Some(g) = gpu() else { return };
    // Chunk counts around the 16-to-1 reduction groups and powers of two.
    let sizes: Vec<usize> = [2, 3, 15, 16, 17, 31, 32, 33, 255, 256, 257, 4097]
        .iter()
        .flat_map(|&c| [c * 1024 - 1, c * 1024, c * 1024 + 1])
        .collect();
    digests_equal(g, &inputs(&sizes, 7), "tree shapes");
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn blake3_one_gib_segment() {
    let Some(g) = gpu() else { return };
    let data = vec![random_bytes((1 << 30) + 5, 8)];
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([1; 32]);
    for algo in [DigestAlgo::Blake3, DigestAlgo::Blake3Keyed(&key)] {
        assert_eq!(digest_job(&cpu, algo, &data), digest_job(g, algo, &data));
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn digests_of_device_resident_input() {
    let Some(g) = gpu() else { return };
    let sizes = [0usize, 1, 63, 1025, (1 << 20) + 13, 3 << 20];
    let data = inputs(&sizes, 9);
    // One allocation, segments at odd offsets in it (alignment 1 and 4 paths).
    let mut packed = Vec::new();
    let mut at = Vec::new();
    for d in &data {
        packed.extend_from_slice(&[0xAB; 3]);
        at.push(packed.len());
        packed.extend_from_slice(d);
    }
    let alloc = g.alloc_device(0, packed.len(), &packed).unwrap();
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([9; 32]);
    for algo in algos(&key) {
        let mut job = Job::Digest {
            algo,
            segments: at
                .iter()
                .zip(&data)
                .map(|(&o, d)| Data::Device(alloc.slice(o, d.len()).unwrap()))
                .collect(),
        };
        let got = g.run(&mut job).unwrap();
        let want = digest_job(&cpu, algo, &data);
        assert_eq!(want, got, "{} device-resident", algo.op());
    }
}

fn chunk_job(b: &dyn Backend, params: ChunkParams, segments: Vec<Data<'_>>) -> Vec<SegmentResult> {
    let mut job = Job::Chunk { params, segments };
    b.run(&mut job).expect("job runs")
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_boundaries_equal_fastcdc() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let mut real = Vec::new();
    for name in [
        "Cargo.toml",
        "src/lib.rs",
        "src/job.rs",
        "kernels/blake3.cu",
        "kernels/cdc.cu",
    ] {
        real.extend(std::fs::read(format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap());
    }
    while real.len() < (3 << 20) {
        real.extend_from_within(..real.len().min(1 << 20));
    }
    let mut data = inputs(&[5 << 20, 3 << 20, 2 << 20, 1025, 0, 70_001], 11);
    data.push(real);
    for p in [
        ChunkParams::new(64, 256, 1024, 3).unwrap(),
        ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
        ChunkParams::new(4096, 16384, 65536, 1).unwrap(),
        ChunkParams::DEFAULT,
    ] {
        let segs: Vec<Data<'_>> = data.iter().map(Data::from).collect();
        assert_eq!(
            chunk_job(&cpu, p, segs.clone()),
            chunk_job(g, p, segs),
            "{p:?}"
        );
    }
    // Device-resident input.
    let alloc = g.alloc_device(0, data[0].len(), &data[0]).unwrap();
    let p = ChunkParams::new(2048, 8192, 65536, 2).unwrap();
    assert_eq!(
        chunk_job(&cpu, p, vec![Data::from(&data[0])]),
        chunk_job(
            g,
            p,
            vec![Data::Device(alloc.slice(0, data[0].len()).unwrap())]
        )
    );
}

/// Segments that make walks from different starts disagree: long zero runs
/// (forced cuts at `max`, every junction fixed up serially), zeros between
/// random stretches, short periods, and odd sizes around min and max; many
/// segments in one job.
fn hard_segments(p: &ChunkParams, seed: u64) -> Vec<Vec<u8>> {
    let (min, max) = (p.min() as usize, p.max() as usize);
    let mut segs = inputs(
        &[
            0,
            1,
            min - 1,
            min,
            min + 1,
            max - 1,
            max,
            max + 1,
            40 * max + 3,
            40 * max + 5,
            40 * max + 7,
        ],
        seed,
    );
    let mut mix = Vec::new();
    for k in 0..24u64 {
        mix.extend(random_bytes(((k * 7919) % 5000) as usize + 1, seed + k));
        mix.resize(mix.len() + ((k * 104_729) % (5 * max as u64)) as usize, 0);
        mix.extend((0..3000).map(|i| b"ab"[i % 2]));
    }
    segs.push(mix);
    for n in mixed_sizes(300, seed, 3 * max as u32) {
        segs.push(random_bytes(n, seed + n as u64));
    }
    segs
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_boundaries_on_repetitive_data_and_many_segments() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([9; 32]);
    for p in [
        ChunkParams::new(64, 256, 1024, 3).unwrap(),
        ChunkParams::new(64, 256, 1024, 0).unwrap(),
        ChunkParams::new(65, 300, 1025, 1).unwrap(),
        ChunkParams::new(4096, 4096, 4096, 0).unwrap(),
        ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
    ] {
        let data = hard_segments(&p, 51);
        let segs: Vec<Data<'_>> = data.iter().map(Data::from).collect();
        assert_eq!(
            chunk_job(&cpu, p, segs.clone()),
            chunk_job(g, p, segs.clone()),
            "{p:?} chunk"
        );
        assert_eq!(
            chunk_digest_job(&cpu, p, &key, segs.clone()),
            chunk_digest_job(g, p, &key, segs),
            "{p:?} fused"
        );
        // The same bytes device-resident, at odd offsets of one allocation.
        let mut packed = Vec::new();
        let mut at = Vec::new();
        for d in &data {
            packed.push(0xCD);
            at.push(packed.len());
            packed.extend_from_slice(d);
        }
        let alloc = g.alloc_device(0, packed.len(), &packed).unwrap();
        let dev: Vec<Data<'_>> = at
            .iter()
            .zip(&data)
            .map(|(&o, d)| Data::Device(alloc.slice(o, d.len()).unwrap()))
            .collect();
        assert_eq!(
            chunk_job(&cpu, p, data.iter().map(Data::from).collect()),
            chunk_job(g, p, dev.clone()),
            "{p:?} chunk, device-resident"
        );
        assert_eq!(
            chunk_digest_job(&cpu, p, &key, data.iter().map(Data::from).collect()),
            chunk_digest_job(g, p, &key, dev),
            "{p:?} fused, device-resident"
        );
    }
}

fn chunk_digest_job(
    b: &dyn Backend,
    params: ChunkParams,
    key: &Blake3Key,
    segments: Vec<Data<'_>>,
) -> Vec<SegmentResult> {
    chunk_digest_crc_job(b, params, key, false, segments)
}

fn chunk_digest_crc_job(
    b: &dyn Backend,
    params: ChunkParams,
    key: &Blake3Key,
    crc32c: bool,
    segments: Vec<Data<'_>>,
) -> Vec<SegmentResult> {
    let mut job = Job::ChunkDigest {
        params,
        key,
        crc32c,
        segments,
    };
    b.run(&mut job).expect("job runs")
}

/// Every chunk of a fused job's result carries a CRC-32C exactly when asked,
/// and it is the chunk's own (checked against the crc32c crate directly,
/// not only against the CPU backend).
fn assert_crcs(results: &[SegmentResult], data: &[&[u8]], asked: bool) {
    assert_eq!(results.len(), data.len());
    for (s, (r, bytes)) in results.iter().zip(data).enumerate() {
        for c in r.as_ref().unwrap().digested_chunks().unwrap() {
            let chunk = &bytes[c.span.offset as usize..][..c.span.len as usize];
            let want = asked.then(|| crc32c::crc32c(chunk));
            assert_eq!(c.crc32c, want, "segment {s} chunk at {}", c.span.offset);
        }
    }
}

/// The repository's own sources, concatenated and repeated to `len` bytes.
fn real_data(len: usize) -> Vec<u8> {
    let mut real = Vec::new();
    for name in [
        "Cargo.toml",
        "src/lib.rs",
        "src/job.rs",
        "src/cdc_resolve.rs",
        "kernels/blake3.cu",
        "kernels/cdc.cu",
        "kernels/README.md",
    ] {
        real.extend(std::fs::read(format!("{}/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap());
    }
    while real.len() < len {
        real.extend_from_within(..real.len().min(1 << 20));
    }
    real.truncate(len);
    real
}

#[test]
fn chunk_digest_cpu_twin_equals_chunk_then_keyed_digest() {
    // Runs without a GPU: the fused CPU job is the Chunk job's spans with
    // each span's keyed BLAKE3 from a Digest job.
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes(*b"fused chunk digest test key 32 b");
    let mut data = inputs(&[0, 100, 70_001, 3 << 20], 21);
    data.push(real_data(2 << 20));
    let p = ChunkParams::new(2048, 8192, 65536, 2).unwrap();
    let fused = chunk_digest_job(&cpu, p, &key, data.iter().map(Data::from).collect());
    let spans = chunk_job(&cpu, p, data.iter().map(Data::from).collect());
    for (s, (f, c)) in fused.iter().zip(&spans).enumerate() {
        let f = f.as_ref().unwrap().digested_chunks().unwrap();
        let c = c.as_ref().unwrap().chunks().unwrap();
        assert_eq!(f.iter().map(|d| d.span).collect::<Vec<_>>(), c);
        let pieces: Vec<Vec<u8>> = c
            .iter()
            .map(|sp| data[s][sp.offset as usize..][..sp.len as usize].to_vec())
            .collect();
        let want = digest_job(&cpu, DigestAlgo::Blake3Keyed(&key), &pieces);
        for (d, w) in f.iter().zip(want) {
            assert_eq!(Digest::B256(d.digest), w.unwrap().digest().unwrap());
        }
        if data[s].len() > 65536 {
            assert!(f.len() > 1, "segment {s} has several chunks");
        }
    }
    assert_eq!(fused.len(), data.len());
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_digest_equals_cpu_twin() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes(*b"fused chunk digest test key 32 b");
    let mut data = inputs(&[5 << 20, 3 << 20, 2 << 20, 1025, 0, 70_001, 1, 64], 31);
    data.push(real_data(3 << 20));
    for p in [
        ChunkParams::new(64, 256, 1024, 3).unwrap(),
        ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
        ChunkParams::new(4096, 16384, 65536, 1).unwrap(),
        ChunkParams::DEFAULT,
    ] {
        let segs: Vec<Data<'_>> = data.iter().map(Data::from).collect();
        let want = chunk_digest_job(&cpu, p, &key, segs.clone());
        let got = chunk_digest_job(g, p, &key, segs);
        assert_eq!(want, got, "{p:?}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_digest_larger_than_a_slot_and_device_resident() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([5; 32]);
    // 150 MiB crosses three staging slots; chunks straddle their edges.
    let data = [random_bytes((150 << 20) + 7, 41), real_data(9 << 20)];
    for p in [
        ChunkParams::new(4096, 16384, 65536, 1).unwrap(),
        ChunkParams::DEFAULT,
    ] {
        let segs: Vec<Data<'_>> = data.iter().map(Data::from).collect();
        assert_eq!(
            chunk_digest_job(&cpu, p, &key, segs.clone()),
            chunk_digest_job(g, p, &key, segs),
            "{p:?} host"
        );
    }
    // Device-resident: segments at odd offsets of one allocation, so chunk
    // reads and the walks' head loads are misaligned.
    let sizes = [0usize, 1, 5000, (3 << 20) + 13, 8 << 20];
    let mut segs = inputs(&sizes, 42);
    segs.push(real_data(4 << 20));
    let mut packed = Vec::new();
    let mut at = Vec::new();
    for d in &segs {
        packed.extend_from_slice(&[0xCD; 3]);
        at.push(packed.len());
        packed.extend_from_slice(d);
    }
    let alloc = g.alloc_device(0, packed.len(), &packed).unwrap();
    for p in [
        ChunkParams::new(64, 256, 1024, 3).unwrap(),
        ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
        ChunkParams::new(65536, 262144, 1 << 20, 1).unwrap(),
    ] {
        let dev: Vec<Data<'_>> = at
            .iter()
            .zip(&segs)
            .map(|(&o, d)| Data::Device(alloc.slice(o, d.len()).unwrap()))
            .collect();
        assert_eq!(
            chunk_digest_job(&cpu, p, &key, segs.iter().map(Data::from).collect()),
            chunk_digest_job(g, p, &key, dev),
            "{p:?} device-resident"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn seed001_pmd_digest_equals_cpu() {
    use gvault_accel::seed001::{pmd_digest, PmdHash};
    let Some(g) = gpu() else { return };
    let data = random_bytes((70 << 20) + 13, 51);
    let text = real_data(3 << 20);
    for hash in [PmdHash::Md5, PmdHash::Sha256] {
        for block in [1u32, 64, 4096, 1000, 1 << 20] {
            for d in [&data[..(1 << 20) + 5], &text[..], &data[..0], &data[..100]] {
                let want = pmd_digest(hash, block, d).unwrap();
                assert_eq!(want, g.pmd_digest(hash, block, Data::Host(d)).unwrap());
            }
        }
        // Larger than a staging slot, and device-resident at an odd offset.
        let want = pmd_digest(hash, 4096, &data).unwrap();
        assert_eq!(want, g.pmd_digest(hash, 4096, Data::Host(&data)).unwrap());
        let resident = g.alloc_device(0, data.len(), &data).unwrap();
        let slice = resident.slice(0, data.len()).unwrap();
        assert_eq!(want, g.pmd_digest(hash, 4096, Data::Device(slice)).unwrap());
        let odd = resident.slice(3, data.len() - 3).unwrap();
        assert_eq!(
            pmd_digest(hash, 4096, &data[3..]).unwrap(),
            g.pmd_digest(hash, 4096, Data::Device(odd)).unwrap()
        );
    }
    assert!(g.pmd_digest(PmdHash::Md5, 0, Data::Host(&data)).is_err());
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn seed001_sliding_windows_equal_cpu() {
    use gvault_accel::seed001::{window_matches, window_md5, WindowParams};
    let Some(g) = gpu() else { return };
    let period: Vec<u8> = (0..(3 << 20) as u32).map(|k| (k % 36) as u8).collect();
    let data = [random_bytes((66 << 20) + 9, 52), period, real_data(1 << 20)];
    for params in [
        WindowParams::SEED,
        WindowParams::new(1, 1).unwrap(),
        WindowParams::new(55, 3).unwrap(),
        WindowParams::new(64, 64).unwrap(),
        WindowParams::new(200, 7).unwrap(),
    ] {
        for d in &data {
            let mut patterns: Vec<[u8; 16]> = [0usize, 4, 36, 1000, 1 << 19]
                .iter()
                .filter_map(|&o| window_md5(&params, d, o))
                .collect();
            patterns.push([0xAB; 16]);
            let want = window_matches(&params, d, &patterns);
            let got = g.window_matches(&params, Data::Host(d), &patterns).unwrap();
            assert_eq!(want, got, "{params:?}, {} bytes", d.len());
        }
    }
    // Device-resident, more matches than the first launch stores (1 << 16):
    // a period of 36 with step 4 repeats every 9 windows.
    let d = &data[1];
    let alloc = g.alloc_device(0, d.len(), d).unwrap();
    let p = WindowParams::SEED;
    let patterns = [window_md5(&p, d, 0).unwrap()];
    let want = window_matches(&p, d, &patterns);
    assert!(want.len() > 1 << 16, "{} matches", want.len());
    let got = g
        .window_matches(
            &p,
            Data::Device(alloc.slice(0, d.len()).unwrap()),
            &patterns,
        )
        .unwrap();
    assert_eq!(want, got);
}

#[test]
fn chunk_digest_crc32c_cpu_twin() {
    // Runs without a GPU: the CPU twin's CRCs are the crc32c crate's, and
    // asking for them changes nothing else.
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([11; 32]);
    let mut data = inputs(&[0, 1, 1025, 70_001, 3 << 20], 51);
    data.push(real_data(1 << 20));
    let slices: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let p = ChunkParams::new(2048, 8192, 65536, 2).unwrap();
    let segs = || data.iter().map(Data::from).collect::<Vec<_>>();
    let with = chunk_digest_crc_job(&cpu, p, &key, true, segs());
    let without = chunk_digest_crc_job(&cpu, p, &key, false, segs());
    assert_crcs(&with, &slices, true);
    assert_crcs(&without, &slices, false);
    for (w, o) in with.iter().zip(&without) {
        let (w, o) = (w.as_ref().unwrap(), o.as_ref().unwrap());
        let strip: Vec<_> = w
            .digested_chunks()
            .unwrap()
            .iter()
            .map(|c| (c.span, c.digest))
            .collect();
        let plain: Vec<_> = o
            .digested_chunks()
            .unwrap()
            .iter()
            .map(|c| (c.span, c.digest))
            .collect();
        assert_eq!(strip, plain);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_digest_crc32c_equals_cpu_twin() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes(*b"fused chunk digest crc32c key 32");
    // Random, zero and periodic data; sizes around the 1 KiB, 16 KiB and
    // 256 KiB tree levels; many segments.
    let mut sizes = vec![
        0,
        1,
        63,
        64,
        1023,
        1024,
        1025,
        16 << 10,
        (16 << 10) + 1,
        (256 << 10) + 3,
        (5 << 20) + 17,
    ];
    sizes.extend(mixed_sizes(200, 61, 200_000));
    let mut data = inputs(&sizes, 62);
    data.push(real_data(3 << 20));
    let slices: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    for p in [
        ChunkParams::new(64, 256, 1024, 3).unwrap(),
        ChunkParams::new(2048, 8192, 65536, 2).unwrap(),
        ChunkParams::DEFAULT,
    ] {
        let segs: Vec<Data<'_>> = data.iter().map(Data::from).collect();
        let want = chunk_digest_crc_job(&cpu, p, &key, true, segs.clone());
        let got = chunk_digest_crc_job(g, p, &key, true, segs.clone());
        assert_crcs(&got, &slices, true);
        assert_eq!(want, got, "{p:?} with CRC-32C");
        // The plain path is untouched by the CRC variant.
        assert_eq!(
            chunk_digest_crc_job(&cpu, p, &key, false, segs.clone()),
            chunk_digest_crc_job(g, p, &key, false, segs),
            "{p:?} without CRC-32C"
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_digest_crc32c_device_resident() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([13; 32]);
    // Segments at odd offsets of one allocation: every chunk starts at an
    // arbitrary byte, so the 16-byte reader's shifts all occur.
    let mut sizes = vec![0usize, 1, 5000, (3 << 20) + 13, 9 << 20];
    sizes.extend(mixed_sizes(40, 71, 300_000));
    let mut data = inputs(&sizes, 72);
    data.push(real_data(4 << 20));
    let (alloc, at) = place_at_odd_offsets(g, &data, 0xA7, 15);
    let slices: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    for p in [
        ChunkParams::new(4096, 16384, 65536, 1).unwrap(),
        ChunkParams::DEFAULT,
    ] {
        let dev = device_views(&alloc, &at, &data);
        let got = chunk_digest_crc_job(g, p, &key, true, dev);
        assert_crcs(&got, &slices, true);
        assert_eq!(
            chunk_digest_crc_job(&cpu, p, &key, true, data.iter().map(Data::from).collect()),
            got,
            "{p:?} device-resident"
        );
    }
}

/// `data` copied into one device allocation, each input after 1..=`gap`
/// bytes of `fill`, so inputs start at arbitrary offsets; returns the
/// allocation and each input's offset.
fn place_at_odd_offsets(
    g: &GpuBackend,
    data: &[Vec<u8>],
    fill: u8,
    gap: usize,
) -> (DeviceAllocation, Vec<usize>) {
    let mut packed = Vec::new();
    let mut at = Vec::new();
    for (i, d) in data.iter().enumerate() {
        packed.extend(std::iter::repeat_n(fill, 1 + i % gap));
        at.push(packed.len());
        packed.extend_from_slice(d);
    }
    (g.alloc_device(0, packed.len(), &packed).unwrap(), at)
}

/// The inputs placed by [`place_at_odd_offsets`], as job data.
fn device_views<'a>(alloc: &'a DeviceAllocation, at: &[usize], data: &[Vec<u8>]) -> Vec<Data<'a>> {
    at.iter()
        .zip(data)
        .map(|(&o, d)| Data::Device(alloc.slice(o, d.len()).unwrap()))
        .collect()
}

/// The CRC-32C table scheme under test (`GVAULT_B3_CRC`: slice8, rep2 or
/// rep4; unset: the device's default). scripts/gpu-check.sh runs the CRC
/// tests once per scheme.
fn crc_scheme() -> String {
    std::env::var("GVAULT_B3_CRC").unwrap_or_else(|_| "default".into())
}

/// More 1 KiB BLAKE3 chunks in one launch than a resident wave of threads
/// (132 SMs x 1024 on an H100 or H200): the replicated-table schemes run one
/// wave whose grid-stride loop must go round several times, with each
/// block's tables built once. Random, zero and periodic data, device-resident
/// at odd offsets; small content-defined chunks, so many end mid-KiB.
#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_digest_crc32c_over_several_waves() {
    let Some(g) = gpu() else { return };
    println!("GVAULT_B3_CRC={}", crc_scheme());
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([29; 32]);
    let mut sizes = vec![(200 << 20) + 3, (60 << 20) + 1001, 1, 0];
    sizes.extend(mixed_sizes(300, 81, 5000));
    let data = inputs(&sizes, 82);
    let (alloc, at) = place_at_odd_offsets(g, &data, 0x3C, 13);
    let slices: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let p = ChunkParams::new(1024, 4096, 16384, 2).unwrap();
    let dev = device_views(&alloc, &at, &data);
    let got = chunk_digest_crc_job(g, p, &key, true, dev);
    assert_crcs(&got, &slices, true);
    assert_eq!(
        chunk_digest_crc_job(&cpu, p, &key, true, data.iter().map(Data::from).collect()),
        got,
        "GVAULT_B3_CRC={}",
        crc_scheme()
    );
}

/// `gear_candidates` reads 32-byte-aligned blocks and funnel-shifts the hit
/// words by the input's misalignment: one device-resident buffer chunked at
/// every offset 0..32, with parameters whose boundaries depend on most
/// candidate positions (small chunks), on the filtered fast path (11 filter
/// bits at 4 KiB) and on the exact path (tiny masks); several segments per
/// job so the bitmaps of later segments are not 16-byte aligned.
#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_boundaries_device_resident_at_every_alignment() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let mut packed = vec![0xCDu8; 64];
    packed.extend(random_bytes((1 << 20) + 77, 91));
    packed.extend(vec![0u8; 40_000]);
    packed.extend((0..300_000).map(|k| (k % 13) as u8 * 19));
    packed.extend(real_data(700_000));
    let alloc = g.alloc_device(0, packed.len(), &packed).unwrap();
    let len = packed.len() - 64;
    for p in [
        ChunkParams::new(1024, 4096, 16384, 1).unwrap(),
        ChunkParams::new(64, 256, 1024, 3).unwrap(),
    ] {
        for off in 0..32 {
            // Three segments: the whole span, an odd-sized middle piece
            // and a short tail, all from the same bytes.
            let cuts = [(off, len), (off + 1001, 513_337), (off + 5, 3_000)];
            let host: Vec<Data<'_>> = cuts
                .iter()
                .map(|&(o, n)| Data::from(&packed[o..o + n]))
                .collect();
            let dev: Vec<Data<'_>> = cuts
                .iter()
                .map(|&(o, n)| Data::Device(alloc.slice(o, n).unwrap()))
                .collect();
            assert_eq!(
                chunk_job(&cpu, p, host),
                chunk_job(g, p, dev),
                "{p:?} offset {off}"
            );
        }
    }
}

/// The chunk list the device builds (`GVAULT_FUSED_DESC=device`, the
/// default; `scripts/gpu-check.sh` runs it again with `host`): thousands of
/// segments under `min` (one chunk each, many in one section list), 0-byte
/// segments between them, and zeros cut at `max` = 8 MiB, whose BLAKE3 tree
/// needs four reduce levels, device-resident at odd offsets, with and
/// without CRC-32C.
#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn chunk_digest_device_list_many_tiny_and_max_chunks() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Blake3Key::from_bytes([29; 32]);
    let mut sizes: Vec<usize> = (0..3000).map(|i| [0, 1, 17, 1024, 4095][i % 5]).collect();
    sizes.extend([(8 << 20) + 1, 17 << 20]);
    let mut data = inputs(&sizes, 91);
    data.push(vec![0u8; 20 << 20]);
    data.push(Vec::new());
    let (alloc, at) = place_at_odd_offsets(g, &data, 0x5C, 7);
    let slices: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    for crc in [false, true] {
        let p = ChunkParams::DEFAULT;
        let want = chunk_digest_crc_job(&cpu, p, &key, crc, data.iter().map(Data::from).collect());
        let got = chunk_digest_crc_job(g, p, &key, crc, device_views(&alloc, &at, &data));
        assert_crcs(&got, &slices, crc);
        assert_eq!(want, got, "device-resident, crc {crc}");
        let host = chunk_digest_crc_job(g, p, &key, crc, data.iter().map(Data::from).collect());
        assert_eq!(want, host, "host data, crc {crc}");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn crcs_of_a_few_large_page_locked_segments_are_cut_and_combined() {
    let Some(g) = gpu() else { return };
    // A few long segments (cut into pieces on the GPU, their CRCs combined
    // on the host), from page-locked memory, next to short ones.
    let sizes = [(16 << 20) + 3, 1, (16 << 20) - 4096, 0, (5 << 20) + 17];
    let data = inputs(&sizes, 11);
    let total: usize = sizes.iter().sum();
    let mut pinned = g.alloc_pinned(total).unwrap();
    let mut at = 0;
    for d in &data {
        pinned[at..at + d.len()].copy_from_slice(d);
        at += d.len();
    }
    let cpu = CpuBackend::new();
    for algo in [DigestAlgo::Crc32, DigestAlgo::Crc32c] {
        let mut rest: &[u8] = &pinned;
        let mut segments = Vec::new();
        for &n in &sizes {
            let (seg, tail) = rest.split_at(n);
            segments.push(Data::from(seg));
            rest = tail;
        }
        let mut job = Job::Digest { algo, segments };
        let got = g.run(&mut job).unwrap();
        assert_eq!(got, digest_job(&cpu, algo, &data), "{} pinned", algo.op());
    }
}
