//! Seed 000's throughput figures (§4.3, §4.4): GB/s against segment size,
//! one line per implementation, here one panel per op and one line per
//! measured column (cpu-1, cpu-all, gpu, gpu-pinned, gpu-kernel, auto).
//! Both axes are logarithmic: sizes run 512 B to 1 GiB and rates span
//! several orders of magnitude between small and large segments.
//!
//! Drawn with plotters' bitmap backend and an embedded font, so a figure
//! needs no system font library.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use serde::Deserialize;

use super::measure::size_label;

/// Pixel size of one op's panel, and of the title strip above the panels.
pub const PANEL_WIDTH: u32 = 640;
pub const PANEL_HEIGHT: u32 = 440;
pub const HEADER_HEIGHT: u32 = 48;
/// Panels per row of the figure.
pub const MAX_COLUMNS: usize = 3;

/// Column order in legends, and each column's colour (the same in every
/// figure, so that figures from different machines read alike).
const COLUMNS: [(&str, RGBColor); 6] = [
    ("cpu-1", RGBColor(31, 119, 180)),
    ("cpu-all", RGBColor(44, 160, 44)),
    ("gpu", RGBColor(214, 39, 40)),
    ("gpu-pinned", RGBColor(148, 103, 189)),
    ("gpu-kernel", RGBColor(255, 127, 14)),
    ("auto", RGBColor(0, 0, 0)),
];

const FONT: &[u8] = include_bytes!("../../assets/DejaVuSans-subset.ttf");

/// One measured row of `bench primitive` (its JSON `rows` entries).
#[derive(Deserialize, Debug, Clone)]
pub struct PlotRow {
    pub op: String,
    pub segment_bytes: usize,
    /// Column -> GB/s; JSON writes a non-finite rate as null.
    pub results: BTreeMap<String, Option<f64>>,
}

#[derive(Deserialize)]
struct SavedReport {
    threads: Option<usize>,
    rows: Vec<PlotRow>,
}

#[derive(clap::Args, Debug)]
pub struct PlotArgs {
    /// JSON written by `gvault bench primitive --json` or `--save`; repeat
    /// it to draw the rows of several runs in one figure.
    #[arg(long, value_name = "FILE", required = true)]
    from: Vec<PathBuf>,
    /// PNG to write.
    #[arg(long, value_name = "FILE.png")]
    out: PathBuf,
    /// Figure title [default: from the run's core count and the file name].
    #[arg(long)]
    title: Option<String>,
}

/// `gvault bench plot`: the figure from a saved run.
pub fn run(args: PlotArgs) -> Result<(), String> {
    let mut rows = Vec::new();
    let mut threads = None;
    for from in &args.from {
        let text = std::fs::read_to_string(from)
            .map_err(|e| format!("cannot read {}: {e}", from.display()))?;
        let report = parse_report(&text).map_err(|e| format!("{}: {e}", from.display()))?;
        threads = threads.or(report.threads);
        rows.extend(report.rows);
    }
    let title = args.title.unwrap_or_else(|| {
        let name = args.from[0]
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        match threads {
            Some(t) => format!("{name}: throughput vs segment size, {t} cores"),
            None => format!("{name}: throughput vs segment size"),
        }
    });
    let (w, h) = draw(&rows, &title, &args.out)?;
    println!("wrote {} ({w}x{h})", args.out.display());
    Ok(())
}

/// The report from `--json` output; log lines before the JSON (stdout and
/// stderr saved together) and anything after it are ignored.
fn parse_report(text: &str) -> Result<SavedReport, String> {
    let start = text
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.starts_with('{'))
        .map(|(at, _)| at)
        .ok_or("no JSON object found (expected `gvault bench primitive --json` output)")?;
    serde_json::Deserializer::from_str(&text[start..])
        .into_iter::<SavedReport>()
        .next()
        .ok_or_else(|| "no JSON object found".to_string())?
        .map_err(|e| format!("not a `bench primitive --json` report: {e}"))
}

/// Figure size for `panels` ops.
pub fn figure_size(panels: usize) -> (u32, u32) {
    let cols = panels.clamp(1, MAX_COLUMNS);
    let rows = panels.div_ceil(cols).max(1);
    (
        cols as u32 * PANEL_WIDTH,
        HEADER_HEIGHT + rows as u32 * PANEL_HEIGHT,
    )
}

