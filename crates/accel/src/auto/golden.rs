//! Golden decisions: what the dispatcher decides for every fixture model in
//! `testdata/` and the shipped defaults, over a grid of job shapes, compared
//! with `testdata/decisions.golden`. A refactoring that keeps this test
//! passing decides exactly as before (plans, split points, CPU threads of a
//! split, and the predicted finish times bit for bit, hashed per line).
//!
//! On a mismatch the recomputed table is written next to the system's
//! temporary files (the path is in the failure message): diff it against
//! the golden file, and copy it over only for an intended change.
//!
//! Grid, per model and op of `OpKind::ALL`:
//! - shapes: equal segments of 512 B, 4 KiB, 64 KiB, 256 KiB, 1 MiB,
//!   16 MiB, 64 MiB, 256 MiB and 1 GiB, 1 to 16384 of them (16 GiB at most
//!   in all), plus uneven segments (not multiples of a block) of 64 KiB and
//!   up, 4 and 64 of them, so that split points fall inside segments;
//! - memory: page-locked, pageable, device-resident;
//! - sides: idle on 16 of 16 cores; 4 of 16 cores; 10 ms queued on the
//!   GPU; 10 ms queued on the CPU.
//!
//! Each entry is the plan (`C`, `G`, or `S<segment>+<offset>/<threads>` for
//! a split with its CPU part's threads), marked `*` where the auto backend's
//! screen (both memory kinds sketched as CPU) skips asking whether the host
//! memory is page-locked. Crossovers (`crossover`) follow each model.
//! Assumes `GVAULT_SPLIT_MARGIN` is unset.

use std::fmt::Write as _;

use super::decide::{
    crossover, decide_stats, sketch, Decision, JobStats, OpCosts, Plan, Sides, Sketch,
};
use super::defaults::shipped;
use super::model::{CostModel, HostMemory, Identity};
use crate::job::OpKind;

const GOLDEN: &str = include_str!("testdata/decisions.golden");

/// Every fixture model, by file name.
fn models() -> Vec<(String, CostModel)> {
    let fixtures: [(&str, &str); 9] = [
        (
            "h100-derived-stage-lines.json",
            include_str!("testdata/h100-derived-stage-lines.json"),
        ),
        (
            "h100-gcm-speedup-5.json",
            include_str!("testdata/h100-gcm-speedup-5.json"),
        ),
        (
            "h100-blake3-near-ties.json",
            include_str!("testdata/h100-blake3-near-ties.json"),
        ),
        (
            "h100-without-large-pinned-line.json",
            include_str!("testdata/h100-without-large-pinned-line.json"),
        ),
        (
            "h100-warm-large-pinned-lines.json",
            include_str!("testdata/h100-warm-large-pinned-lines.json"),
        ),
        (
            "h100-fast-core-large-pinned-lines.json",
            include_str!("testdata/h100-fast-core-large-pinned-lines.json"),
        ),
        (
            "h100-packed-blake3-stages.json",
            include_str!("testdata/h100-packed-blake3-stages.json"),
        ),
        (
            "h100-small-piece-speedup.json",
            include_str!("testdata/h100-small-piece-speedup.json"),
        ),
        (
            "h100-one-cpu-speedup.json",
            include_str!("testdata/h100-one-cpu-speedup.json"),
        ),
    ];
    let mut out = vec![(
        "shipped defaults, 16 cores and a GPU".to_string(),
        shipped(Identity {
            gvault_version: "0".into(),
            cpu_cores: 16,
            gpu_name: Some("GPU".into()),
            driver_version: Some(13000),
        }),
    )];
    for (name, json) in fixtures {
        let m: CostModel = serde_json::from_str(json).expect("a fixture parses");
        m.validate().expect("a fixture is valid");
        out.push((name.to_string(), m));
    }
    out
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// (name, segment lengths) of every shape in the grid.
fn shapes() -> Vec<(String, Vec<u64>)> {
    let sizes = [
        512,
        4 * KIB,
        64 * KIB,
        256 * KIB,
        MIB,
        16 * MIB,
        64 * MIB,
        256 * MIB,
        GIB,
    ];
    let mut out = Vec::new();
    for size in sizes {
        for n in [1usize, 4, 16, 64, 1024, 16384] {
            if size * n as u64 <= 16 * GIB {
                out.push((format!("{size}x{n}"), vec![size; n]));
            }
        }
    }
    for size in sizes.into_iter().filter(|s| *s >= 64 * KIB) {
        for n in [4usize, 64] {
            let lengths = (0..n as u64)
                .map(|i| size / 2 + (i * 7919 * 1031 + 13) % size)
                .collect();
            out.push((format!("~{size}x{n}"), lengths));
        }
    }
    out
}

fn sides() -> [Sides; 4] {
    let idle = Sides {
        cpu_threads: 16,
        cores: 16,
        gpu: true,
        cpu_queued_ns: 0.0,
        gpu_queued_ns: 0.0,
    };
    [
        idle,
        Sides {
            cpu_threads: 4,
            ..idle
        },
        Sides {
            gpu_queued_ns: 10e6,
            ..idle
        },
        Sides {
            cpu_queued_ns: 10e6,
            ..idle
        },
    ]
}

/// FNV-1a, 64 bits: enough to tell two tables of numbers apart.
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *hash ^= u64::from(*b);
        *hash = hash.wrapping_mul(0x100_0000_01b3);
    }
}

