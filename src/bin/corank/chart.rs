//! The bench's PNG chart: merge throughput (million rows/s) by contender and input size.

use crate::bench::Measurement;
use corank::{Error, Result};
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;

/// DejaVu Sans (Bitstream Vera license, `assets/fonts/DejaVuSans.LICENSE`): plotters draws
/// text with a font it is given, not the system's.
static FONT: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

const COLORS: [RGBColor; 6] = [
    RGBColor(118, 185, 0),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

pub fn draw(path: &Path, results: &[Measurement]) -> Result<()> {
    if results.is_empty() {
        return Err(Error::InvalidArgument("no measurements to chart".into()));
    }
    let err = |e: &dyn std::fmt::Display| Error::File { path: path.to_path_buf(), detail: format!("drawing the chart: {e}") };
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).map_err(|_| err(&"the embedded font is invalid"))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(path, "drawing the chart", e))?;
    }
    let rate = |m: &Measurement| m.rows as f64 / m.seconds / 1e6;
    let max_rate = results.iter().map(rate).fold(0.0, f64::max) * 1.15;
    let min_rows = results.iter().map(|m| m.rows).min().unwrap_or(1) as f64 / 1e6;
    let max_rows = results.iter().map(|m| m.rows).max().unwrap_or(1) as f64 / 1e6;
    let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("Merging 16 sorted Parquet files into one (higher is better)", ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((min_rows * 0.8..max_rows * 1.25).log_scale(), 0.0..max_rate)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("input rows (millions, log scale)")
        .y_desc("million rows / s")
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    let mut names: Vec<&str> = Vec::new();
    for m in results {
        if !names.contains(&m.contender.as_str()) {
            names.push(&m.contender);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = results.iter().filter(|m| m.contender == *name).map(|m| (m.rows as f64 / 1e6, rate(m))).collect();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(3)))
            .map_err(|e| err(&e))?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(points.into_iter().map(|p| Circle::new(p, 5, color.filled()))).map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
