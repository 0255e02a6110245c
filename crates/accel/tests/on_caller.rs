//! Small AES-GCM work runs on the calling thread in the CPU and auto
//! backends, whatever the auto backend's model says, and a backend that
//! overrides nothing (a GPU) still gets every block as a job. A counting
//! CPU backend stands in for the GPU, under a model by which the GPU wins
//! every job.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gvault_accel::auto::{CostModel, LinearCost, ModelSource};
use gvault_accel::*;

/// A "GPU" that counts the jobs it is given and runs them on one CPU thread.
struct CountingGpu {
    cpu: CpuBackend,
    jobs: Arc<AtomicUsize>,
}

impl Backend for CountingGpu {
    fn name(&self) -> &'static str {
        "gpu"
    }
    fn run(&self, job: &mut Job<'_>) -> Result<Vec<SegmentResult>, BackendError> {
        self.jobs.fetch_add(1, Ordering::Relaxed);
        self.cpu.run(job)
    }
}

/// CPU at 1 GB/s a core plus 2 us a job; the GPU free but for 1 ns per
/// 1000 bytes: it wins every job the model is asked about.
fn gpu_always_wins() -> CostModel {
    common::synthetic_model(LinearCost {
        fixed_ns: 0.0,
        ns_per_byte: 0.001,
        ns_per_segment: 0.0,
    })
}

fn auto_with_counting_gpu() -> (AutoBackend, Arc<AtomicUsize>) {
    let jobs = Arc::new(AtomicUsize::new(0));
    let gpu = CountingGpu {
        cpu: CpuBackend::with_threads(1),
        jobs: jobs.clone(),
    };
    let auto = AutoBackend::from_parts(
        CpuBackend::with_threads(2),
        Some(Box::new(gpu)),
        gpu_always_wins(),
        ModelSource::Defaults {
            reason: "synthetic model for tests".into(),
        },
    );
    (auto, jobs)
}

fn seal_job<'a>(key: &'a Aes256Key, bufs: &'a mut [Vec<u8>]) -> Job<'a> {
    Job::Seal {
        key,
        segments: bufs
            .iter_mut()
            .enumerate()
            .map(|(i, d)| SealSegment {
                nonce: Nonce96::from_parts(4, i as u32),
                aad: b"ctx",
                data: d.into(),
            })
            .collect(),
    }
}

fn tags(results: Vec<SegmentResult>) -> Vec<Tag> {
    results
        .into_iter()
        .map(|r| r.expect("sealed").tag().expect("a tag"))
        .collect()
}

#[test]
fn small_gcm_work_stays_on_the_caller_under_auto() {
    let (auto, gpu_jobs) = auto_with_counting_gpu();
    let cpu = CpuBackend::with_threads(2);
    let key = Aes256Key::from_bytes([8; 32]);
    let data = |n: usize| (0..n).map(|i| (i * 13) as u8).collect::<Vec<u8>>();

    // A group commit (a value frame and its commit record) and a small
    // batch of 3 x 40 KiB: sealed here, the same bytes as the CPU's.
    for lens in [vec![4126usize, 48], vec![40 << 10; 3]] {
        let mut a: Vec<Vec<u8>> = lens.iter().map(|&n| data(n)).collect();
        let mut b = a.clone();
        let ta = tags(auto.run(&mut seal_job(&key, &mut a)).expect("runs"));
        let tb = tags(cpu.run(&mut seal_job(&key, &mut b)).expect("runs"));
        assert_eq!((ta, &a), (tb, &b));
    }
    // One block sealed and opened (a block read), a bad tag refused with
    // the block zeroed.
    let nonce = Nonce96::from_parts(4, 0);
    let mut block = data(4096);
    let tag = auto
        .seal_block(&key, nonce, b"ctx", &mut block)
        .expect("seals");
    let mut want = data(4096);
    let want_tag = cpu
        .seal_block(&key, nonce, b"ctx", &mut want)
        .expect("seals");
    assert_eq!((tag, &block), (want_tag, &want));
    let mut opened = block.clone();
    auto.open_block(&key, nonce, b"ctx", tag, &mut opened)
        .expect("opens");
    assert_eq!(opened, data(4096));
    let mut bad = *tag.as_bytes();
    bad[0] ^= 1;
    let refused = auto.open_block(&key, nonce, b"ctx", Tag::from_bytes(bad), &mut block);
    assert!(refused.is_err_and(|e| e.is_authentication_failure()));
    assert!(block.iter().all(|&b| b == 0));
    // A small group through `seal_blocks`: the job's bytes and tags.
    let mut group: Vec<Vec<u8>> = vec![data(4126), data(48)];
    let mut want = group.clone();
    let want_tags = tags(cpu.run(&mut seal_job(&key, &mut want)).expect("runs"));
    let mut got_tags = [Tag::default(); 2];
    let Job::Seal { segments, .. } = &mut seal_job(&key, &mut group) else {
        unreachable!()
    };
    auto.seal_blocks(&key, segments, &mut got_tags)
        .expect("seals");
    assert_eq!((got_tags.to_vec(), &group), (want_tags, &want));
    assert_eq!(
        gpu_jobs.load(Ordering::Relaxed),
        0,
        "small work reached the GPU"
    );

    // A large job still goes where the model says.
    let mut large = vec![data(1 << 20); 4];
    auto.run(&mut seal_job(&key, &mut large)).expect("runs");
    assert!(
        gpu_jobs.load(Ordering::Relaxed) > 0,
        "the model's choice was ignored"
    );
}

#[test]
fn a_backend_that_overrides_nothing_gets_every_block_as_a_job() {
    let jobs = Arc::new(AtomicUsize::new(0));
    let gpu = CountingGpu {
        cpu: CpuBackend::with_threads(1),
        jobs: jobs.clone(),
    };
    let key = Aes256Key::from_bytes([8; 32]);
    let nonce = Nonce96::from_parts(1, 2);
    let mut block = vec![5u8; 100];
    let tag = gpu.seal_block(&key, nonce, b"", &mut block).expect("seals");
    gpu.open_block(&key, nonce, b"", tag, &mut block)
        .expect("opens");
    assert_eq!(block, vec![5u8; 100]);
    assert_eq!(jobs.load(Ordering::Relaxed), 2);
    let mut group = vec![vec![1u8; 10], vec![2u8; 20]];
    let mut tags = [Tag::default(); 2];
    let Job::Seal { segments, .. } = &mut seal_job(&key, &mut group) else {
        unreachable!()
    };
    gpu.seal_blocks(&key, segments, &mut tags).expect("seals");
    assert_eq!(jobs.load(Ordering::Relaxed), 3, "one job for the group");
    assert!(tags.iter().all(|t| *t != Tag::default()));
    let mut one_tag = [Tag::default(); 1];
    assert!(gpu.seal_blocks(&key, segments, &mut one_tag).is_err());
    let mut bad = *tag.as_bytes();
    bad[15] ^= 1;
    let refused = gpu.open_block(&key, nonce, b"", Tag::from_bytes(bad), &mut block);
    assert!(refused.is_err_and(|e| e.is_authentication_failure()));
}
