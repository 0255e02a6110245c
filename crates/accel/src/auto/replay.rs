//! Replay (`gvault bench replay`): the auto backend's decisions for every cell of a
//! recorded `bench primitive --json` sweep, under a recorded cost model,
//! set against what each backend measured there. Device time is scarce:
//! this shows what a model change does to the choices before a GPU run.
//!
//! With `--speedup-from-line` the model's CPU speed-ups are first rescaled
//! to what `bench calibrate` now stores (`calibrate::line_speedup`), from
//! the calibration log of the run that wrote the model.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::Deserialize;

use super::calibrate::{line_speedup, size_label};
use super::decide::{decide, Decision, JobShape, Plan, Sides};
use super::defaults::shipped;
use super::file;
use super::forced_split;
use super::model::{CostModel, CpuCost, HostMemory, Identity, LinearCost};
use crate::job::OpKind;

/// A chosen backend this much slower than the other is a wrong choice;
/// closer is a tie (the sweep's run-to-run noise).
const TIE: f64 = 0.95;

/// The replay of the sweep at `sweep` under the model at `model` as text:
/// a table of every cell's decision against what was measured, and a
/// summary of wrong choices. With `speedup_log` (the calibration log of the
/// run that wrote the model), also under the model with each op's CPU
/// speed-up taken over the one-thread line, and what that changes.
pub fn report(model: &Path, sweep: &Path, speedup_log: Option<&Path>) -> Result<String, String> {
    let stored = load_model(model)?;
    let sweep = load_sweep(sweep)?;
    let mut out = String::new();
    let mut models = vec![("model as stored", stored.clone())];
    if let Some(log) = speedup_log {
        let text = std::fs::read_to_string(log)
            .map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        let lines = parse_calibration_log(&text).map_err(|e| format!("{}: {e}", log.display()))?;
        let (rescaled, table) = rescale(&stored, &lines);
        let _ = writeln!(
            out,
            "CPU speed-ups over the one-thread line ({}):",
            log.display()
        );
        out.push_str(&table);
        out.push('\n');
        models.push(("speed-up from the line", rescaled));
    }
    let replays: Vec<Vec<Cell>> = models.iter().map(|(_, m)| replay(m, &sweep)).collect();
    for ((name, _), cells) in models.iter().zip(&replays) {
        let _ = writeln!(out, "{name} ({}):", model.display());
        out.push_str(&cell_table(cells));
        out.push_str(
            "(auto: the split's forced column where there is one; \
             `x?`: the auto column of a run that recorded no plan)\n",
        );
        out.push('\n');
    }
    if let [stored, rescaled] = &replays[..] {
        out.push_str(&changes(stored, rescaled));
    }
    for ((name, _), cells) in models.iter().zip(&replays) {
        out.push_str(&summary(name, cells));
    }
    Ok(out)
}

/// A model file as `auto` loads it, checked against the identity it was
/// measured on (the replay runs elsewhere), with ops it lacks from the
/// shipped defaults.
fn load_model(path: &Path) -> Result<CostModel, String> {
    #[derive(Deserialize)]
    struct Head {
        identity: Identity,
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let head: Head =
        serde_json::from_str(&text).map_err(|e| format!("{}: corrupt: {e}", path.display()))?;
    let mut model = file::read(path, &head.identity)
        .map_err(|e| format!("cost model {}: {e}", path.display()))?;
    model.fill_from(&shipped(head.identity));
    Ok(model)
}

/// One row of a sweep (`bench primitive`'s JSON `rows`).
#[derive(Deserialize, Debug)]
struct SweepRow {
    op: String,
    segment_bytes: u64,
    segments: usize,
    /// Column -> GB/s; JSON writes a non-finite rate as null.
    results: BTreeMap<String, Option<f64>>,
    /// The plan the recording's auto backend chose for page-locked data.
    #[serde(default)]
    auto_pinned_plan: Option<String>,
}

#[derive(Deserialize, Debug)]
struct Sweep {
    threads: usize,
    rows: Vec<SweepRow>,
}

fn load_sweep(path: &Path) -> Result<Sweep, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let sweep: Sweep =
        serde_json::from_str(&text).map_err(|e| format!("{}: corrupt: {e}", path.display()))?;
    if sweep.threads == 0 {
        return Err(format!("{}: a sweep on 0 threads", path.display()));
    }
    Ok(sweep)
}

