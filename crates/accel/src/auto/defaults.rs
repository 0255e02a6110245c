//! Shipped defaults, used until `gvault bench calibrate` has measured this
//! machine. CPU figures are OpenSSL-class rates for one x86 core with AES-NI
//! and SHA-NI (DESIGN.md's table); GPU figures are an H200 over PCIe 5
//! (55 GB/s pinned). They only need to be right to within a factor of two to
//! send small jobs to the CPU and large hashing jobs to the GPU.
//! Pageable host data is staged by a CPU copy, so it gets its own, slower
//! end-to-end rate.

use std::collections::BTreeMap;

use super::model::FORMAT_VERSION;
use super::model::{CostModel, CpuCost, GpuCost, Identity, LinearCost, LinkCost, OpModel};
use crate::job::OpKind;

/// (op, CPU ns per byte on one core, CPU ns per segment, GPU kernel ns per
/// byte, GPU kernel ns per segment)
const RATES: [(OpKind, f64, f64, f64, f64); 14] = [
    (OpKind::AesGcmSeal, 0.087, 300.0, 0.004, 40.0),
    (OpKind::AesGcmOpen, 0.087, 300.0, 0.004, 40.0),
    (OpKind::AesCtr, 0.167, 200.0, 0.003, 30.0),
    (OpKind::TeaCtr, 4.0, 100.0, 0.004, 30.0),
    (OpKind::BlowfishCtr, 6.0, 20_000.0, 0.02, 30.0),
    (OpKind::Blake3, 0.33, 300.0, 0.006, 40.0),
    (OpKind::Blake3Keyed, 0.33, 300.0, 0.006, 40.0),
    (OpKind::Sha256, 0.6, 200.0, 0.006, 40.0),
    (OpKind::Md5, 1.6, 200.0, 0.006, 40.0),
    (OpKind::Crc32, 0.1, 100.0, 0.004, 40.0),
    (OpKind::Crc32c, 0.05, 100.0, 0.004, 40.0),
    (OpKind::Chunk, 1.0, 500.0, 0.02, 100.0),
    // Chunking plus BLAKE3 over the same bytes.
    (OpKind::ChunkDigest, 1.33, 800.0, 0.025, 200.0),
    // RSA-2048, per message (the decision sizes other key lengths): the
    // CPU backend (the rsa crate) at 550/s a core, a GPU batch at 104 K/s
    // end to end, both on the H200 host (bench/JOURNAL.md 2026-11-27).
    (OpKind::RsaPrivate, 0.0, 1_800_000.0, 0.0, 9_600.0),
];

/// A job on the CPU pays to enter the rayon pool; on the GPU, a launch and
/// a synchronisation.
const CPU_FIXED_NS: f64 = 3_000.0;
const GPU_FIXED_NS: f64 = 30_000.0;
/// The link from page-locked memory (PCIe 5), and the end-to-end rate from
/// pageable memory, which a CPU copy into pinned slots limits (9.8 GB/s
/// measured for AES-GCM on an H200 host).
const LINK_FIXED_NS: f64 = 10_000.0;
const PINNED_GBPS: f64 = 55.0;
const PAGEABLE_GBPS: f64 = 10.0;
/// Of the ideal speed-up, what many segments on all cores achieve.
const CPU_EFFICIENCY: f64 = 0.85;
/// Host work per segment staged from host memory (descriptors, packing),
/// a stage of its own: H100 host, SHA-256 512 B x 131072 pageable ran at
/// 2.4 GB/s (28 ms, ~210 ns a segment) where 4 KiB x 16384 ran at 13.4
/// (bench/JOURNAL.md, the first H100 sweep of the auto dispatcher).
const STAGED_NS_PER_SEGMENT: f64 = 210.0;

