//! The auto backend without a GPU: a second CPU backend (or a mock that
//! refuses ops, or blocks) stands in for the GPU. Split jobs must give the
//! results of a single backend bit for bit, for every op, at every split
//! point; refusals fall back to the CPU once; queued work steers choices.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use common::{random_bytes, rsa_key};
use gvault_accel::auto::{CostModel, LinearCost, ModelSource, Plan, SplitPoint};
use gvault_accel::CpuBackend;
use gvault_accel::*;

/// CPU at 1 GB/s a core (2× on 2 threads); GPU at `gpu_ns_per_byte` from
/// host memory, `gpu_fixed_ns` a job.
fn model(gpu_fixed_ns: f64, gpu_ns_per_byte: f64) -> CostModel {
    common::synthetic_model(LinearCost {
        fixed_ns: gpu_fixed_ns,
        ns_per_byte: gpu_ns_per_byte,
        ns_per_segment: 10.0,
    })
}

fn synthetic() -> ModelSource {
    ModelSource::Defaults {
        reason: "synthetic model for tests".into(),
    }
}

/// CPU side on 2 threads with tiny internal pieces, "GPU" a 1-thread CPU.
fn two_cpus() -> AutoBackend {
    AutoBackend::from_parts(
        CpuBackend::with_config(2, 4096),
        Some(Box::new(CpuBackend::with_config(1, 64))),
        model(20_000.0, 0.5),
        synthetic(),
    )
}

const LENGTHS: [usize; 10] = [0, 1, 15, 16, 17, 4095, 100_003, (1 << 20) + 13, 64, 3000];

struct Keys {
    aes: Aes256Key,
    tea: TeaKey,
    blowfish: BlowfishKey,
    blake3: Blake3Key,
    rsa: RsaPrivateKey,
}

fn keys() -> Keys {
    Keys {
        aes: Aes256Key::from_bytes([5; 32]),
        tea: TeaKey::from_bytes([6; 16]),
        blowfish: BlowfishKey::try_from_slice(b"split test key").unwrap(),
        blake3: Blake3Key::from_bytes([7; 32]),
        rsa: rsa_key(1024),
    }
}

