//! The model as a table: CPU and GPU rates and the cross-overs per op.

use std::fmt::Write;

use super::super::decide::{crossover, Crossover};
use super::super::model::{CostModel, HostMemory, LinearCost};
use crate::job::OpKind;

/// Segments in the jobs cross-overs are reported for.
pub const CROSSOVER_SEGMENTS: usize = 64;

/// "512B", "64KiB", "1GiB".
pub(crate) fn size_label(n: usize) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{}GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}

/// A large pinned line as "1.9 ms + 49.0 GB/s".
pub(super) fn describe_ramp(l: LinearCost) -> String {
    format!("{:.1} ms + {} GB/s", l.fixed_ns / 1e6, gbps(l.ns_per_byte))
}

fn gbps(ns_per_byte: f64) -> String {
    if ns_per_byte > 0.0 {
        format!("{:.2}", 1.0 / ns_per_byte)
    } else {
        "-".into()
    }
}

fn describe(c: Crossover) -> String {
    match c {
        Crossover::NoGpu => "no GPU".into(),
        Crossover::GpuNeverFaster => "GPU never faster".into(),
        Crossover::GpuAlwaysFaster => "GPU always faster".into(),
        Crossover::At(size) => format!("GPU from {}", approx_size(size)),
        Crossover::AtMessages(n) => format!(
            "GPU from {n} messages of {} bits",
            super::super::decide::RSA_SHOWN_LEN * 8
        ),
    }
}

fn approx_size(n: u64) -> String {
    let p = n.next_power_of_two();
    // Round to a power of two for display when close; exact otherwise.
    if p - n < p / 8 {
        size_label(p as usize)
    } else {
        format!("{:.0} KiB", n as f64 / 1024.0)
    }
}

/// The model as a table: CPU and GPU rates and the cross-overs per op, for
/// host data in pinned and in pageable memory, the CPU on `cpu_threads`.
pub fn model_table(model: &CostModel, cpu_threads: usize) -> String {
    let mut out = String::new();
    if let Some(l) = model.link {
        let _ = writeln!(
            out,
            "link: {:.1} µs + {} GB/s (pinned, host to device)",
            l.fixed_ns / 1e3,
            gbps(l.ns_per_byte)
        );
    }
    let _ = writeln!(
        out,
        "{:<16} {:>8} {:>10} {:>8} {:>8} {:>10} {:>19} {:>10} {:>19} {:>11}  cross-over ({CROSSOVER_SEGMENTS}-segment jobs, {cpu_threads} CPU threads)",
        "op", "cpu µs", "cpu-1 GB/s", "speedup", "gpu µs", "pinned", "pinned > 32 MiB", "pageable", "pageable > 64 MiB", "kernel GB/s"
    );
    for op in OpKind::ALL {
        let Some(m) = model.op(op) else { continue };
        let c = m.cpu.one_thread;
        let line = |mem| model.gpu_cost(op, mem);
        let (gpu_fixed, pinned, pageable, kernel) = match m.gpu {
            Some(_) => (
                line(HostMemory::Pinned)
                    .map(|h| format!("{:.1}", h.fixed_ns / 1e3))
                    .unwrap_or_else(|| "-".into()),
                line(HostMemory::Pinned).map_or("-".into(), |h| gbps(h.ns_per_byte)),
                line(HostMemory::Pageable).map_or("-".into(), |h| gbps(h.ns_per_byte)),
                line(HostMemory::Device).map_or("-".into(), |h| gbps(h.ns_per_byte)),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let cpu_rate = if op == OpKind::RsaPrivate {
            format!("{:.0}/s", 1e9 / c.ns_per_segment.max(1.0))
        } else {
            gbps(c.ns_per_byte)
        };
        let crossovers = if m.gpu.is_none() {
            describe(Crossover::NoGpu)
        } else {
            HostMemory::HOST
                .iter()
                .map(|&mem| {
                    let c = crossover(model, op, CROSSOVER_SEGMENTS, cpu_threads, mem);
                    format!("{}: {}", mem.name(), describe(c))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        // The measured line of large pinned jobs, where calibrated (else
        // they are priced on the plateau of link and kernel).
        let large = m
            .gpu
            .and_then(|g| g.pinned_large)
            .map_or("-".into(), describe_ramp);
        let pageable_large = m
            .gpu
            .and_then(|g| g.pageable_large)
            .map_or("-".into(), describe_ramp);
        let _ = writeln!(
            out,
            "{:<16} {:>8.1} {:>10} {:>7.1}x {:>8} {:>10} {:>19} {:>10} {:>19} {:>11}  {crossovers}",
            op.name(),
            c.fixed_ns / 1e3,
            cpu_rate,
            m.cpu.speedup_at(cpu_threads),
            gpu_fixed,
            pinned,
            large,
            pageable,
            pageable_large,
            kernel,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_table_shows_large_pinned_and_pageable_lines_where_present() {
        let mut m: CostModel = serde_json::from_str(include_str!(
            "../testdata/h100-without-large-pinned-line.json"
        ))
        .expect("parses");
        let gpu = m.ops.get_mut("aes256gcm-seal").and_then(|o| o.gpu.as_mut());
        gpu.expect("a GPU").pinned_large = Some(LinearCost {
            fixed_ns: 1.9e6,
            ns_per_byte: 1.0 / 49.0,
            ns_per_segment: 0.0,
        });
        let gpu = m.ops.get_mut("sha256").and_then(|o| o.gpu.as_mut());
        gpu.expect("a GPU").pageable_large = Some(LinearCost {
            fixed_ns: 3.1e6,
            ns_per_byte: 1.0 / 37.0,
            ns_per_segment: 0.0,
        });
        let table = model_table(&m, 16);
        let row = |op: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("{op} ")))
                .unwrap_or_else(|| panic!("no {op} row in\n{table}"))
                .to_string()
        };
        assert!(table.contains("pinned > 32 MiB"), "{table}");
        assert!(
            row("aes256gcm-seal").contains("1.9 ms + 49.00 GB/s"),
            "{table}"
        );
        assert!(!row("aes256gcm-open").contains(" ms + "), "{table}");
        assert!(table.contains("pageable > 64 MiB"), "{table}");
        assert!(row("sha256").contains("3.1 ms + 37.00 GB/s"), "{table}");
    }
}
