//! The comparison's PNG chart: merge throughput (million rows/s) by contender and input size,
//! one panel per dataset (stacked), the x axis labelled with the measured sizes.

use super::measure::Measurement;
use corank::{Error, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::Path;

/// DejaVu Sans (Bitstream Vera license, `assets/fonts/DejaVuSans.LICENSE`): plotters draws
/// text with a font it is given, not the system's.
static FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

const COLORS: [RGBColor; 7] = [
    RGBColor(118, 185, 0),
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

/// A panel's size in pixels (the chart stacks one per dataset).
const SIZE: (u32, u32) = (960, 560);
/// Pixels of the margin and of the x axis' label area (tick labels, then the axis title).
const MARGIN: u32 = 16;
const X_LABEL_AREA: u32 = 48;

/// Draws `results` to the PNG `path`: one panel per dataset, in their first-seen order,
/// each titled `<dataset>: <title>`; every contender keeps its colour across panels.
pub fn draw(path: &Path, title: &str, results: &[Measurement]) -> Result<()> {
    if results.is_empty() {
        return Err(Error::InvalidArgument("no measurements to chart".into()));
    }
    let err = |e: &dyn std::fmt::Display| Error::File { path: path.to_path_buf(), detail: format!("drawing the chart: {e}") };
    register_font().map_err(|e| err(&e))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(path, "drawing the chart", e))?;
    }
    let (width, height) = (SIZE.0, SIZE.1 * datasets(results).len() as u32);
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (width, height)).into_drawing_area();
        plot_all(&root, title, results).map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    std::fs::write(path, super::png::encode_rgb(width, height, &rgb)).map_err(|e| Error::io(path, "writing the chart", e))
}

/// The datasets of `results`, in their first-seen order.
fn datasets(results: &[Measurement]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for m in results {
        if !names.contains(&m.dataset.as_str()) {
            names.push(&m.dataset);
        }
    }
    names
}

/// One panel per dataset on `root`, stacked.
fn plot_all<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, title: &str, results: &[Measurement]) -> std::result::Result<(), String> {
    let mut contenders: Vec<&str> = Vec::new();
    for m in results {
        if !contenders.contains(&m.contender.as_str()) {
            contenders.push(&m.contender);
        }
    }
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let names = datasets(results);
    for (area, dataset) in root.split_evenly((names.len(), 1)).iter().zip(&names) {
        let at: Vec<Measurement> = results.iter().filter(|m| m.dataset == *dataset).cloned().collect();
        plot(area, &format!("{dataset}: {title} (higher is better)"), &contenders, &at)?;
    }
    Ok(())
}

fn register_font() -> std::result::Result<(), &'static str> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).map_err(|_| "the embedded font is invalid")
}

/// Draws the chart of `results` (not empty) on `root`; `contenders` fixes the colours.
fn plot<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    caption: &str,
    contenders: &[&str],
    results: &[Measurement],
) -> std::result::Result<(), String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let rate = |m: &Measurement| m.rows as f64 / m.seconds / 1e6;
    let max_rate = results.iter().map(rate).fold(0.0, f64::max) * 1.15;
    let min_rows = results.iter().map(|m| m.rows).min().unwrap_or(1) as f64 / 1e6;
    let max_rows = results.iter().map(|m| m.rows).max().unwrap_or(1) as f64 / 1e6;
    let mut chart = ChartBuilder::on(root)
        .caption(caption, ("sans-serif", 22))
        .margin(MARGIN)
        .x_label_area_size(X_LABEL_AREA)
        .y_label_area_size(64)
        .build_cartesian_2d((min_rows * 0.8..max_rows * 1.25).log_scale().with_key_points(x_ticks(results)), 0.0..max_rate)
        .map_err(|e| err(&e))?;
    // The x axis is labelled at the measured sizes (a log axis over less than a decade has
    // no key points of its own, so it had no labels).
    chart
        .configure_mesh()
        .x_desc("input rows (log scale)")
        .y_desc("million rows / s")
        .x_label_formatter(&|millions: &f64| show_rows(millions * 1e6))
        .y_label_formatter(&|rate: &f64| format!("{rate:.*}", decimals(max_rate / 10.0)))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(|e| err(&e))?;
    for (i, name) in contenders.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        if !results.iter().any(|m| m.contender == *name) {
            continue;
        }
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
    Ok(())
}

/// The x axis' ticks: every measured size, in millions of rows, ascending.
fn x_ticks(results: &[Measurement]) -> Vec<f64> {
    let mut sizes: Vec<usize> = results.iter().map(|m| m.rows).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.into_iter().map(|rows| rows as f64 / 1e6).collect()
}

/// Decimals that tell apart values `step` apart: 0 for 1 and more, 1 for 0.1, 2 for 0.05.
fn decimals(step: f64) -> usize {
    if step.is_finite() && step > 0.0 {
        (-step.log10()).ceil().clamp(0.0, 6.0) as usize
    } else {
        1
    }
}