type Runner<'r> = &'r dyn Fn(&mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError>;

fn inputs(op: OpKind, keys: &Keys) -> Vec<Vec<u8>> {
    if op == OpKind::RsaPrivate {
        let n = keys.rsa.size();
        let mut v: Vec<Vec<u8>> = (0..6u64)
            .map(|i| {
                let mut b = random_bytes(n, 100 + i);
                b[0] = 0;
                b
            })
            .collect();
        v[2] = vec![0xff; n]; // not below the modulus
        v[4].pop(); // wrong length
        return v;
    }
    LENGTHS
        .iter()
        .enumerate()
        .map(|(i, &len)| random_bytes(len, i as u64))
        .collect()
}

fn ctr_iv(cipher: &CtrCipher<'_>, i: usize) -> CtrIv {
    // Segment 6 has the wrong width; segment 7 wraps its counter mid-segment.
    let wide = cipher.iv_len() == 16;
    let wide = if i == 6 { !wide } else { wide };
    let fill = if i == 7 { 0xff } else { i as u8 };
    if wide {
        CtrIv::B128(Iv128::from_bytes([fill; 16]))
    } else {
        CtrIv::B64(Iv64::from_bytes([fill; 8]))
    }
}

/// Runs `op` over a copy of `bufs` with `run`: results and buffers after.
fn run_op(
    op: OpKind,
    keys: &Keys,
    bufs: &[Vec<u8>],
    run: Runner<'_>,
) -> (Vec<SegmentResult>, Vec<Vec<u8>>) {
    let mut bufs = bufs.to_vec();
    let nonce = |i: usize| Nonce96::from_parts(9, i as u32);
    let aad = |i: usize| {
        if i.is_multiple_of(2) {
            &b"header"[..]
        } else {
            &b""[..]
        }
    };
    let results = match op {
        OpKind::AesGcmSeal => run(&mut Job::Seal {
            key: &keys.aes,
            segments: bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| SealSegment {
                    nonce: nonce(i),
                    aad: aad(i),
                    data: b.into(),
                })
                .collect(),
        }),
        OpKind::AesGcmOpen => {
            // Ciphertexts and tags from a reference seal; segment 3's tag is bad.
            let mut seal = Job::Seal {
                key: &keys.aes,
                segments: bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| SealSegment {
                        nonce: nonce(i),
                        aad: aad(i),
                        data: b.into(),
                    })
                    .collect(),
            };
            let mut tags: Vec<Tag> = CpuBackend::with_threads(1)
                .run(&mut seal)
                .unwrap()
                .into_iter()
                .map(|r| r.unwrap().tag().unwrap())
                .collect();
            tags[3] = {
                let mut b = *tags[3].as_bytes();
                b[0] ^= 1;
                Tag::from_bytes(b)
            };
            run(&mut Job::Open {
                key: &keys.aes,
                segments: bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| OpenSegment {
                        nonce: nonce(i),
                        aad: aad(i),
                        tag: tags[i],
                        data: b.into(),
                    })
                    .collect(),
            })
        }
        OpKind::AesCtr | OpKind::TeaCtr | OpKind::BlowfishCtr => {
            let cipher = match op {
                OpKind::AesCtr => CtrCipher::Aes256(&keys.aes),
                OpKind::TeaCtr => CtrCipher::Tea(&keys.tea),
                _ => CtrCipher::Blowfish(&keys.blowfish),
            };
            run(&mut Job::Ctr {
                cipher,
                segments: bufs
                    .iter_mut()
                    .enumerate()
                    .map(|(i, b)| CtrSegment {
                        iv: ctr_iv(&cipher, i),
                        data: b.into(),
                    })
                    .collect(),
            })
        }
        OpKind::Chunk => run(&mut Job::Chunk {
            params: ChunkParams::new(256, 1024, 4096, 1).unwrap(),
            segments: bufs.iter().map(Data::from).collect(),
        }),
        OpKind::ChunkDigest => run(&mut Job::ChunkDigest {
            params: ChunkParams::new(256, 1024, 4096, 1).unwrap(),
            key: &keys.blake3,
            crc32c: false,
            segments: bufs.iter().map(Data::from).collect(),
        }),
        OpKind::RsaPrivate => run(&mut Job::RsaPrivate {
            key: &keys.rsa,
            segments: bufs.iter().map(|b| b.as_slice()).collect(),
        }),
        digest => {
            let algo = match digest {
                OpKind::Blake3 => DigestAlgo::Blake3,
                OpKind::Blake3Keyed => DigestAlgo::Blake3Keyed(&keys.blake3),
                OpKind::Sha256 => DigestAlgo::Sha256,
                OpKind::Md5 => DigestAlgo::Md5,
                OpKind::Crc32 => DigestAlgo::Crc32,
                _ => DigestAlgo::Crc32c,
            };
            run(&mut Job::Digest {
                algo,
                segments: bufs.iter().map(Data::from).collect(),
            })
        }
    };
    (results.expect("job runs"), bufs)
}

/// Every segment boundary, and for CTR ops (which carry no state across
/// blocks, so the auto backend may cut their segments) cuts inside them.
fn split_points(op: OpKind, n: usize) -> Vec<SplitPoint> {
    let mut points: Vec<SplitPoint> = (0..=n)
        .map(|segment| SplitPoint { segment, offset: 0 })
        .collect();
    if matches!(op, OpKind::AesCtr | OpKind::TeaCtr | OpKind::BlowfishCtr) {
        for (segment, offset) in [
            (3, 0),
            (4, 16),
            (5, 4080),
            (6, 50_000), /* the bad IV: one error, not two */
            (7, 16),
            (7, 1 << 19),
            (7, 1 << 20),
        ] {
            points.push(SplitPoint { segment, offset });
        }
    }
    points
}