/// One line of the calibration log:
/// `  sha256: all-core speed-up on 64 x 672KiB: 12.3, 12.0, 12.1 (one thread 1.12 GB/s)`.
#[derive(Clone, Debug, PartialEq)]
struct SpeedupLine {
    op: OpKind,
    segments: usize,
    segment_bytes: u64,
    /// Each round's measured one thread over all threads.
    ratios: Vec<f64>,
    /// The fastest round's one thread on that shape.
    one_thread_gbps: f64,
}

const SPEEDUP_MARK: &str = ": all-core speed-up on ";
/// What `bench calibrate` prints since its speed-ups are over the line.
const LINE_SPEEDUP_MARK: &str = ": all-core speed-up over the one-thread line on ";

/// The speed-up lines of a calibration log; an error where there are none
/// or one is malformed, or where the log's speed-ups are already over the
/// line (rescaling them again would count the gap twice).
fn parse_calibration_log(text: &str) -> Result<Vec<SpeedupLine>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.contains(LINE_SPEEDUP_MARK) {
            return Err(format!(
                "line {}: speed-ups already over the one-thread line; nothing to rescale",
                i + 1
            ));
        }
        if line.contains(SPEEDUP_MARK) {
            out.push(parse_speedup_line(line).map_err(|e| format!("line {}: {e}", i + 1))?);
        }
    }
    if out.is_empty() {
        let mark = SPEEDUP_MARK.trim_matches([':', ' ']);
        return Err(format!("no `{mark}` lines: not a `bench calibrate` log"));
    }
    Ok(out)
}

/// The bytes of a [`size_label`] ("672KiB", "1MiB", "512B").
fn parse_label(label: &str) -> Option<u64> {
    let digits = label.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = label.split_at(digits);
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    n.parse::<u64>().ok()?.checked_mul(1 << shift)
}

fn parse_speedup_line(line: &str) -> Result<SpeedupLine, String> {
    let bad = || format!("not a speed-up line: {line:?}");
    let (op, rest) = line.trim().split_once(SPEEDUP_MARK).ok_or_else(bad)?;
    let op = OpKind::from_name(op).ok_or_else(|| format!("unknown op {op:?}"))?;
    let (shape, rest) = rest.split_once(": ").ok_or_else(bad)?;
    let (segments, size) = shape.split_once(" x ").ok_or_else(bad)?;
    let segments: usize = segments.parse().map_err(|_| bad())?;
    let segment_bytes = parse_label(size).ok_or_else(bad)?;
    let (ratios, rest) = rest.split_once(" (one thread ").ok_or_else(bad)?;
    let ratios = ratios
        .split(", ")
        .map(|r| r.trim().parse::<f64>().map_err(|_| bad()))
        .collect::<Result<Vec<_>, _>>()?;
    let one_thread_gbps: f64 = rest
        .strip_suffix(" GB/s)")
        .ok_or_else(bad)?
        .parse()
        .map_err(|_| bad())?;
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if segments == 0 || segment_bytes == 0 || !positive(one_thread_gbps) {
        return Err(format!("an empty shape or no rate: {line:?}"));
    }
    Ok(SpeedupLine {
        op,
        segments,
        segment_bytes,
        ratios,
        one_thread_gbps,
    })
}

/// What the fixed calibration would have stored for a speed-up of
/// `old_speedup` (measured one thread over all threads) logged as `line`:
/// the all-core time is the logged one-thread time over the old figure,
/// and the new figure the line's time over it ([`line_speedup`]). Without
/// a fixed cost that is old × measured GB/s / the line's GB/s at the shape.
/// (The log's one-thread rate is its fastest round, the stored figure the
/// median round's ratio: close, not exact.)
fn rescaled_speedup(one_thread: &LinearCost, old_speedup: f64, line: &SpeedupLine) -> f64 {
    let bytes = line.segment_bytes * line.segments as u64;
    let one_ns = bytes as f64 / line.one_thread_gbps;
    let all_ns = one_ns / old_speedup.max(1.0);
    line_speedup(one_thread, bytes, line.segments, all_ns).max(1.0)
}

