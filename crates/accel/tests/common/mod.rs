//! Helpers shared by the accel test suites: one-segment wrappers around the
//! batch API and deterministic inputs.
#![allow(dead_code)]

use gvault_accel::*;
use rand::{RngCore, SeedableRng};

pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

pub fn hex(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).expect("valid hex in test vector")
}

pub fn digest(b: &dyn Backend, algo: DigestAlgo<'_>, data: &[u8]) -> Digest {
    let mut job = Job::Digest {
        algo,
        segments: vec![Data::Host(data)],
    };
    let mut out = b.run(&mut job).expect("job runs");
    out.remove(0)
        .expect("segment ok")
        .digest()
        .expect("a digest")
}

pub fn seal(b: &dyn Backend, key: &Aes256Key, nonce: Nonce96, aad: &[u8], data: &mut [u8]) -> Tag {
    let mut job = Job::Seal {
        key,
        segments: vec![SealSegment {
            nonce,
            aad,
            data: DataMut::Host(data),
        }],
    };
    let mut out = b.run(&mut job).expect("job runs");
    out.remove(0).expect("segment ok").tag().expect("a tag")
}

pub fn open(
    b: &dyn Backend,
    key: &Aes256Key,
    nonce: Nonce96,
    aad: &[u8],
    tag: Tag,
    data: &mut [u8],
) -> Result<(), SegmentError> {
    let mut job = Job::Open {
        key,
        segments: vec![OpenSegment {
            nonce,
            aad,
            tag,
            data: DataMut::Host(data),
        }],
    };
    b.run(&mut job).expect("job runs").remove(0).map(|_| ())
}

pub fn ctr(b: &dyn Backend, cipher: CtrCipher<'_>, iv: CtrIv, data: &mut [u8]) -> SegmentResult {
    let mut job = Job::Ctr {
        cipher,
        segments: vec![CtrSegment {
            iv,
            data: DataMut::Host(data),
        }],
    };
    b.run(&mut job).expect("job runs").remove(0)
}

pub fn chunks(b: &dyn Backend, params: ChunkParams, data: &[u8]) -> Vec<ChunkSpan> {
    let mut job = Job::Chunk {
        params,
        segments: vec![Data::Host(data)],
    };
    let mut out = b.run(&mut job).expect("job runs");
    match out.remove(0).expect("segment ok") {
        Output::Chunks(c) => c,
        other => panic!("expected chunks, got {other:?}"),
    }
}

/// The items of `(key index, input)` pairs under `keys`: a job or batch
/// under many keys.
pub fn rsa_items<'a>(keys: &'a [RsaPrivateKey], src: &'a [(usize, Vec<u8>)]) -> Vec<RsaItem<'a>> {
    src.iter()
        .map(|(k, m)| RsaItem {
            key: &keys[*k],
            input: m,
        })
        .collect()
}

pub fn rsa_key(bits: usize) -> RsaPrivateKey {
    let path = format!("{}/tests/data/rsa{bits}.pem", env!("CARGO_MANIFEST_DIR"));
    RsaPrivateKey::from_pem(&std::fs::read_to_string(path).unwrap()).unwrap()
}

pub fn test_data(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// A cost model for tests with a stand-in GPU: the CPU at 1 GB/s a core
/// (2x on 2 threads, 2 us a job), the GPU at `gpu` for every op and host
/// memory kind.
pub fn synthetic_model(gpu: gvault_accel::auto::LinearCost) -> gvault_accel::auto::CostModel {
    use gvault_accel::auto::{
        CostModel, CpuCost, GpuCost, Identity, LinearCost, OpModel, FORMAT_VERSION,
    };
    let ops = OpKind::ALL
        .iter()
        .map(|op| {
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
                    pageable_large: None,
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