#[test]
fn split_jobs_equal_a_single_backend_bit_for_bit() {
    let keys = keys();
    let reference = CpuBackend::with_threads(1);
    let auto = two_cpus();
    for op in OpKind::ALL {
        let bufs = inputs(op, &keys);
        let (want, want_bufs) = run_op(op, &keys, &bufs, &|j| reference.run(j));
        if matches!(op, OpKind::AesGcmOpen | OpKind::AesCtr | OpKind::RsaPrivate) {
            assert!(
                want.iter().any(|r| r.is_err()),
                "{op}: the inputs include a bad segment"
            );
        }
        for at in split_points(op, bufs.len()) {
            let (got, got_bufs) = run_op(op, &keys, &bufs, &|j| auto.run_plan(j, Plan::Split(at)));
            assert_eq!(got, want, "{op} split at {at:?}");
            assert!(
                got_bufs == want_bufs,
                "{op} split at {at:?}: buffers differ"
            );
        }
        for plan in [Plan::Cpu, Plan::Gpu] {
            let (got, got_bufs) = run_op(op, &keys, &bufs, &|j| auto.run_plan(j, plan));
            assert_eq!(got, want, "{op} {plan:?}");
            assert!(got_bufs == want_bufs, "{op} {plan:?}: buffers differ");
        }
    }
}

#[test]
fn the_model_splits_comparable_backends_and_results_still_match() {
    // GPU at 2 GB/s from host vs 2 GB/s of CPU: a split near one half.
    // Pageable jobs are never split, so the buffers pass for page-locked
    // (the stand-in GPU is a CPU backend: nothing reads that but the plan).
    let keys = keys();
    let reference = CpuBackend::with_threads(1);
    let auto = two_cpus().with_page_locked_check(|_| true);
    let bufs: Vec<Vec<u8>> = (0..12)
        .map(|i| random_bytes(300_000 + i * 7, i as u64))
        .collect();
    for op in [
        OpKind::AesGcmSeal,
        OpKind::AesCtr,
        // Not SHA-256: serial digests are never split (one GPU thread per
        // segment makes the GPU's part slow).
        OpKind::Blake3,
        OpKind::Chunk,
    ] {
        let decided = std::cell::Cell::new(None);
        let (got, got_bufs) = run_op(op, &keys, &bufs, &|j| {
            decided.set(Some(auto.decide(j).plan));
            auto.run(j)
        });
        let (want, want_bufs) = run_op(op, &keys, &bufs, &|j| reference.run(j));
        assert!(
            matches!(decided.get(), Some(Plan::Split(_))),
            "{op}: {:?}",
            decided.get()
        );
        assert_eq!(got, want, "{op}");
        assert!(got_bufs == want_bufs, "{op}: buffers differ");
    }
    let huge = vec![random_bytes((8 << 20) + 5, 1)];
    let decided = std::cell::Cell::new(None);
    let (got, got_bufs) = run_op(OpKind::AesCtr, &keys, &huge, &|j| {
        decided.set(Some(auto.decide(j).plan));
        auto.run(j)
    });
    let (want, want_bufs) = run_op(OpKind::AesCtr, &keys, &huge, &|j| reference.run(j));
    assert!(
        matches!(decided.get(), Some(Plan::Split(p)) if p.segment == 0 && p.offset > 0),
        "{:?}",
        decided.get()
    );
    assert_eq!(got, want);
    assert!(got_bufs == want_bufs);
}