/// `model` with each logged op's CPU speed-up rescaled, and a table of
/// what changed.
fn rescale(model: &CostModel, lines: &[SpeedupLine]) -> (CostModel, String) {
    let mut out = model.clone();
    let mut table = format!(
        "{:<16} {:>12} {:>9} {:>9} {:>8} {:>8} {:>14} {:>14}\n",
        "op", "shape", "1-thr GB/s", "line GB/s", "old", "new", "all-core old", "all-core new"
    );
    for line in lines {
        let Some(m) = out.ops.get_mut(line.op.name()) else {
            let _ = writeln!(table, "{:<16} not in the model", line.op.name());
            continue;
        };
        let old = m.cpu;
        m.cpu.speedup = rescaled_speedup(&old.one_thread, old.speedup, line);
        let bytes = line.segment_bytes * line.segments as u64;
        let n = line.segments;
        // What each figure prices the calibration shape at, all threads.
        let priced = |c: &CpuCost| {
            let ns = c.predict_ns(bytes, n, n, line.segment_bytes, c.threads);
            bytes as f64 / ns
        };
        let _ = writeln!(
            table,
            "{:<16} {:>12} {:>9.2} {:>9.2} {:>7.1}x {:>7.1}x {:>9.1} GB/s {:>9.1} GB/s",
            line.op.name(),
            format!("{n} x {}", size_label(line.segment_bytes as usize)),
            line.one_thread_gbps,
            bytes as f64 / old.one_thread.predict_ns(bytes, n),
            old.speedup,
            m.cpu.speedup,
            priced(&old),
            priced(&m.cpu)
        );
    }
    (out, table)
}

/// One row of the sweep on one kind of host memory, decided.
#[derive(Clone, Debug)]
struct Cell {
    op: String,
    segment_bytes: u64,
    segments: usize,
    mem: HostMemory,
    decision: Option<Decision>,
    /// Measured GB/s: CPU, GPU, auto, and the split matching the
    /// decision's plan ([`measured_split`]).
    cpu: Option<f64>,
    gpu: Option<f64>,
    auto: Option<f64>,
    split: Option<MeasuredSplit>,
    /// The plan the recording chose (page-locked rows of split sweeps).
    recorded: Option<String>,
}

/// Measured columns of each host-memory kind: CPU, GPU, auto.
fn columns(mem: HostMemory) -> [&'static str; 3] {
    match mem {
        HostMemory::Pinned => ["cpu-all-pinned", "gpu-pinned", "auto-pinned"],
        _ => ["cpu-all", "gpu", "auto"],
    }
}

/// Every row of `sweep`, page-locked and pageable, decided on an idle
/// machine of the sweep's threads (as `bench primitive`'s auto column).
fn replay(model: &CostModel, sweep: &Sweep) -> Vec<Cell> {
    let sides = Sides {
        cpu_threads: sweep.threads,
        cores: sweep.threads.max(model.identity.cpu_cores),
        gpu: true,
        cpu_queued_ns: 0.0,
        gpu_queued_ns: 0.0,
    };
    let mut cells = Vec::new();
    for row in &sweep.rows {
        let lengths = vec![row.segment_bytes; row.segments];
        for mem in [HostMemory::Pageable, HostMemory::Pinned] {
            let get = |col: &str| row.results.get(col).copied().flatten();
            let [cpu, gpu, auto_col] = columns(mem).map(get);
            if cpu.is_none() && gpu.is_none() {
                continue;
            }
            let decision = OpKind::from_name(&row.op).map(|op| {
                let shape = JobShape {
                    op,
                    lengths: &lengths,
                    mem,
                };
                decide(model, &shape, &sides)
            });
            let recorded = (mem == HostMemory::Pinned)
                .then_some(row.auto_pinned_plan.as_deref())
                .flatten()
                .and_then(|p| p.split_whitespace().next())
                .map(String::from);
            let split = decision
                .and_then(|d| measured_split(row, mem, d.plan, auto_col, recorded.as_deref()));
            cells.push(Cell {
                op: row.op.clone(),
                segment_bytes: row.segment_bytes,
                segments: row.segments,
                mem,
                decision,
                cpu,
                gpu,
                auto: auto_col,
                split,
                recorded,
            });
        }
    }
    cells
}

/// A split's measured rate, and whether it is known to be of that split.
#[derive(Clone, Copy, Debug, PartialEq)]
struct MeasuredSplit {
    gbps: f64,
    checked: bool,
}

