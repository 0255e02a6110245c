//! The auto backend without a GPU: a second CPU backend (or a mock that
//! refuses ops, or blocks) stands in for the GPU. Split jobs must give the
//! results of a single backend bit for bit, for every op, at every split
//! point; refusals fall back to the CPU once; queued work steers choices.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use common::{random_bytes, rsa_key};
use gvault_accel::auto::{
    CostModel, CpuCost, GpuCost, Identity, LinearCost, ModelSource, OpModel, Plan, SplitPoint,
    FORMAT_VERSION,
};
use gvault_accel::CpuBackend;
use gvault_accel::*;

/// CPU at 1 GB/s a core (2× on 2 threads); GPU at `gpu_ns_per_byte` from
/// host memory, `gpu_fixed_ns` a job.
fn model(gpu_fixed_ns: f64, gpu_ns_per_byte: f64) -> CostModel {
    let ops: BTreeMap<String, OpModel> = OpKind::ALL
        .iter()
        .map(|op| {
            let gpu = LinearCost {
                fixed_ns: gpu_fixed_ns,
                ns_per_byte: gpu_ns_per_byte,
                ns_per_segment: 10.0,
            };
            let m = OpModel {
                cpu: CpuCost {
                    one_thread: LinearCost {
                        fixed_ns: 2_000.0,
                        ns_per_byte: 1.0,
                        ns_per_segment: 100.0,
                    },
                    threads: 2,
                    speedup: 2.0,
                    cut_cost: None,
                    small_speedup: None,
                },
                gpu: Some(GpuCost {
                    kernel: gpu,
                    pinned: Some(gpu),
                    pageable: Some(gpu),
                    pinned_packed: None,
                    thread_ns_per_byte: None,
                    pinned_large: None,
                }),
            };
            (op.name().to_string(), m)
        })
        .collect();
    CostModel {
        format_version: FORMAT_VERSION,
        identity: Identity::default(),
        link: None,
        ops,
    }
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

/// Every segment boundary, and for CTR ops cuts inside segments.
fn split_points(op: OpKind, n: usize) -> Vec<SplitPoint> {
    let mut points: Vec<SplitPoint> = (0..=n)
        .map(|segment| SplitPoint { segment, offset: 0 })
        .collect();
    if auto::cuttable(op) {
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

/// Seals `bufs` (one AAD each) with `run`, returning the tags or errors.
fn seal_with(
    key: &Aes256Key,
    bufs: &mut [Vec<u8>],
    aads: &[Vec<u8>],
    run: &dyn Fn(&mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError>,
) -> Vec<SegmentResult> {
    let mut job = Job::Seal {
        key,
        segments: bufs
            .iter_mut()
            .zip(aads)
            .enumerate()
            .map(|(i, (b, aad))| SealSegment {
                nonce: Nonce96::from_parts(7, i as u32),
                aad,
                data: b.into(),
            })
            .collect(),
    };
    run(&mut job).expect("the job runs")
}

fn open_with(
    key: &Aes256Key,
    bufs: &mut [Vec<u8>],
    aads: &[Vec<u8>],
    tags: &[Tag],
    run: &dyn Fn(&mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError>,
) -> Vec<SegmentResult> {
    let mut job = Job::Open {
        key,
        segments: bufs
            .iter_mut()
            .zip(aads)
            .zip(tags)
            .enumerate()
            .map(|(i, ((b, aad), tag))| OpenSegment {
                nonce: Nonce96::from_parts(7, i as u32),
                aad,
                tag: *tag,
                data: b.into(),
            })
            .collect(),
    };
    run(&mut job).expect("the job runs")
}

fn tags_of(results: &[SegmentResult]) -> Vec<Tag> {
    results
        .iter()
        .map(|r| match r {
            Ok(Output::Tag(t)) => *t,
            other => panic!("expected a tag: {other:?}"),
        })
        .collect()
}

/// Split points at GPU shares 0..=1 of the bytes, on 16-byte boundaries
/// inside segments (and at the job's ends).
fn gcm_split_points(lengths: &[usize]) -> Vec<SplitPoint> {
    let total: usize = lengths.iter().sum();
    let mut points = vec![
        SplitPoint {
            segment: 0,
            offset: 0,
        },
        SplitPoint {
            segment: lengths.len(),
            offset: 0,
        },
    ];
    for share in [0.01, 0.2, 0.37, 0.5, 0.63, 0.8, 0.99] {
        let mut target = (total as f64 * share) as usize;
        for (i, &len) in lengths.iter().enumerate() {
            if target < len {
                points.push(SplitPoint {
                    segment: i,
                    offset: (target / 16 * 16) as u64,
                });
                break;
            }
            target -= len;
        }
    }
    points
}

/// GCM split inside segments (GPU CTR + CPU GHASH, a CPU backend standing
/// in for the GPU): seal and open equal the CPU backend's bit for bit, for
/// lengths that are not multiples of 16, with and without AADs, at GPU
/// shares from 0 to 1; a job of 1 MiB pieces takes several GPU jobs.
#[test]
fn gcm_split_inside_segments_equals_the_cpu_bit_for_bit() {
    let key = Aes256Key::from_bytes([0x5a; 32]);
    let reference = CpuBackend::with_threads(1);
    let auto = two_cpus();
    let cases: [&[usize]; 4] = [
        &[(3 << 20) + 5, 17, 1000, (1 << 20) + 32],
        &[(5 << 20) + 13],
        &[0, 15, 16, 4097],
        &[(1 << 20) + 1, 3, (2 << 20) + 15],
    ];
    for (c, lengths) in cases.iter().enumerate() {
        let plain: Vec<Vec<u8>> = lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| random_bytes(n, (c * 10 + i) as u64))
            .collect();
        let aads: Vec<Vec<u8>> = (0..lengths.len())
            .map(|i| random_bytes(i * 13 % 40, 99 + i as u64))
            .collect();
        let mut want = plain.clone();
        let want_tags = seal_with(&key, &mut want, &aads, &|j| reference.run(j));
        for at in gcm_split_points(lengths) {
            let mut got = plain.clone();
            let tags = seal_with(&key, &mut got, &aads, &|j| {
                auto.run_plan(j, Plan::GcmSplit(at))
            });
            assert_eq!(tags, want_tags, "case {c} seal at {at:?}");
            assert!(got == want, "case {c} seal at {at:?}: ciphertext differs");
            let opened = open_with(&key, &mut got, &aads, &tags_of(&tags), &|j| {
                auto.run_plan(j, Plan::GcmSplit(at))
            });
            assert!(
                opened.iter().all(|r| r == &Ok(Output::Done)),
                "case {c} {at:?}: {opened:?}"
            );
            assert!(got == plain, "case {c} open at {at:?}: plaintext differs");
        }
    }
}

/// A flipped bit in the GPU's range, the CPU's range, the AAD or the tag
/// fails the open of that segment only, and zeroes all of it.
#[test]
fn gcm_split_tampering_fails_and_wipes_the_whole_segment() {
    let key = Aes256Key::from_bytes([0x33; 32]);
    let auto = two_cpus();
    let lengths = [(2 << 20) + 7, 5000];
    let plain: Vec<Vec<u8>> = lengths
        .iter()
        .enumerate()
        .map(|(i, &n)| random_bytes(n, 50 + i as u64))
        .collect();
    let aads = vec![b"head".to_vec(), b"tail".to_vec()];
    let at = SplitPoint {
        segment: 0,
        offset: 1 << 20,
    };
    let mut sealed = plain.clone();
    let tags = tags_of(&seal_with(&key, &mut sealed, &aads, &|j| {
        auto.run_plan(j, Plan::GcmSplit(at))
    }));
    // (what, byte flipped in segment 0's ciphertext / AAD / tag)
    for what in ["gpu range", "cpu range", "aad", "tag"] {
        let (mut bufs, mut aads, mut tags) = (sealed.clone(), aads.clone(), tags.clone());
        match what {
            "gpu range" => bufs[0][12_345] ^= 1,
            "cpu range" => bufs[0][(1 << 20) + 99] ^= 0x80,
            "aad" => aads[0][1] ^= 4,
            _ => {
                tags[0] = {
                    let mut b = *tags[0].as_bytes();
                    b[3] ^= 2;
                    Tag::from_bytes(b)
                }
            }
        }
        let r = open_with(&key, &mut bufs, &aads, &tags, &|j| {
            auto.run_plan(j, Plan::GcmSplit(at))
        });
        assert_eq!(
            r[0],
            Err(SegmentErrorKind::AuthenticationFailed.at(0)),
            "{what}"
        );
        assert!(bufs[0].iter().all(|&b| b == 0), "{what}: not wiped");
        assert_eq!(r[1], Ok(Output::Done), "{what}");
        assert!(bufs[1] == plain[1], "{what}: the good segment differs");
    }
}

/// Device-resident data and bad split points are refused (or run whole)
/// without touching data.
#[test]
fn gcm_split_refuses_bad_points() {
    let key = Aes256Key::from_bytes([1; 32]);
    let auto = two_cpus();
    let mut bufs = vec![random_bytes(4096, 1)];
    let orig = bufs.clone();
    let aads = vec![Vec::new()];
    for at in [
        SplitPoint {
            segment: 0,
            offset: 8,
        },
        SplitPoint {
            segment: 0,
            offset: 4096,
        },
        SplitPoint {
            segment: 2,
            offset: 0,
        },
    ] {
        let mut job = Job::Seal {
            key: &key,
            segments: bufs
                .iter_mut()
                .zip(&aads)
                .map(|(b, aad)| SealSegment {
                    nonce: Nonce96::from_parts(1, 1),
                    aad,
                    data: b.into(),
                })
                .collect(),
        };
        let r = auto.run_plan(&mut job, Plan::GcmSplit(at));
        assert!(
            matches!(r, Err(BackendError::InvalidJob(_))),
            "{at:?}: {r:?}"
        );
    }
    assert!(bufs == orig);
}

/// One large page-locked GCM segment with the CPU's cut path and the GPU
/// about even: the planner keeps to one backend (PLAN_GCM_SPLITS), and a
/// split inside the segment, forced, gives the CPU's results (a CPU stands
/// in for the GPU).
#[test]
fn a_forced_split_inside_one_large_gcm_segment_equals_the_cpu() {
    let mut m = model(20_000.0, 0.3);
    for op in m.ops.values_mut() {
        op.cpu.threads = 8;
        op.cpu.speedup = 8.0;
    }
    let auto = AutoBackend::from_parts(
        CpuBackend::with_config(8, 1 << 20),
        Some(Box::new(CpuBackend::with_config(1, 64))),
        m,
        synthetic(),
    )
    .with_page_locked_check(|_| true);
    let reference = CpuBackend::with_threads(1);
    let key = Aes256Key::from_bytes([0x21; 32]);
    let plain = vec![random_bytes((64 << 20) + 9, 4)];
    let aads = vec![b"one".to_vec()];
    // The planner does not take GCM splits (PLAN_GCM_SPLITS: host memory
    // bound on the H100 host); forced, the split's results are the CPU's.
    let plan = Plan::GcmSplit(SplitPoint {
        segment: 0,
        offset: (26 << 20) + 48,
    });
    let mut got = plain.clone();
    let tags = seal_with(&key, &mut got, &aads, &|j| {
        assert!(!matches!(auto.decide(j).plan, Plan::GcmSplit(_)));
        auto.run_plan(j, plan)
    });
    let mut want = plain.clone();
    assert_eq!(
        tags,
        seal_with(&key, &mut want, &aads, &|j| reference.run(j))
    );
    assert!(got == want);
    let opened = open_with(&key, &mut got, &aads, &tags_of(&tags), &|j| {
        auto.run_plan(j, plan)
    });
    assert_eq!(opened, vec![Ok(Output::Done)]);
    assert!(got == plain);
}