#[test]
fn invalid_split_points_are_refused_before_touching_data() {
    let keys = keys();
    let auto = two_cpus();
    let mut buf = random_bytes(4096, 3);
    let orig = buf.clone();
    for at in [
        SplitPoint {
            segment: 0,
            offset: 16,
        }, // GCM is never cut inside
        SplitPoint {
            segment: 2,
            offset: 0,
        }, // beyond the job
    ] {
        let mut job = Job::Seal {
            key: &keys.aes,
            segments: vec![SealSegment {
                nonce: Nonce96::from_parts(1, 1),
                aad: b"",
                data: (&mut buf).into(),
            }],
        };
        assert!(matches!(
            auto.run_plan(&mut job, Plan::Split(at)),
            Err(BackendError::InvalidJob(_))
        ));
    }
    for offset in [8, 4096, 5000] {
        let mut job = Job::Ctr {
            cipher: CtrCipher::Aes256(&keys.aes),
            segments: vec![CtrSegment {
                iv: CtrIv::B128(Iv128::from_bytes([0; 16])),
                data: (&mut buf).into(),
            }],
        };
        let r = auto.run_plan(&mut job, Plan::Split(SplitPoint { segment: 0, offset }));
        assert!(
            matches!(r, Err(BackendError::InvalidJob(_))),
            "offset {offset}: {r:?}"
        );
    }
    assert_eq!(buf, orig);
}

/// A GPU stand-in that implements CTR only, counts calls, and can hold a
/// job until released.
struct MockGpu {
    inner: CpuBackend,
    calls: AtomicUsize,
    entered: AtomicBool,
    gate: Mutex<()>,
}

impl MockGpu {
    fn new() -> Self {
        Self {
            inner: CpuBackend::with_threads(1),
            calls: AtomicUsize::new(0),
            entered: AtomicBool::new(false),
            gate: Mutex::new(()),
        }
    }
}

impl Backend for &'static MockGpu {
    fn name(&self) -> &'static str {
        "gpu"
    }
    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !matches!(job, Job::Ctr { .. }) {
            return Err(BackendError::Unsupported {
                backend: "gpu",
                op: job.op(),
            });
        }
        self.entered.store(true, Ordering::SeqCst);
        let _held = self.gate.lock().unwrap();
        self.inner.run(job)
    }
}

fn ctr_job<'a>(key: &'a Aes256Key, buf: &'a mut Vec<u8>) -> Job<'a> {
    Job::Ctr {
        cipher: CtrCipher::Aes256(key),
        segments: vec![CtrSegment {
            iv: CtrIv::B128(Iv128::from_bytes([0; 16])),
            data: buf.into(),
        }],
    }
}

fn with_mock(mock: &'static MockGpu, gpu_fixed_ns: f64, gpu_ns_per_byte: f64) -> AutoBackend {
    AutoBackend::from_parts(
        CpuBackend::with_threads(2),
        Some(Box::new(mock)),
        model(gpu_fixed_ns, gpu_ns_per_byte),
        synthetic(),
    )
}

#[test]
fn an_op_the_gpu_refuses_runs_on_the_cpu_and_is_not_offered_again() {
    let mock: &'static MockGpu = Box::leak(Box::new(MockGpu::new()));
    let auto = with_mock(mock, 1_000.0, 0.01);
    let data = random_bytes(4 << 20, 8);
    let want = CpuBackend::new()
        .run(&mut Job::Digest {
            algo: DigestAlgo::Sha256,
            segments: vec![Data::from(&data)],
        })
        .unwrap();
    let job = || Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: vec![Data::from(&data)],
    };
    assert_eq!(auto.decide(&job()).plan, Plan::Gpu);
    for _ in 0..3 {
        assert_eq!(auto.run(&mut job()).unwrap(), want);
    }
    assert_eq!(mock.calls.load(Ordering::SeqCst), 1);
    assert!(auto.gpu_refused(OpKind::Sha256));
    assert_eq!(auto.decide(&job()).plan, Plan::Cpu);
    // CTR is still offered.
    assert!(!auto.gpu_refused(OpKind::AesCtr));
    let key = Aes256Key::from_bytes([1; 32]);
    let mut buf = random_bytes(1 << 20, 9);
    let mut ctr = Job::Ctr {
        cipher: CtrCipher::Aes256(&key),
        segments: vec![CtrSegment {
            iv: CtrIv::B128(Iv128::from_bytes([0; 16])),
            data: (&mut buf).into(),
        }],
    };
    auto.run(&mut ctr).unwrap();
    assert_eq!(mock.calls.load(Ordering::SeqCst), 2);
}

