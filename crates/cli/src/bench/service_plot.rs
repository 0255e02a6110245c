//! The figure of `gvault bench service --plot`: a row of panels per op, a
//! panel per client count, each GB/s over all clients against request size
//! with one line per mode (in-process, service, service-nobatch), so that
//! a panel shows the service's overhead and batching's gain at one
//! concurrency, and a row how they change with it. Panels of one op share
//! their GB/s axis. Both axes are logarithmic, as in `bench plot`'s
//! figures, and drawn with the same embedded font.

use std::path::Path;

use plotters::prelude::*;

use super::plot::{
    rate_tick, rate_ticks, register_embedded_font, size_tick, size_ticks, HEADER_HEIGHT,
};
use super::service::{Mode, MODES};

/// Pixel size of one panel.
pub const PANEL_WIDTH: u32 = 560;
pub const PANEL_HEIGHT: u32 = 420;

/// Each mode's colour (the same in every figure).
pub fn color(mode: &str) -> RGBColor {
    match mode {
        m if m == Mode::InProcess.name() => RGBColor(31, 119, 180),
        m if m == Mode::Service.name() => RGBColor(214, 39, 40),
        m if m == Mode::NoBatch.name() => RGBColor(255, 127, 14),
        _ => RGBColor(0, 0, 0),
    }
}

/// One measured figure: a mode's GB/s in one cell.
pub struct Point<'a> {
    pub op: &'a str,
    pub size: usize,
    pub clients: usize,
    pub mode: &'a str,
    pub gbps: f64,
}

/// Figure size for `ops` rows of `client_counts` panels.
pub fn figure_size(ops: usize, client_counts: usize) -> (u32, u32) {
    (
        client_counts.max(1) as u32 * PANEL_WIDTH,
        HEADER_HEIGHT + ops.max(1) as u32 * PANEL_HEIGHT,
    )
}

/// Draws `points` into the PNG `out`; returns the figure's size.
pub fn draw(points: &[Point<'_>], title: &str, out: &Path) -> Result<(u32, u32), String> {
    if !out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"))
    {
        return Err(format!(
            "{}: the figure is written as PNG; name it *.png",
            out.display()
        ));
    }
    let points: Vec<&Point<'_>> = points
        .iter()
        .filter(|p| p.gbps.is_finite() && p.gbps > 0.0)
        .collect();
    let mut ops: Vec<&str> = Vec::new();
    let mut counts: Vec<usize> = Vec::new();
    for p in &points {
        if !ops.contains(&p.op) {
            ops.push(p.op);
        }
        if !counts.contains(&p.clients) {
            counts.push(p.clients);
        }
    }
    counts.sort_unstable();
    if ops.is_empty() {
        return Err("nothing to plot: no positive rates".into());
    }
    register_embedded_font()?;
    let size = figure_size(ops.len(), counts.len());
    let fail = |e: String| format!("cannot draw {}: {e}", out.display());
    let root = BitMapBackend::new(out, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (header, body) = root.split_vertically(HEADER_HEIGHT);
    header
        .titled(title, ("sans-serif", 22))
        .map_err(|e| fail(e.to_string()))?;
    let panels = body.split_evenly((ops.len(), counts.len()));
    let x_lo = points.iter().map(|p| p.size).min().unwrap_or(1).max(1) as f64;
    let x_hi = points.iter().map(|p| p.size).max().unwrap_or(1).max(1) as f64;
    for (row, op) in ops.iter().enumerate() {
        let of_op: Vec<&&Point<'_>> = points.iter().filter(|p| p.op == *op).collect();
        // One GB/s axis per row, in whole decades.
        let lo = of_op.iter().map(|p| p.gbps).fold(f64::MAX, f64::min);
        let hi = of_op.iter().map(|p| p.gbps).fold(f64::MIN, f64::max);
        let y = (
            10f64.powf(lo.log10().floor()),
            10f64.powf((hi * 1.05).log10().ceil()),
        );
        for (col, &n) in counts.iter().enumerate() {
            let area = &panels[row * counts.len() + col];
            let mine: Vec<&Point<'_>> = of_op
                .iter()
                .filter(|p| p.clients == n)
                .map(|p| **p)
                .collect();
            let caption = format!("{op}, {n} client{}", if n == 1 { "" } else { "s" });
            draw_panel(area, &caption, &mine, (x_lo, x_hi), y).map_err(fail)?;
        }
    }
    root.present().map_err(|e| fail(e.to_string()))?;
    Ok(size)
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    caption: &str,
    points: &[&Point<'_>],
    (x_min, x_max): (f64, f64),
    (y_min, y_max): (f64, f64),
) -> Result<(), String> {
    let pad = if x_max > x_min { 1.25 } else { 2.0 };
    let e = |e: plotters::drawing::DrawingAreaErrorKind<_>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            ((x_min / pad)..(x_max * pad))
                .log_scale()
                .with_key_points(size_ticks(x_min, x_max)),
            (y_min..y_max)
                .log_scale()
                .with_key_points(rate_ticks(y_min, y_max, &[1.0, 2.0, 5.0])),
        )
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("request size")
        .y_desc("GB/s, all clients")
        .x_max_light_lines(0)
        .y_max_light_lines(0)
        .x_label_formatter(&|x| size_tick(*x))
        .y_label_formatter(&|y| rate_tick(*y))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(e)?;
    for mode in MODES.map(Mode::name) {
        let mut line: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.mode == mode)
            .map(|p| (p.size.max(1) as f64, p.gbps))
            .collect();
        if line.is_empty() {
            continue;
        }
        line.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = color(mode);
        chart
            .draw_series(LineSeries::new(line, c.stroke_width(2)).point_size(3))
            .map_err(e)?
            .label(mode)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(e)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_ticks() {
        assert_eq!(figure_size(3, 4), (4 * 560, 48 + 3 * 420));
        assert_eq!(figure_size(1, 2), (1120, 468));
        assert_eq!(size_ticks(512.0, (16 << 20) as f64).len(), 8);
        assert_eq!(size_tick(4096.0), "4KiB");
        assert_eq!(rate_tick(0.05), "0.05");
        assert_eq!(color("service"), RGBColor(214, 39, 40));
    }

    #[test]
    fn refuses_other_formats_and_nothing() {
        let p = [Point {
            op: "sha256",
            size: 4096,
            clients: 1,
            mode: "service",
            gbps: 1.0,
        }];
        assert!(draw(&p, "t", Path::new("x.jpg"))
            .unwrap_err()
            .contains("*.png"));
        let zero = [Point { gbps: 0.0, ..p[0] }];
        assert!(draw(&zero, "t", Path::new("x.png"))
            .unwrap_err()
            .contains("nothing to plot"));
    }
}
