//! GPU kernels bit for bit against their CPU twins. Every test that needs a
//! GPU is `#[ignore]`d, so a plain `cargo test` reports it as ignored (not
//! passed); scripts/gpu-check.sh runs these binaries on the GPU machine
//! with `--include-ignored` and `GVAULT_REQUIRE_GPU=1`, under which a
//! missing GPU fails the test. Run with `--include-ignored` alone on a
//! machine without one, a test prints SKIPPED and passes.

mod common;

use common::*;
use gvault_accel::CpuBackend;
use gvault_accel::GpuBackend;
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
            println!("SKIPPED (no GPU): {why}");
            eprintln!("SKIPPED (no GPU): {why}");
            None
        }
    }
}

const AWKWARD: [usize; 8] = [0, 1, 15, 16, 17, 4095, (1 << 20) + 13, 3 * (1 << 20) + 5];

fn mixed_sizes(n: usize, seed: u64) -> Vec<usize> {
    let r = random_bytes(n * 4, seed);
    r.chunks(4)
        .map(|c| (u32::from_le_bytes(c.try_into().unwrap()) % 20_000) as usize)
        .collect()
}

/// Runs one CTR job on both backends over the same inputs and IVs.
fn ctr_equal(gpu: &GpuBackend, cipher: CtrCipher<'_>, sizes: &[usize], seed: u64) {
    let cpu = CpuBackend::new();
    let inputs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| random_bytes(n, seed + i as u64))
        .collect();
    let iv_for = |i: usize| -> CtrIv {
        let r = random_bytes(16, seed ^ (i as u64 * 7919));
        match cipher.iv_len() {
            16 => {
                // Every fourth counter sits just below a 2^64 / 2^128 carry.
                let mut b: [u8; 16] = r.try_into().unwrap();
                if i.is_multiple_of(4) {
                    b[8..].copy_from_slice(&(u64::MAX - 2).to_be_bytes());
                }
                if i.is_multiple_of(8) {
                    b = [0xff; 16];
                }
                CtrIv::B128(Iv128::from_bytes(b))
            }
            _ => {
                let mut b: [u8; 8] = r[..8].try_into().unwrap();
                if i.is_multiple_of(4) {
                    b = (u64::MAX - 1).to_be_bytes();
                }
                CtrIv::B64(Iv64::from_bytes(b))
            }
        }
    };
    let run = |b: &dyn Backend| {
        let mut bufs = inputs.clone();
        let mut job = Job::Ctr {
            cipher,
            segments: bufs
                .iter_mut()
                .enumerate()
                .map(|(i, d)| CtrSegment {
                    iv: iv_for(i),
                    data: d.into(),
                })
                .collect(),
        };
        let res = b.run(&mut job).expect("job runs");
        drop(job);
        (res, bufs)
    };
    let (rc, bc) = run(&cpu);
    let (rg, bg) = run(gpu);
    assert_eq!(rc, rg);
    for (i, (c, g)) in bc.iter().zip(&bg).enumerate() {
        assert!(
            c == g,
            "{}: segment {i} of {} bytes differs",
            cipher.op(),
            c.len()
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn aes_ctr_awkward_sizes_and_many_mixed_segments() {
    let Some(g) = gpu() else { return };
    let key = Aes256Key::from_bytes([0x42; 32]);
    ctr_equal(g, CtrCipher::Aes256(&key), &AWKWARD, 1);
    ctr_equal(g, CtrCipher::Aes256(&key), &mixed_sizes(5000, 2), 3);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn tea_ctr_awkward_sizes_and_many_mixed_segments() {
    let Some(g) = gpu() else { return };
    let key = TeaKey::from_bytes([0x17; 16]);
    let mut probe = [0u8; 8];
    let mut job = Job::Ctr {
        cipher: CtrCipher::Tea(&key),
        segments: vec![CtrSegment {
            iv: CtrIv::B64(Iv64::from_bytes([0; 8])),
            data: (&mut probe[..]).into(),
        }],
    };
    if let Err(BackendError::Unsupported { .. }) = g.run(&mut job) {
        println!("SKIPPED: tea_ctr kernel not in this build");
        return;
    }
    drop(job);
    ctr_equal(g, CtrCipher::Tea(&key), &AWKWARD, 4);
    ctr_equal(g, CtrCipher::Tea(&key), &mixed_sizes(3000, 5), 6);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn job_larger_than_both_slots_pipelines_over_two_streams() {
    let Some(g) = gpu() else { return };
    let key = Aes256Key::from_bytes([0x99; 32]);
    // 200 MiB + 13 is cut into four pieces; with the small ones the job
    // spans several slot fills on alternating streams.
    let sizes = [(200 << 20) + 13, 40 << 20, 7, 70 << 20];
    ctr_equal(g, CtrCipher::Aes256(&key), &sizes, 7);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn device_resident_input_needs_no_host_round_trip() {
    let Some(g) = gpu() else { return };
    use cudarc::driver::{CudaContext, DevicePtr};
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let key = Aes256Key::from_bytes([5; 32]);
    let sizes = [1usize << 20, 17, 4096 * 3 + 5];
    let inputs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| random_bytes(n, 50 + i as u64))
        .collect();
    let dev: Vec<_> = inputs
        .iter()
        .map(|v| stream.clone_htod(v).unwrap())
        .collect();
    stream.synchronize().unwrap();
    let iv = CtrIv::B128(Iv128::from_bytes([3; 16]));
    let mut job = Job::Ctr {
        cipher: CtrCipher::Aes256(&key),
        segments: dev
            .iter()
            .map(|d| {
                let (ptr, _sync) = d.device_ptr(&stream);
                // SAFETY: `d` is a live device allocation of d.len() bytes on device 0.
                CtrSegment {
                    iv,
                    data: DataMut::Device(unsafe { DeviceSlice::new(0, ptr, d.len()) }),
                }
            })
            .collect(),
    };
    let res = g.run(&mut job).unwrap();
    assert!(res.iter().all(|r| r.is_ok()), "{res:?}");
    let cpu = CpuBackend::new();
    for (input, d) in inputs.iter().zip(&dev) {
        let got = stream.clone_dtoh(d).unwrap();
        let mut want = input.clone();
        ctr(&cpu, CtrCipher::Aes256(&key), iv, &mut want).unwrap();
        assert!(
            got == want,
            "device-resident segment of {} bytes differs",
            input.len()
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn rsa_jobs_run_on_the_gpu() {
    // Every op runs on the GPU now; tests/rsa_gpu.rs covers RSA in depth.
    let Some(g) = gpu() else { return };
    let key = RsaPrivateKey::from_pem(include_str!("data/rsa1024.pem")).unwrap();
    let input = vec![1u8; key.size()];
    let mut job = Job::RsaPrivate {
        key: &key,
        segments: vec![&input[..]],
    };
    let want = CpuBackend::new().run(&mut job).unwrap();
    assert_eq!(g.run(&mut job).unwrap(), want);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn blowfish_ctr_awkward_sizes_and_many_mixed_segments() {
    let Some(g) = gpu() else { return };
    for len in [4usize, 16, 56] {
        let key = BlowfishKey::try_from_slice(&random_bytes(len, len as u64)).unwrap();
        ctr_equal(g, CtrCipher::Blowfish(&key), &AWKWARD, 8);
        ctr_equal(g, CtrCipher::Blowfish(&key), &mixed_sizes(2000, 9), 10);
    }
}

/// Inputs of a GCM test job: plaintexts, nonces, AADs of varied lengths.
struct GcmCase {
    plain: Vec<Vec<u8>>,
    nonces: Vec<Nonce96>,
    aads: Vec<Vec<u8>>,
}

impl GcmCase {
    fn new(sizes: &[usize], seed: u64) -> GcmCase {
        let plain = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| random_bytes(n, seed + i as u64))
            .collect();
        let nonces = (0..sizes.len())
            .map(|i| Nonce96::from_parts(seed, i as u32))
            .collect();
        let aads = (0..sizes.len())
            .map(|i| random_bytes((i * 7) % 41, seed ^ i as u64))
            .collect();
        GcmCase {
            plain,
            nonces,
            aads,
        }
    }

    fn seal(&self, b: &dyn Backend, key: &Aes256Key) -> (Vec<Vec<u8>>, Vec<Tag>) {
        let mut bufs = self.plain.clone();
        let mut job = Job::Seal {
            key,
            segments: bufs
                .iter_mut()
                .enumerate()
                .map(|(i, d)| SealSegment {
                    nonce: self.nonces[i],
                    aad: &self.aads[i],
                    data: d.into(),
                })
                .collect(),
        };
        let res = b.run(&mut job).expect("seal job runs");
        drop(job);
        let tags = res
            .into_iter()
            .map(|r| r.expect("seal ok").tag().expect("a tag"))
            .collect();
        (bufs, tags)
    }

    fn open(
        &self,
        b: &dyn Backend,
        key: &Aes256Key,
        mut bufs: Vec<Vec<u8>>,
        tags: &[Tag],
        aads: &[Vec<u8>],
    ) -> (Vec<SegmentResult>, Vec<Vec<u8>>) {
        let mut job = Job::Open {
            key,
            segments: bufs
                .iter_mut()
                .enumerate()
                .map(|(i, d)| OpenSegment {
                    nonce: self.nonces[i],
                    aad: &aads[i],
                    tag: tags[i],
                    data: d.into(),
                })
                .collect(),
        };
        let res = b.run(&mut job).expect("open job runs");
        drop(job);
        (res, bufs)
    }
}

fn gcm_equal(g: &GpuBackend, sizes: &[usize], seed: u64) {
    let cpu = CpuBackend::new();
    let key = Aes256Key::from_bytes(random_bytes(32, seed).try_into().unwrap());
    let case = GcmCase::new(sizes, seed);
    let (ct_cpu, tags_cpu) = case.seal(&cpu, &key);
    let (ct_gpu, tags_gpu) = case.seal(g, &key);
    for i in 0..sizes.len() {
        assert!(
            ct_cpu[i] == ct_gpu[i],
            "seal: ciphertext {i} ({} bytes) differs",
            sizes[i]
        );
        assert_eq!(
            tags_cpu[i], tags_gpu[i],
            "seal: tag {i} ({} bytes) differs",
            sizes[i]
        );
    }
    let (res, pt) = case.open(g, &key, ct_gpu, &tags_gpu, &case.aads);
    assert!(res.iter().all(|r| r.is_ok()), "open: {res:?}");
    for i in 0..sizes.len() {
        assert!(
            pt[i] == case.plain[i],
            "open: plaintext {i} ({} bytes) differs",
            sizes[i]
        );
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn gcm_seal_and_open_equal_the_cpu() {
    let Some(g) = gpu() else { return };
    gcm_equal(g, &AWKWARD, 20);
    gcm_equal(g, &mixed_sizes(4000, 21), 22);
    gcm_equal(g, &[0, 0, 0], 23);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn gcm_segments_longer_than_a_slot_and_jobs_of_several_rounds() {
    let Some(g) = gpu() else { return };
    gcm_equal(g, &[(200 << 20) + 13, 7, 0, 70 << 20, 64 << 20], 24);
    // 20 segments of 60 MiB: one per slot, five GHASH rounds overlapping
    // the stream of later slots.
    gcm_equal(g, &[60 << 20; 20], 25);
    // 36 of them: three groups of rounds, the third reusing the first's
    // device buffer while the second's GHASH may still run.
    gcm_equal(g, &[60 << 20; 36], 26);
    // A segment larger than a group's budget (a group of its own), then
    // two more groups: buffers of unequal sizes.
    gcm_equal(g, &[(1536 << 20) + 5, 300 << 20, 3, 900 << 20, 17], 27);
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn gcm_open_rejects_every_tampering_and_wipes_only_those() {
    let Some(g) = gpu() else { return };
    let key = Aes256Key::from_bytes([0x33; 32]);
    let sizes = [1000usize, 0, 5000, (1 << 20) + 3, 64, 300_000, 17, 4096];
    let case = GcmCase::new(&sizes, 30);
    let (mut ct, mut tags) = case.seal(g, &key);
    let mut aads = case.aads.clone();
    ct[0][500] ^= 1; // ciphertext bit
    tags[1] = {
        let mut b = *tags[1].as_bytes();
        b[0] ^= 0x80;
        Tag::from_bytes(b)
    }; // tag of an empty segment
    aads[2].push(0); // associated data
    ct[3][(1 << 20) + 2] ^= 4; // last byte of a long segment
    tags[5] = {
        let mut b = *tags[5].as_bytes();
        b[15] ^= 1;
        Tag::from_bytes(b)
    };
    let (res, pt) = case.open(g, &key, ct, &tags, &aads);
    let bad = [0usize, 1, 2, 3, 5];
    for (i, r) in res.iter().enumerate() {
        if bad.contains(&i) {
            assert!(
                matches!(r, Err(e) if e.index == i && matches!(e.kind, SegmentErrorKind::AuthenticationFailed)),
                "segment {i}: {r:?}"
            );
            assert!(pt[i].iter().all(|&b| b == 0), "segment {i} not wiped");
        } else {
            assert!(r.is_ok(), "segment {i}: {r:?}");
            assert!(pt[i] == case.plain[i], "segment {i} plaintext differs");
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn gcm_device_resident_seal_and_open() {
    let Some(g) = gpu() else { return };
    use cudarc::driver::{CudaContext, DevicePtr};
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let cpu = CpuBackend::new();
    let key = Aes256Key::from_bytes([9; 32]);
    let sizes = [1usize << 20, 17, 0, 4096 * 3 + 5, 33 << 20];
    let case = GcmCase::new(&sizes, 40);
    let (ct_cpu, tags_cpu) = case.seal(&cpu, &key);
    let dev: Vec<_> = case
        .plain
        .iter()
        .map(|v| {
            stream
                .clone_htod(&v.iter().copied().chain([0u8]).collect::<Vec<_>>())
                .unwrap()
        })
        .collect();
    stream.synchronize().unwrap();
    let slices: Vec<DeviceSlice> = dev
        .iter()
        .zip(&sizes)
        .map(|(d, &n)| {
            let (ptr, _sync) = d.device_ptr(&stream);
            // SAFETY: `d` is a live device allocation of n + 1 bytes on device 0.
            unsafe { DeviceSlice::new(0, ptr, n) }
        })
        .collect();
    let mut job = Job::Seal {
        key: &key,
        segments: (0..sizes.len())
            .map(|i| SealSegment {
                nonce: case.nonces[i],
                aad: &case.aads[i],
                data: DataMut::Device(slices[i]),
            })
            .collect(),
    };
    let res = g.run(&mut job).unwrap();
    drop(job);
    for i in 0..sizes.len() {
        assert_eq!(res[i].as_ref().unwrap().tag(), Some(tags_cpu[i]), "tag {i}");
        let got = stream.clone_dtoh(&dev[i]).unwrap();
        assert!(
            got[..sizes[i]] == ct_cpu[i][..],
            "device ciphertext {i} differs"
        );
    }
    let mut tags = tags_cpu.clone();
    tags[0] = {
        let mut b = *tags[0].as_bytes();
        b[3] ^= 1;
        Tag::from_bytes(b)
    };
    let mut job = Job::Open {
        key: &key,
        segments: (0..sizes.len())
            .map(|i| OpenSegment {
                nonce: case.nonces[i],
                aad: &case.aads[i],
                tag: tags[i],
                data: DataMut::Device(slices[i]),
            })
            .collect(),
    };
    let res = g.run(&mut job).unwrap();
    drop(job);
    for i in 0..sizes.len() {
        let got = stream.clone_dtoh(&dev[i]).unwrap();
        if i == 0 {
            assert!(res[0].is_err());
            assert!(
                got[..sizes[0]].iter().all(|&b| b == 0),
                "forged device segment not wiped"
            );
        } else {
            assert!(res[i].is_ok(), "{i}: {:?}", res[i]);
            assert!(
                got[..sizes[i]] == case.plain[i][..],
                "device plaintext {i} differs"
            );
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn pinned_host_buffers_move_by_dma_and_give_the_same_bytes() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let key = Aes256Key::from_bytes([0x61; 32]);
    let sizes = [(1usize << 20) + 13, 300_000, 5, 70 << 20];
    let total: usize = sizes.iter().map(|n| n + 64).sum();
    let mut pinned = g.alloc_pinned(total).unwrap();
    let plain: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| random_bytes(n, 70 + i as u64))
        .collect();
    // Odd offsets inside the pinned buffer, plus one pageable segment.
    let mut rest: &mut [u8] = &mut pinned[..];
    let mut views: Vec<&mut [u8]> = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let (_, tail) = rest.split_at_mut(3 + i);
        let (seg, tail) = tail.split_at_mut(n);
        seg.copy_from_slice(&plain[i]);
        views.push(seg);
        rest = tail;
    }
    let mut pageable = random_bytes(2 << 20, 80);
    let mut want: Vec<Vec<u8>> = plain.clone();
    want.push(pageable.clone());
    let iv = |i: usize| CtrIv::B128(Iv128::from_bytes([i as u8; 16]));
    for (i, w) in want.iter_mut().enumerate() {
        ctr(&cpu, CtrCipher::Aes256(&key), iv(i), w).unwrap();
    }
    let mut segments: Vec<CtrSegment> = views
        .into_iter()
        .enumerate()
        .map(|(i, v)| CtrSegment {
            iv: iv(i),
            data: DataMut::Host(v),
        })
        .collect();
    segments.push(CtrSegment {
        iv: iv(sizes.len()),
        data: DataMut::Host(&mut pageable),
    });
    let mut job = Job::Ctr {
        cipher: CtrCipher::Aes256(&key),
        segments,
    };
    let res = g.run(&mut job).unwrap();
    assert!(res.iter().all(|r| r.is_ok()));
    let Job::Ctr { segments, .. } = job else {
        unreachable!()
    };
    for (i, s) in segments.iter().enumerate() {
        let DataMut::Host(b) = &s.data else {
            unreachable!()
        };
        assert!(b[..] == want[i][..], "segment {i} differs");
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn concurrent_jobs_spread_over_every_gpu() {
    let Some(g) = gpu() else { return };
    if g.devices().len() < 2 {
        println!("SKIPPED (one GPU): jobs spread over several GPUs needs two");
        return;
    }
    let before: Vec<u64> = g.devices().iter().map(|d| d.jobs_run()).collect();
    let key = Aes256Key::from_bytes([0x5a; 32]);
    let cpu = CpuBackend::new();
    std::thread::scope(|s| {
        for t in 0..(4 * g.devices().len()) {
            let key = &key;
            let cpu = &cpu;
            s.spawn(move || {
                let mut gpu_buf = random_bytes(256 << 20, 90 + t as u64);
                let mut want = gpu_buf.clone();
                let iv = CtrIv::B128(Iv128::from_bytes([t as u8; 16]));
                ctr(g, CtrCipher::Aes256(key), iv, &mut gpu_buf).unwrap();
                ctr(cpu, CtrCipher::Aes256(key), iv, &mut want).unwrap();
                assert!(gpu_buf == want, "thread {t}: GPU result differs");
            });
        }
    });
    for (d, b) in g.devices().iter().zip(before) {
        println!("GPU {}: {} jobs", d.ordinal, d.jobs_run() - b);
        assert!(d.jobs_run() > b, "GPU {} got no work", d.ordinal);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu.sh tests runs it with --include-ignored"]
fn copy_device_moves_bytes_between_host_and_every_gpu() {
    let Some(g) = gpu() else { return };
    let len = (3 << 20) + 5;
    let data = random_bytes(len, 77);
    let mut pinned = g.alloc_pinned(len).unwrap();
    pinned.copy_from_slice(&data);
    let mut back = g.alloc_pinned(len).unwrap();
    let auto = AutoBackend::new();
    for d in g.devices() {
        let dev = d.ordinal as u32;
        // The allocations live until the end of the loop body.
        let alloc_a = g.alloc_device(d.ordinal, len, &[0]).unwrap();
        let alloc_b = g.alloc_device(d.ordinal, len + 7, &[0]).unwrap();
        let a = alloc_a.slice(0, len).unwrap();
        let b = alloc_b.slice(7, len).unwrap();
        back.fill(0);
        let copies = [
            // host to device, device to device at an odd offset, in pieces
            DeviceCopy {
                dst: a.ptr(),
                src: pinned.as_ptr() as u64,
                len,
            },
            DeviceCopy {
                dst: b.ptr(),
                src: a.ptr(),
                len: 1 << 20,
            },
            DeviceCopy {
                dst: b.ptr() + (1 << 20),
                src: a.ptr() + (1 << 20),
                len: len - (1 << 20),
            },
            DeviceCopy {
                dst: back.as_mut_ptr() as u64,
                src: b.ptr(),
                len,
            },
        ];
        // SAFETY: every range lies in a live allocation of its length.
        unsafe { g.copy_device(dev, &copies) }
            .expect("a GPU")
            .unwrap();
        assert!(
            back[..] == data[..],
            "GPU {dev}: bytes differ after the round trip"
        );
        // Through the auto backend too (what the checkpoints use).
        back.fill(0);
        let down = [DeviceCopy {
            dst: back.as_mut_ptr() as u64,
            src: a.ptr(),
            len,
        }];
        // SAFETY: as above.
        unsafe { auto.copy_device(dev, &down) }
            .expect("a GPU")
            .unwrap();
        assert!(back[..] == data[..], "GPU {dev}: auto's copy differs");
    }
    // A GPU that does not exist is an error, not a crash.
    let none = [DeviceCopy {
        dst: 0,
        src: 0,
        len: 0,
    }];
    // SAFETY: rejected before any copy.
    assert!(unsafe { g.copy_device(99, &none) }.expect("a GPU").is_err());
}

/// The digests of `segments` by `b`.
fn digests(b: &dyn Backend, algo: DigestAlgo, segments: &[Data]) -> Vec<Digest> {
    let mut job = Job::Digest {
        algo,
        segments: segments.to_vec(),
    };
    b.run(&mut job)
        .unwrap()
        .into_iter()
        .map(|r| r.unwrap().digest().unwrap())
        .collect()
}

/// Page-locked segments only (equal ones, one at an odd offset, a short
/// one, an empty one), large enough for the wide rounds of 2D DMA with no
/// staging (gpu/serial_pinned.rs) and long enough for several rounds, so
/// each segment's state crosses rounds: digests equal the CPU's.
#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn pinned_segments_hash_in_wide_rounds_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let (seg, n) = (9 << 20, 40usize);
    let mut pinned = g.alloc_pinned(seg * n + 4096).unwrap();
    pinned.copy_from_slice(&random_bytes(seg * n + 4096, 93));
    for algo in [DigestAlgo::Sha256, DigestAlgo::Md5, DigestAlgo::Crc32] {
        let mut segments: Vec<Data> = pinned[..seg * n].chunks(seg).map(Data::Host).collect();
        segments[n / 2] = Data::Host(&pinned[(n / 2) * seg + 7..(n / 2 + 1) * seg]);
        segments.insert(n / 3, Data::Host(&pinned[seg * n..seg * n + 4000]));
        segments.insert(n / 4, Data::Host(&pinned[..0]));
        assert_eq!(
            digests(g, algo, &segments),
            digests(&cpu, algo, &segments),
            "{algo:?}"
        );
    }
}

/// Many equal segments of one page-locked buffer, striped over the slots,
/// plus an odd-sized one and a pageable one: digests equal the CPU's.
#[test]
#[ignore = "needs an NVIDIA GPU: scripts/gpu-check.sh runs it with --include-ignored"]
fn pinned_equal_segments_hash_like_the_cpu() {
    let Some(g) = gpu() else { return };
    let cpu = CpuBackend::new();
    let (seg, n) = (300_000usize, 600usize);
    let mut pinned = g.alloc_pinned(seg * n).unwrap();
    pinned.copy_from_slice(&random_bytes(seg * n, 91));
    let pageable = random_bytes(seg, 92);
    for algo in [DigestAlgo::Sha256, DigestAlgo::Md5, DigestAlgo::Crc32c] {
        let mut segments: Vec<Data> = pinned.chunks(seg).map(Data::Host).collect();
        segments[n / 2] = Data::Host(&pinned[(n / 2) * seg + 7..(n / 2 + 1) * seg]);
        segments.insert(n / 3, Data::Host(&pageable));
        assert_eq!(
            digests(g, algo, &segments),
            digests(&cpu, algo, &segments),
            "{algo:?}"
        );
    }
}