#[test]
fn a_small_job_goes_to_the_idle_cpu_while_the_gpu_has_a_large_queue() {
    let mock: &'static MockGpu = Box::leak(Box::new(MockGpu::new()));
    let auto = with_mock(mock, 1_000.0, 0.01);
    let key = Aes256Key::from_bytes([1; 32]);
    let mut small = random_bytes(64 << 10, 1);
    let mut big = random_bytes(64 << 20, 2);
    assert_eq!(
        auto.decide(&ctr_job(&key, &mut small)).plan,
        Plan::Gpu,
        "idle: the GPU is faster"
    );
    assert_eq!(auto.decide(&ctr_job(&key, &mut big)).plan, Plan::Gpu);

    let held = mock.gate.lock().unwrap();
    std::thread::scope(|s| {
        let worker = s.spawn(|| auto.run(&mut ctr_job(&key, &mut big)).map(|r| r.len()));
        while !mock.entered.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let ((_, cpu_bytes), (gpu_ns, gpu_bytes)) = auto.queued();
        assert_eq!((cpu_bytes, gpu_bytes), (0, 64 << 20));
        assert!(gpu_ns > 100_000, "{gpu_ns}");
        let d = auto.decide(&ctr_job(&key, &mut small));
        assert_eq!(d.plan, Plan::Cpu, "{d:?}");
        // And it runs there now, not behind the held GPU job.
        auto.run(&mut ctr_job(&key, &mut small)).unwrap();
        drop(held);
        assert_eq!(worker.join().unwrap(), Ok(1));
    });
    assert_eq!(auto.queued(), ((0, 0), (0, 0)));
    assert_eq!(auto.decide(&ctr_job(&key, &mut small)).plan, Plan::Gpu);
}

#[test]
fn without_a_gpu_auto_is_the_cpu_backend() {
    let keys = keys();
    let auto = AutoBackend::from_parts(
        CpuBackend::with_threads(2),
        None,
        model(1.0, 0.0),
        synthetic(),
    );
    let reference = CpuBackend::with_threads(1);
    assert_eq!(auto.name(), "auto");
    for op in OpKind::ALL {
        let bufs = inputs(op, &keys);
        let (got, got_bufs) = run_op(op, &keys, &bufs, &|j| {
            assert_eq!(auto.decide(j).plan, Plan::Cpu);
            auto.run(j)
        });
        let (want, want_bufs) = run_op(op, &keys, &bufs, &|j| reference.run(j));
        assert_eq!(got, want, "{op}");
        assert!(got_bufs == want_bufs, "{op}");
    }
}

#[test]
fn reserved_cores_are_not_used() {
    let auto = AutoBackend::from_parts(
        CpuBackend::with_threads(1),
        None,
        model(1.0, 0.0),
        synthetic(),
    );
    assert_eq!(auto.cpu_threads(), 1);
    let auto = AutoBackend::with_cpu_threads(CpuThreads::Count(1));
    assert_eq!(auto.cpu_threads(), 1);
}

/// A GPU that opens only when asked: counts its starts, and can fail.
fn lazy_auto(
    starts: &'static AtomicUsize,
    fail: bool,
    gpu_fixed_ns: f64,
    gpu_ns_per_byte: f64,
) -> AutoBackend {
    let starter: gvault_accel::auto::GpuStarter = Box::new(move || {
        starts.fetch_add(1, Ordering::SeqCst);
        if fail {
            Err("no device (test)".to_string())
        } else {
            Ok(Box::new(CpuBackend::with_threads(1)) as Box<dyn Backend>)
        }
    });
    AutoBackend::from_starter(
        CpuBackend::with_threads(2),
        Some(starter),
        model(gpu_fixed_ns, gpu_ns_per_byte),
        synthetic(),
    )
}