/// Draws every size-swept op of `rows` (RSA's rows, in ops/s per key size,
/// are left out) into the PNG `out`; returns the figure's size.
pub fn draw(rows: &[PlotRow], title: &str, out: &Path) -> Result<(u32, u32), String> {
    let is_png = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !is_png {
        return Err(format!(
            "{}: the figure is written as PNG; name it *.png",
            out.display()
        ));
    }
    let mut ops: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.op != "rsa-private") {
        if !ops.contains(&r.op.as_str()) {
            ops.push(&r.op);
        }
    }
    if ops.is_empty() {
        return Err("nothing to plot: no size-swept rows (RSA rows are not plotted)".into());
    }
    register_embedded_font()?;
    let size = figure_size(ops.len());
    let fail = |e: String| format!("cannot draw {}: {e}", out.display());
    let root = BitMapBackend::new(out, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (header, body) = root.split_vertically(HEADER_HEIGHT);
    header
        .titled(title, ("sans-serif", 24))
        .map_err(|e| fail(e.to_string()))?;
    let cols = ops.len().clamp(1, MAX_COLUMNS);
    let panels = body.split_evenly((ops.len().div_ceil(cols), cols));
    for (op, area) in ops.iter().zip(&panels) {
        let mut op_rows: Vec<&PlotRow> = rows.iter().filter(|r| r.op == *op).collect();
        op_rows.sort_by_key(|r| r.segment_bytes);
        draw_panel(area, op, &op_rows).map_err(fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(size)
}

pub(crate) fn register_embedded_font() -> Result<(), String> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok =
        *REGISTERED.get_or_init(|| register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    ok.then_some(())
        .ok_or_else(|| "the embedded font did not load".to_string())
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    op: &str,
    rows: &[&PlotRow],
) -> Result<(), String> {
    let rate = |v: &Option<f64>| v.filter(|v| v.is_finite() && *v > 0.0);
    let mut columns: Vec<&str> = rows
        .iter()
        .flat_map(|r| r.results.iter().filter(|(_, v)| rate(v).is_some()))
        .map(|(k, _)| k.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    columns.sort_by_key(|c| {
        COLUMNS
            .iter()
            .position(|(k, _)| k == c)
            .unwrap_or(usize::MAX)
    });

    let bytes = |r: &PlotRow| r.segment_bytes.max(1) as f64;
    let x_min = rows.first().map_or(1.0, |r| bytes(r));
    let x_max = rows.last().map_or(1.0, |r| bytes(r));
    let pad = if x_max > x_min { 1.25 } else { 2.0 };
    let rates = || {
        rows.iter()
            .flat_map(|r| r.results.values().filter_map(rate))
    };
    let (y_min, y_max) = match (rates().reduce(f64::min), rates().reduce(f64::max)) {
        // Whole decades, so that the log axis always has labelled ticks.
        (Some(lo), Some(hi)) => (
            10f64.powf(lo.log10().floor()),
            10f64.powf((hi * 1.05).log10().ceil()),
        ),
        _ => (0.01, 1.0),
    };

    let e = |e: plotters::drawing::DrawingAreaErrorKind<_>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(op, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(
            ((x_min / pad)..(x_max * pad))
                .log_scale()
                .with_key_points(size_ticks(x_min, x_max)),
            (y_min..y_max)
                .log_scale()
                .with_key_points(rate_ticks(y_min, y_max, &[1.0, 2.0, 5.0]))
                .with_light_points(rate_ticks(y_min, y_max, &[3.0, 4.0, 6.0, 7.0, 8.0, 9.0])),
        )
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("segment size")
        .y_desc("GB/s")
        .x_max_light_lines(0)
        .x_label_formatter(&|x| size_tick(*x))
        .y_label_formatter(&|y| rate_tick(*y))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    for (i, column) in columns.iter().enumerate() {
        let color = COLUMNS
            .iter()
            .find(|(k, _)| k == column)
            .map(|(_, c)| *c)
            .unwrap_or_else(|| {
                let (r, g, b) = Palette99::pick(i).rgb();
                RGBColor(r, g, b)
            });
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((bytes(r), rate(r.results.get(*column)?)?)))
            .collect();
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)).point_size(3))
            .map_err(e)?
            .label(*column)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// Ticks of the size axis (bytes): powers of two, at most about 12.
pub(super) fn size_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (lo, hi) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
    let step = (hi - lo + 1).max(1).unsigned_abs().div_ceil(12) as usize;
    (lo..=hi).step_by(step).map(|k| 2f64.powi(k)).collect()
}

/// `mantissas` × every power of ten within `lo..=hi` (GB/s ticks).
pub(super) fn rate_ticks(lo: f64, hi: f64, mantissas: &[f64]) -> Vec<f64> {
    let (first, last) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    (first..=last)
        .flat_map(|d| mantissas.iter().map(move |m| m * 10f64.powi(d)))
        .filter(|v| *v >= lo * 0.999 && *v <= hi * 1.001)
        .collect()
}

/// A tick on the size axis: labelled at powers of two only.
pub(super) fn size_tick(x: f64) -> String {
    let k = x.log2();
    if (k - k.round()).abs() > 1e-6 || !(0.0..=62.0).contains(&k.round()) {
        return String::new();
    }
    size_label(1usize << k.round() as u32)
}

/// "0.0002", "0.5", "12": enough digits for the tick's magnitude.
pub(super) fn rate_tick(y: f64) -> String {
    let decimals = (-y.log10().floor()).max(0.0) as usize + 1;
    let s = format!("{y:.decimals$}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks() {
        assert_eq!(size_tick(512.0), "512B");
        assert_eq!(size_tick(65536.0), "64KiB");
        assert_eq!(size_tick(3000.0), "");
        assert_eq!(rate_tick(0.0002), "0.0002");
        assert_eq!(rate_tick(0.5), "0.5");
        assert_eq!(rate_tick(12.0), "12");
        assert_eq!(
            size_ticks(400.0, 5000.0),
            vec![512.0, 1024.0, 2048.0, 4096.0]
        );
        assert_eq!(size_ticks(512.0, (1u64 << 30) as f64).len(), 11);
        let t = rate_ticks(0.1, 10.0, &[1.0, 2.0, 5.0]);
        assert_eq!(t.len(), 7);
        assert!((t[0] - 0.1).abs() < 1e-12 && (t[6] - 10.0).abs() < 1e-9);
    }

    #[test]
    fn layout() {
        assert_eq!(figure_size(1), (640, 488));
        assert_eq!(figure_size(4), (1920, 928));
    }

    #[test]
    fn report_after_log_lines() {
        let text = "gpu: unavailable (x)\n{\"threads\": 2, \"rows\": [], \"reference\": {}}\nlog\n";
        let r = parse_report(text).unwrap();
        assert_eq!(r.threads, Some(2));
        assert!(parse_report("no json here").is_err());
    }
}