fn plan(d: &Decision) -> String {
    match d.plan {
        Plan::Cpu => "C".into(),
        Plan::Gpu => "G".into(),
        Plan::Split(p) => format!("S{}+{}/{}", p.segment, p.offset, d.split_cpu_threads),
    }
}

/// The whole table, as the golden file holds it.
fn table() -> String {
    let mut out = String::new();
    let shapes = shapes();
    let sides = sides();
    for (name, model) in models() {
        let _ = writeln!(out, "# {name}");
        let costs = OpCosts::all(&model);
        for (op, c) in OpKind::ALL.iter().zip(&costs) {
            for (shape, lengths) in &shapes {
                let mut line = format!("{op} {shape}");
                let mut hash = 0xcbf2_9ce4_8422_2325u64;
                for mem in [HostMemory::Pinned, HostMemory::Pageable, HostMemory::Device] {
                    line.push_str(&format!(" | {}", mem.name()));
                    let stats = JobStats::of_lengths(lengths, mem);
                    for s in &sides {
                        let d = decide_stats(c, &stats, s, || lengths.iter().copied());
                        line.push(' ');
                        line.push_str(&plan(&d));
                        let screened = mem != HostMemory::Device
                            && [HostMemory::Pageable, HostMemory::Pinned].iter().all(|&m| {
                                sketch(c, &JobStats { mem: m, ..stats }, s).0 == Sketch::Cpu
                            });
                        if screened {
                            line.push('*');
                        }
                        let gpu = d.gpu_finish_ns.map_or(u64::MAX, f64::to_bits);
                        for v in [d.cpu_finish_ns.to_bits(), gpu, d.plan_finish_ns.to_bits()] {
                            fnv(&mut hash, &v.to_le_bytes());
                        }
                    }
                }
                let _ = writeln!(out, "{line} | {hash:016x}");
            }
            let mut cross = format!("{op} crossover");
            for mem in [HostMemory::Pinned, HostMemory::Pageable, HostMemory::Device] {
                for (segments, threads) in [(1, 1), (1, 16), (64, 16)] {
                    let x = crossover(&model, *op, segments, threads, mem);
                    let _ = write!(cross, " {}/{segments}/{threads}:{x:?}", mem.name());
                }
            }
            let _ = writeln!(out, "{cross}");
        }
    }
    out
}

#[test]
fn decisions_match_the_golden_table() {
    let now = table();
    if now == GOLDEN {
        return;
    }
    let path = std::env::temp_dir().join("gvault-decisions.golden");
    let written = std::fs::write(&path, &now).is_ok();
    let first = now
        .lines()
        .zip(GOLDEN.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| now.lines().count().min(GOLDEN.lines().count()));
    panic!(
        "decisions differ from testdata/decisions.golden, first at line {}:\n  now:    {}\n  golden: {}\n\
         the table now is in {} ({})",
        first + 1,
        now.lines().nth(first).unwrap_or("(end)"),
        GOLDEN.lines().nth(first).unwrap_or("(end)"),
        path.display(),
        if written { "written" } else { "could not be written" },
    );
}