fn digest_job(data: &[u8]) -> Job<'_> {
    Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: vec![Data::from(data)],
    }
}

#[test]
fn the_gpu_opens_on_the_first_job_sent_to_it_and_not_before() {
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    // GPU: 1 ms to launch, 50 GB/s; the CPU wins below ~2 MB.
    let auto = lazy_auto(&STARTS, false, 1e6, 0.02);
    let small = random_bytes(4096, 1);
    for _ in 0..100 {
        auto.run(&mut digest_job(&small)).unwrap();
    }
    assert_eq!(STARTS.load(Ordering::SeqCst), 0, "small jobs never open it");
    assert!(auto.has_gpu() && !auto.gpu_started());
    let big = random_bytes(16 << 20, 2);
    assert_eq!(auto.decide(&digest_job(&big)).plan, Plan::Gpu);
    let want = CpuBackend::new().run(&mut digest_job(&big)).unwrap();
    assert_eq!(auto.run(&mut digest_job(&big)).unwrap(), want);
    assert_eq!(auto.run(&mut digest_job(&big)).unwrap(), want);
    assert_eq!(STARTS.load(Ordering::SeqCst), 1, "opened once");
    assert!(auto.gpu_started());
}

#[test]
fn a_gpu_that_fails_to_open_leaves_every_job_to_the_cpu() {
    static STARTS: AtomicUsize = AtomicUsize::new(0);
    let auto = lazy_auto(&STARTS, true, 1e6, 0.02);
    let keys = keys();
    let reference = CpuBackend::with_threads(1);
    let big = vec![random_bytes(8 << 20, 3), random_bytes(8 << 20, 4)];
    for op in [OpKind::Sha256, OpKind::AesGcmSeal, OpKind::AesCtr] {
        let (got, got_bufs) = run_op(op, &keys, &big, &|j| auto.run(j));
        let (want, want_bufs) = run_op(op, &keys, &big, &|j| reference.run(j));
        assert_eq!(got, want, "{op}");
        assert!(got_bufs == want_bufs, "{op}");
    }
    assert_eq!(STARTS.load(Ordering::SeqCst), 1, "tried once");
    assert!(!auto.has_gpu());
    assert_eq!(auto.decide(&digest_job(&big[0])).plan, Plan::Cpu);
}

/// Buffers whose first byte is 0xA5 stand for page-locked memory.
fn marked_pinned(b: &[u8]) -> bool {
    b.first() == Some(&0xA5)
}

#[test]
fn pinned_host_data_is_priced_at_the_pinned_rate() {
    // Pinned: 20 µs + 50 GB/s; pageable: 20 µs + 0.5 GB/s (slower than the
    // 2 GB/s of the CPU side).
    let mut m = model(20_000.0, 0.02);
    for op in m.ops.values_mut() {
        if let Some(g) = op.gpu.as_mut() {
            g.pageable = Some(LinearCost {
                fixed_ns: 20_000.0,
                ns_per_byte: 2.0,
                ns_per_segment: 10.0,
            });
        }
    }
    let auto = AutoBackend::from_parts(
        CpuBackend::with_threads(2),
        Some(Box::new(CpuBackend::with_threads(1))),
        m,
        synthetic(),
    )
    .with_page_locked_check(marked_pinned);
    let mut pinned = random_bytes(8 << 20, 5);
    pinned[0] = 0xA5;
    let mut pageable = pinned.clone();
    pageable[0] = 0;
    assert_eq!(auto.decide(&digest_job(&pinned)).plan, Plan::Gpu);
    assert_eq!(auto.decide(&digest_job(&pageable)).plan, Plan::Cpu);
    // A job counts as pinned only if every sampled segment is.
    let mixed = Job::Digest {
        algo: DigestAlgo::Sha256,
        segments: vec![Data::from(&pinned), Data::from(&pageable)],
    };
    assert_ne!(auto.decide(&mixed).plan, Plan::Gpu);
}