/// A size as a tick label: `1M`, `20M`, `2.5M`, `250k`, `100`.
pub fn show_rows(rows: f64) -> String {
    let rows = rows.round();
    let (value, unit) = if rows >= 1e9 {
        (rows / 1e9, "G")
    } else if rows >= 1e6 {
        (rows / 1e6, "M")
    } else if rows >= 1e3 {
        (rows / 1e3, "k")
    } else {
        (rows, "")
    };
    // Up to two decimals, trailing zeros dropped.
    let text = format!("{value:.2}");
    format!("{}{unit}", text.trim_end_matches('0').trim_end_matches('.'))
}

// Run by `tests/cli` (bench.rs). The bench target compiles this module with cfg(test) but
// without its `#[test]` functions (harness = false), leaving the helpers unused there.
#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests {
    use super::*;

    fn at(rows: usize, contender: &str, seconds: f64) -> Measurement {
        in_set("lineitem", rows, contender, seconds)
    }

    fn in_set(dataset: &str, rows: usize, contender: &str, seconds: f64) -> Measurement {
        Measurement { dataset: dataset.into(), rows, contender: contender.into(), seconds, peak_rss: None }
    }

    #[test]
    fn sizes_label_the_x_axis() {
        assert_eq!(show_rows(1e6), "1M");
        assert_eq!(show_rows(20e6), "20M");
        assert_eq!(show_rows(2_500_000.0), "2.5M");
        assert_eq!(show_rows(999_999.6), "1M");
        assert_eq!(show_rows(999_000.0), "999k");
        assert_eq!(show_rows(250_000.0), "250k");
        assert_eq!(show_rows(100.0), "100");
        assert_eq!(show_rows(1.2e9), "1.2G");
        assert_eq!([decimals(3.0), decimals(0.5), decimals(0.039), decimals(0.0), decimals(f64::NAN)], [0, 1, 2, 1, 1]);
        let results = [at(4_000_000, "a", 1.0), at(1_000_000, "a", 0.5), at(1_000_000, "b", 0.4), at(10_000_000, "b", 2.0)];
        assert_eq!(x_ticks(&results), vec![1.0, 4.0, 10.0]);
        assert_eq!(x_ticks(&results).iter().map(|m| show_rows(m * 1e6)).collect::<Vec<_>>(), ["1M", "4M", "10M"]);
    }

    /// Dark pixels in the band of each panel's x axis tick labels: below the tick marks,
    /// above the axis title.
    fn dark_pixels_under_the_plots(results: &[Measurement]) -> Vec<usize> {
        register_font().unwrap();
        let panels = datasets(results).len() as u32;
        let (w, h) = (SIZE.0, SIZE.1 * panels);
        let mut buffer = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buffer, (w, h)).into_drawing_area();
            plot_all(&root, "Merging", results).unwrap();
            root.present().unwrap();
        }
        (1..=panels)
            .map(|panel| {
                let top = panel * SIZE.1 - MARGIN - X_LABEL_AREA + 8; // below the tick marks
                let bottom = top + 18; // above the axis title
                let mut dark = 0;
                for y in top..bottom {
                    for x in 0..w {
                        let p = ((y * w + x) * 3) as usize;
                        dark += usize::from(buffer[p..p + 3].iter().all(|&c| c < 128));
                    }
                }
                dark
            })
            .collect()
    }

    #[test]
    fn the_chart_has_x_tick_labels() {
        let results = [
            at(1_000_000, "corank-cpu", 0.5),
            at(4_000_000, "corank-cpu", 1.5),
            at(1_000_000, "duckdb", 0.6),
            at(4_000_000, "duckdb", 2.0),
        ];
        let with_labels = dark_pixels_under_the_plots(&results);
        // "1M" and "4M" at 16 px: well over a hundred dark pixels.
        assert!(with_labels.len() == 1 && with_labels[0] > 100, "{with_labels:?} dark pixels where the x tick labels go");
        // The file is written too.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/chart.png");
        draw(&path, "Merging", &results).unwrap();
        assert!(std::fs::read(&path).unwrap().starts_with(b"\x89PNG"), "not a PNG");
        assert!(draw(&path, "Merging", &[]).is_err());
    }

    #[test]
    fn one_panel_per_dataset_each_with_x_tick_labels() {
        let results = [
            in_set("lineitem", 1_000_000, "corank-cpu", 0.5),
            in_set("lineitem", 10_000_000, "corank-cpu", 4.0),
            in_set("lineitem", 10_000_000, "floor", 3.0),
            in_set("time", 1_000_000, "corank-cpu", 0.1),
            in_set("time", 10_000_000, "corank-cpu", 0.8),
            in_set("time", 10_000_000, "floor", 3.0),
        ];
        assert_eq!(datasets(&results), ["lineitem", "time"]);
        let dark = dark_pixels_under_the_plots(&results);
        assert!(dark.len() == 2 && dark.iter().all(|&d| d > 100), "{dark:?} dark pixels where the x tick labels go");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        draw(&path, "Merging", &results).unwrap();
        let png = std::fs::read(&path).unwrap();
        // The IHDR chunk: width then height, big-endian, at bytes 16..24.
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 2 * SIZE.1);
    }
}
