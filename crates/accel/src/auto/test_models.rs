//! Synthetic cost models for the auto backend's unit tests (decide,
//! learn): one place, so the two suites price alike.

use super::model::{CostModel, CpuCost, GpuCost, Identity, LinearCost, OpModel};
use crate::job::OpKind;

/// Every op: the CPU at `cpu_gbps` a core, `threads` cores at full
/// speed-up, 2 µs to start; the GPU 20 µs a job, `pinned` / `pageable`
/// GB/s from host memory and `resident` from its own.
pub(crate) fn model_with(
    threads: usize,
    cpu_gbps: f64,
    pinned: f64,
    pageable: f64,
    resident: f64,
) -> CostModel {
    let host = |gbps: f64| LinearCost {
        fixed_ns: 20_000.0,
        ns_per_byte: 1.0 / gbps,
        ns_per_segment: 10.0,
    };
    let ops = OpKind::ALL
        .iter()
        .map(|op| {
            let m = OpModel {
                cpu: CpuCost {
                    one_thread: LinearCost {
                        fixed_ns: 2_000.0,
                        ns_per_byte: 1.0 / cpu_gbps,
                        ns_per_segment: 100.0,
                    },
                    threads,
                    speedup: threads as f64,
                    cut_cost: None,
                    small_speedup: None,
                },
                gpu: Some(GpuCost {
                    kernel: host(resident),
                    pinned: Some(host(pinned)),
                    pageable: Some(host(pageable)),
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
        format_version: super::model::FORMAT_VERSION,
        identity: Identity::default(),
        link: None,
        ops,
    }
}