/// The measured rate of `plan` where it is a split: the forced split's
/// column (`--split-sweep`, page-locked), else the auto column where the
/// recording chose the same plan, or (unchecked) recorded no plan.
fn measured_split(
    row: &SweepRow,
    mem: HostMemory,
    plan: Plan,
    auto_col: Option<f64>,
    recorded: Option<&str>,
) -> Option<MeasuredSplit> {
    if !matches!(plan, Plan::Split(_)) {
        return None;
    }
    let forced = match plan {
        Plan::Split(at) if at.offset == 0 && mem == HostMemory::Pinned => row
            .results
            .get(&forced_split::column(at.segment, row.segments))
            .copied()
            .flatten(),
        _ => None,
    };
    let checked = |gbps| MeasuredSplit {
        gbps,
        checked: true,
    };
    match (forced, recorded) {
        (Some(gbps), _) => Some(checked(gbps)),
        (None, Some(r)) if r == forced_split::describe(plan, row.segments) => auto_col.map(checked),
        (None, Some(_)) => None,
        (None, None) => auto_col.map(|gbps| MeasuredSplit {
            gbps,
            checked: false,
        }),
    }
}

/// How a decision fared against what was measured.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Verdict {
    /// The chosen backend measured fastest, or within `TIE` of it.
    Right { ratio: f64 },
    /// The chosen backend measured more than `TIE` slower.
    Wrong { ratio: f64 },
    /// A split: its measured rate over the better single backend's, and
    /// whether that rate is known to be of this split.
    Split { ratio: Option<f64>, checked: bool },
    /// Not enough measured to judge.
    Unknown,
}

impl Cell {
    fn plan(&self) -> String {
        self.decision.map_or("-".into(), |d| {
            forced_split::describe(d.plan, self.segments)
        })
    }

    fn bytes(&self) -> f64 {
        self.segment_bytes as f64 * self.segments as f64
    }

    /// The measured-faster single backend and its rate.
    fn faster(&self) -> Option<(&'static str, f64)> {
        match (self.cpu, self.gpu) {
            (Some(c), Some(g)) if g > c => Some(("gpu", g)),
            (Some(c), _) => Some(("cpu", c)),
            (None, Some(g)) => Some(("gpu", g)),
            (None, None) => None,
        }
    }

    fn verdict(&self) -> Verdict {
        let (Some(d), Some((_, best))) = (self.decision, self.faster()) else {
            return Verdict::Unknown;
        };
        let chosen = match d.plan {
            Plan::Cpu => self.cpu,
            Plan::Gpu => self.gpu,
            Plan::Split(_) => {
                return Verdict::Split {
                    ratio: self.split.map(|s| s.gbps / best),
                    checked: self.split.is_some_and(|s| s.checked),
                };
            }
        };
        match chosen.map(|c| c / best) {
            Some(ratio) if ratio >= TIE => Verdict::Right { ratio },
            Some(ratio) => Verdict::Wrong { ratio },
            None => Verdict::Unknown,
        }
    }

    fn verdict_text(&self) -> String {
        match self.verdict() {
            Verdict::Right { ratio } if ratio >= 1.0 => "yes".into(),
            Verdict::Right { ratio } => format!("tie {ratio:.2}x"),
            Verdict::Wrong { ratio } => format!("NO {ratio:.2}x"),
            Verdict::Split {
                ratio: Some(r),
                checked,
            } => format!(
                "split {}{r:.2}x{}",
                if r >= TIE { "" } else { "LOW " },
                if checked { "" } else { "?" }
            ),
            Verdict::Split { ratio: None, .. } => "split ?".into(),
            Verdict::Unknown => "?".into(),
        }
    }

    /// "op segment count mem", the cell's name in lists.
    fn name(&self) -> String {
        format!(
            "{} {} x {} {}",
            self.op,
            size_label(self.segment_bytes as usize),
            self.segments,
            self.mem.name()
        )
    }
}

