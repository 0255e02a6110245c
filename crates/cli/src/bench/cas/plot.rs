//! `bench cas --plot`: one panel per workload (and repository file
//! system), three bars per configuration (chunker / backend): first
//! backup, second backup, restore, in GB/s.

use std::path::Path;

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::super::plot::{
    register_embedded_font, HEADER_HEIGHT, MAX_COLUMNS, PANEL_HEIGHT, PANEL_WIDTH,
};
use super::Row;

const BARS: [(&str, RGBColor); 3] = [
    ("backup 1", RGBColor(31, 119, 180)),
    ("backup 2", RGBColor(44, 160, 44)),
    ("restore", RGBColor(214, 39, 40)),
];

pub fn draw(rows: &[Row], out: &Path) -> Result<(), String> {
    if !out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"))
    {
        return Err(format!(
            "{}: the figure is PNG; name it *.png",
            out.display()
        ));
    }
    let mut panels: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.workload.clone(), r.repo_fs.clone());
        if !panels.contains(&k) {
            panels.push(k);
        }
    }
    if panels.is_empty() {
        return Err("nothing to plot".into());
    }
    register_embedded_font()?;
    let cols = panels.len().clamp(1, MAX_COLUMNS);
    let size = (
        PANEL_WIDTH * cols as u32,
        HEADER_HEIGHT + PANEL_HEIGHT * panels.len().div_ceil(cols) as u32,
    );
    let fail = |e: String| format!("cannot draw {}: {e}", out.display());
    let root = BitMapBackend::new(out, size).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(e.to_string()))?;
    let (header, body) = root.split_vertically(HEADER_HEIGHT);
    header
        .titled(
            "gvault bench cas: backup and restore throughput",
            ("sans-serif", 24),
        )
        .map_err(|e| fail(e.to_string()))?;
    let areas = body.split_evenly((panels.len().div_ceil(cols), cols));
    for ((w, fs), area) in panels.iter().zip(&areas) {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| &r.workload == w && &r.repo_fs == fs)
            .collect();
        panel(area, &format!("{w} → {fs}"), &mine).map_err(fail)?;
    }
    root.present().map_err(|e| fail(e.to_string()))
}

fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    rows: &[&Row],
) -> Result<(), String> {
    let e = |e: plotters::drawing::DrawingAreaErrorKind<_>| e.to_string();
    let value = |r: &Row, k: usize| [r.backup1_gbps, r.backup2_gbps, r.restore_gbps][k];
    let y_max = rows
        .iter()
        .flat_map(|r| (0..3).map(move |k| value(r, k)))
        .filter(|v| v.is_finite())
        .fold(0.1f64, f64::max)
        * 1.35;
    let n = rows.len();
    let labels: Vec<String> = rows
        .iter()
        .map(|r| format!("{}/{}", r.chunker, r.backend))
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n as f64, -y_max * 0.08..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("GB/s")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    // Configuration names under their bars (the band below zero).
    let style =
        TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Center));
    chart
        .draw_series(
            labels
                .iter()
                .enumerate()
                .map(|(i, l)| Text::new(l.clone(), (i as f64 + 0.5, -y_max * 0.04), style.clone())),
        )
        .map_err(e)?;
    for (k, (name, color)) in BARS.iter().enumerate() {
        let bars = rows.iter().enumerate().filter_map(|(i, r)| {
            let v = value(r, k);
            v.is_finite().then(|| {
                let x0 = i as f64 + 0.1 + k as f64 * 0.27;
                Rectangle::new([(x0, 0.0), (x0 + 0.25, v)], color.filled())
            })
        });
        chart
            .draw_series(bars)
            .map_err(e)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    Ok(())
}