/// One GPU thread's ns per byte for the ops run one thread per segment
/// (and RSA, a message a thread pair),
/// from the H100 figures in bench/JOURNAL.md: SHA-256 at
/// 1.93 GB/s resident for 1 MiB x 64 (64 threads: 33 ns/B each); MD5 from
/// its 1 MiB x 4096 kernel rate against SHA-256's (212 vs 123 GB/s). (The
/// CRCs' segments are cut into pieces: no thread holds a job up.)
fn thread_ns_per_byte(op: OpKind) -> Option<f64> {
    match op {
        OpKind::Sha256 => Some(33.0),
        OpKind::Md5 => Some(19.0),
        // One RSA-2048 message: 19.2 ms on one GPU thread (H200 host), the
        // floor of any batch, over its 256 bytes.
        OpKind::RsaPrivate => Some(75_000.0),
        _ => None,
    }
}

/// The shipped model, shaped for `identity` (its core count sets the CPU
/// speed-up; GPU figures are included only when it names a GPU).
pub fn shipped(identity: Identity) -> CostModel {
    let cores = identity.cpu_cores.max(1);
    let has_gpu = identity.gpu_name.is_some();
    let ops: BTreeMap<String, OpModel> = RATES
        .iter()
        .map(|&(op, cpu_b, cpu_s, gpu_b, gpu_s)| {
            let cpu = CpuCost {
                one_thread: LinearCost {
                    fixed_ns: CPU_FIXED_NS,
                    ns_per_byte: cpu_b,
                    ns_per_segment: cpu_s,
                },
                threads: cores,
                speedup: (cores as f64 * CPU_EFFICIENCY).max(1.0),
                cut_cost: None,
                small_speedup: None,
            };
            let kernel = LinearCost {
                fixed_ns: GPU_FIXED_NS,
                ns_per_byte: gpu_b,
                ns_per_segment: gpu_s,
            };
            let gpu = has_gpu.then_some(GpuCost {
                kernel,
                // Pinned: kernel ⊕ link (below).
                pinned: None,
                pageable: Some(LinearCost {
                    fixed_ns: GPU_FIXED_NS + LINK_FIXED_NS,
                    ns_per_byte: gpu_b.max(1.0 / PAGEABLE_GBPS),
                    ns_per_segment: gpu_s.max(STAGED_NS_PER_SEGMENT),
                }),
                // Small page-locked pieces are packed like pageable ones.
                pinned_packed: None,
                thread_ns_per_byte: thread_ns_per_byte(op),
                // Large pinned jobs: the plateau extrapolation; a ramp is
                // a property of the host, measured by `bench calibrate`.
                pinned_large: None,
                pageable_large: None,
            });
            (op.name().to_string(), OpModel { cpu, gpu })
        })
        .collect();
    CostModel {
        format_version: FORMAT_VERSION,
        identity,
        link: has_gpu.then_some(LinkCost {
            fixed_ns: LINK_FIXED_NS,
            ns_per_byte: 1.0 / PINNED_GBPS,
        }),
        ops,
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::HostMemory;
    use super::*;

    #[test]
    fn shipped_model_covers_every_op_and_validates() {
        let m = shipped(Identity {
            gvault_version: "0".into(),
            cpu_cores: 16,
            gpu_name: Some("H200".into()),
            driver_version: Some(13000),
        });
        m.validate().expect("valid");
        for op in OpKind::ALL {
            assert!(m.op(op).is_some_and(|o| o.gpu.is_some()), "{op}");
        }
        // Pageable host data is priced slower than pinned, pinned slower
        // than device-resident, for large jobs of every op (pieces DMA'd,
        // short enough that serial hashes are not thread-bound; RSA
        // messages are at most 512 bytes, and one GPU thread's whole
        // exponentiation bounds a batch of them on every memory kind).
        for op in OpKind::ALL
            .into_iter()
            .filter(|&op| op != OpKind::RsaPrivate)
        {
            let t = |mem| m.gpu_ns(op, 1 << 30, 4096, 256 << 10, mem).expect("gpu");
            assert!(t(HostMemory::Pageable) > t(HostMemory::Pinned), "{op}");
            assert!(t(HostMemory::Pinned) >= t(HostMemory::Device), "{op}");
        }
        let no_gpu = shipped(Identity::default());
        assert!(no_gpu.link.is_none());
        assert!(no_gpu.ops.values().all(|o| o.gpu.is_none()));
    }
}