fn rate(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// GB/s of `bytes` done in `ns`.
fn priced(bytes: f64, ns: Option<f64>) -> Option<f64> {
    ns.filter(|ns| *ns > 0.0).map(|ns| bytes / ns)
}

fn cell_table(cells: &[Cell]) -> String {
    let mut out = format!(
        "{:<15} {:>7} {:>6} {:<8} {:<10} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} {:<6} {:<15} {}\n",
        "op",
        "segment",
        "count",
        "memory",
        "plan",
        "pred-cpu",
        "pred-gpu",
        "pred-plan",
        "cpu",
        "gpu",
        "auto",
        "faster",
        "picks faster?",
        "recorded plan"
    );
    for c in cells {
        let d = c.decision;
        let _ = writeln!(
            out,
            "{:<15} {:>7} {:>6} {:<8} {:<10} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} {:<6} {:<15} {}",
            c.op,
            size_label(c.segment_bytes as usize),
            c.segments,
            c.mem.name(),
            c.plan(),
            rate(priced(c.bytes(), d.map(|d| d.cpu_finish_ns))),
            rate(priced(c.bytes(), d.and_then(|d| d.gpu_finish_ns))),
            rate(priced(c.bytes(), d.map(|d| d.plan_finish_ns))),
            rate(c.cpu),
            rate(c.gpu),
            rate(c.split.map(|s| s.gbps).or(c.auto)),
            c.faster().map_or("-", |f| f.0),
            c.verdict_text(),
            c.recorded.as_deref().unwrap_or("")
        );
    }
    out
}

/// Cells whose plan differs between the two replays.
fn changes(stored: &[Cell], rescaled: &[Cell]) -> String {
    let mut out = String::from("decisions that change with the speed-up from the line:\n");
    let mut any = false;
    for (a, b) in stored.iter().zip(rescaled) {
        if a.decision.map(|d| d.plan) != b.decision.map(|d| d.plan) {
            any = true;
            let _ = writeln!(
                out,
                "  {:<36} {} ({}) -> {} ({})",
                a.name(),
                a.plan(),
                a.verdict_text(),
                b.plan(),
                b.verdict_text()
            );
        }
    }
    if !any {
        out.push_str("  none\n");
    }
    out.push('\n');
    out
}

/// Wrong choices (> 5% behind the faster backend) and splits measured
/// under `TIE` of the better single backend.
fn summary(name: &str, cells: &[Cell]) -> String {
    let wrong: Vec<&Cell> = cells
        .iter()
        .filter(|c| matches!(c.verdict(), Verdict::Wrong { .. }))
        .collect();
    let low: Vec<&Cell> = cells
        .iter()
        .filter(|c| matches!(c.verdict(), Verdict::Split { ratio: Some(r), .. } if r < TIE))
        .collect();
    let mut out = format!(
        "{name}: {} of {} cells choose the measured-slower backend by > 5%; {} splits under {TIE}x the better backend\n",
        wrong.len(),
        cells.len(),
        low.len()
    );
    for c in wrong.iter().chain(&low) {
        let _ = writeln!(
            out,
            "  {:<36} {} ({})",
            c.name(),
            c.plan(),
            c.verdict_text()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_speedup_line_parses() {
        let l = parse_speedup_line(
            "  aes256gcm-seal: all-core speed-up on 64 x 1MiB: 11.6, 14.5, 14.8 (one thread 7.43 GB/s)",
        )
        .expect("parses");
        assert_eq!(
            l,
            SpeedupLine {
                op: OpKind::AesGcmSeal,
                segments: 64,
                segment_bytes: 1 << 20,
                ratios: vec![11.6, 14.5, 14.8],
                one_thread_gbps: 7.43,
            }
        );
        let l = parse_speedup_line(
            "  sha256: all-core speed-up on 64 x 672KiB: 12.3, 12.0, 12.1 (one thread 1.12 GB/s)",
        )
        .expect("parses");
        assert_eq!((l.segments, l.segment_bytes), (64, 672 << 10));
        // Malformed lines are errors, not panics.
        for bad in [
            "  sha256: all-core speed-up on 64 x 672KiB: 12.3 (one thread fast)",
            "  nope: all-core speed-up on 64 x 1MiB: 1.0 (one thread 1.00 GB/s)",
            "  sha256: all-core speed-up on 0 x 1MiB: 1.0 (one thread 1.00 GB/s)",
            "  sha256: all-core speed-up on 64 x 1MiB: 1.0 (one thread 0.00 GB/s)",
            "  sha256: all-core speed-up on 64 by 1MiB: 1.0 (one thread 1.00 GB/s)",
        ] {
            assert!(parse_speedup_line(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_log_yields_its_speedup_lines_only() {
        let log = "calibrating on 16 cores\n\
            \x20 aes256gcm-seal: all-core speed-up on 64 x 1MiB: 11.6, 14.5, 14.8 (one thread 7.43 GB/s)\n\
            \x20 aes256gcm-seal: cut segments on 16 threads: 45.4 GB/s, 3.61x the fused per-byte cost\n\
            \x20 tea-ctr: all-core speed-up on 64 x 64KiB: 13.2, 15.3, 14.0 (one thread 0.06 GB/s)\n";
        let lines = parse_calibration_log(log).expect("parses");
        let ops: Vec<OpKind> = lines.iter().map(|l| l.op).collect();
        assert_eq!(ops, [OpKind::AesGcmSeal, OpKind::TeaCtr]);
        assert!(parse_calibration_log("nothing here\n").is_err());
        // A log whose speed-ups are over the line already is refused.
        let new = "  md5: all-core speed-up over the one-thread line on 64 x 1MiB: 9.0 \
                   (one thread 0.40 GB/s measured, 0.41 GB/s by the line)\n";
        assert!(parse_calibration_log(new).is_err());
    }

    #[test]
    fn rescaling_takes_the_speedup_over_the_line() {
        let line = SpeedupLine {
            op: OpKind::AesGcmSeal,
            segments: 64,
            segment_bytes: 1 << 20,
            ratios: vec![17.5],
            one_thread_gbps: 6.4,
        };
        // No fixed cost: old x measured GB/s / the line's GB/s.
        let mut one_thread = LinearCost {
            fixed_ns: 0.0,
            ns_per_byte: 1.0 / 11.0,
            ns_per_segment: 0.0,
        };
        let new = rescaled_speedup(&one_thread, 17.5, &line);
        assert!((new - 17.5 * 6.4 / 11.0).abs() < 1e-9, "{new}");
        // A line slower than the measured thread raises the figure.
        one_thread.ns_per_byte = 1.0 / 5.0;
        assert!(rescaled_speedup(&one_thread, 10.0, &line) > 10.0);
        // Per-segment costs count on the line; the figure stays >= 1.
        one_thread = LinearCost {
            fixed_ns: 0.0,
            ns_per_byte: 1.0 / 100.0,
            ns_per_segment: 1_000.0,
        };
        let bytes = 64.0 * (1u64 << 20) as f64;
        let line_gbps = bytes / (bytes / 100.0 + 64_000.0);
        let new = rescaled_speedup(&one_thread, 4.0, &line);
        assert!(
            (new - (4.0 * 6.4 / line_gbps).max(1.0)).abs() < 1e-9,
            "{new}"
        );
        assert_eq!(rescaled_speedup(&one_thread, 1.0, &line), 1.0);
    }

    #[test]
    fn a_split_is_judged_on_its_own_measurement() {
        let results = [("split-2/4", 60.0), ("auto-pinned", 50.0)]
            .map(|(k, v)| (k.to_string(), Some(v)))
            .into();
        let mut row = SweepRow {
            op: "blake3".into(),
            segment_bytes: 16 << 20,
            segments: 4,
            results,
            auto_pinned_plan: Some("split-2/4 (deciding: 5.4 us pinned)".into()),
        };
        let at = |segment| Plan::Split(super::super::decide::SplitPoint { segment, offset: 0 });
        let judge = |row: &SweepRow, plan, recorded: Option<&str>| {
            measured_split(row, HostMemory::Pinned, plan, Some(50.0), recorded)
        };
        let checked = |gbps| {
            Some(MeasuredSplit {
                gbps,
                checked: true,
            })
        };
        // The forced split's own column, whatever auto ran.
        assert_eq!(judge(&row, at(2), Some("split-1/4")), checked(60.0));
        // No column: the auto column only where auto ran this plan.
        row.results.remove("split-2/4");
        assert_eq!(judge(&row, at(2), Some("split-2/4")), checked(50.0));
        assert_eq!(judge(&row, at(2), Some("cpu")), None);
        let unchecked = judge(&row, at(2), None).expect("the auto column");
        assert!(!unchecked.checked);
        // Whole-job plans are not splits.
        assert_eq!(judge(&row, Plan::Cpu, None), None);
    }

    #[test]
    fn rescaling_a_model_touches_only_logged_ops() {
        let model: CostModel =
            serde_json::from_str(include_str!("testdata/h100-without-large-pinned-line.json"))
                .expect("parses");
        let line = parse_speedup_line(
            "  aes256gcm-seal: all-core speed-up on 64 x 1MiB: 11.6, 14.5, 14.8 (one thread 7.43 GB/s)",
        )
        .expect("parses");
        let (out, table) = rescale(&model, &[line]);
        let seal = |m: &CostModel| m.op(OpKind::AesGcmSeal).expect("seal").cpu;
        let c = seal(&model);
        let bytes = 64u64 << 20;
        let line_gbps = bytes as f64 / c.one_thread.predict_ns(bytes, 64);
        let expect = (c.speedup * 7.43 / line_gbps).max(1.0);
        assert!(
            (seal(&out).speedup - expect).abs() < 0.01 * expect,
            "{table}"
        );
        assert_eq!(out.op(OpKind::Sha256), model.op(OpKind::Sha256));
        assert!(table.contains("aes256gcm-seal"), "{table}");
    }
}
