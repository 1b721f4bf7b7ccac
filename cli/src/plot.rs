//! Line plots with `plotters`, as SVG or PNG: per-iteration curves (calibration objectives,
//! [`plot_curves`]) and series of (x, y) points (perplexity against bits per element,
//! [`plot_series`]).
//!
//! SVG carries its text as `<text>` elements, so it needs no font. The PNG backend is built
//! without a font feature (those need system font libraries or font files at build or run time),
//! so a PNG has a frame, the grid and the lines but no text: the curves are told apart by the
//! colours [`CURVE_COLOURS`] names, in order.

use std::path::Path;

use anyhow::{bail, Context};

use crate::report::create_parent;
use plotters::{coord::ranged1d::ValueFormatter, coord::Shift, prelude::*};

/// The colours of the curves, in order (the PNG has no legend).
pub const CURVE_COLOURS: [(&str, RGBColor); 10] = [
    ("blue", RGBColor(31, 119, 180)),
    ("red", RGBColor(214, 39, 40)),
    ("green", GREEN),
    ("black", BLACK),
    ("orange", RGBColor(255, 127, 14)),
    ("purple", RGBColor(148, 103, 189)),
    ("brown", RGBColor(140, 86, 75)),
    ("pink", RGBColor(227, 119, 194)),
    ("grey", RGBColor(127, 127, 127)),
    ("olive", RGBColor(188, 189, 34)),
];

/// One curve: a name for the legend and one value per iteration (index = x).
#[derive(Debug, Clone, PartialEq)]
pub struct Curve<'a> {
    /// Legend text.
    pub name: &'a str,
    /// y values at x = 0, 1, 2, ...
    pub values: &'a [f64],
}

/// One series of points: a name for the legend and its (x, y) points, joined by a line in the
/// order given and marked with dots.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// (x, y) points.
    pub points: Vec<(f64, f64)>,
}

/// What to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotSpec<'a> {
    /// Caption (SVG only).
    pub title: &'a str,
    /// x axis description (SVG only).
    pub x_label: &'a str,
    /// y axis description (SVG only).
    pub y_label: &'a str,
    /// The curves (at most [`CURVE_COLOURS`]'s length).
    pub curves: &'a [Curve<'a>],
}

/// Image formats, chosen by the file extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlotFormat {
    /// `.svg`: with text.
    Svg,
    /// `.png`: lines, frame and grid, no text.
    Png,
}

impl PlotFormat {
    /// The format `path`'s extension names, or an error for anything else.
    pub fn of_path(path: &Path) -> anyhow::Result<Self> {
        match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("svg") => Ok(Self::Svg),
            Some("png") => Ok(Self::Png),
            _ => bail!("plot file {} must end in .svg or .png", path.display()),
        }
    }
}

/// Draws `spec` to `path` (format by extension), each curve's values at x = 0, 1, 2, ... The y
/// axis is logarithmic when every value is positive and finite and they span a decade or more,
/// linear otherwise.
pub fn plot_curves(path: &Path, spec: &PlotSpec<'_>) -> anyhow::Result<()> {
    let series: Vec<Series> = spec
        .curves
        .iter()
        .map(|c| Series {
            name: c.name.to_string(),
            points: c.values.iter().enumerate().map(|(x, &y)| (x as f64, y)).collect(),
        })
        .collect();
    let count = spec.curves.iter().map(|c| c.values.len()).max().unwrap_or(1);
    draw_file(path, &Axes { spec, series: &series, x_labels: count.clamp(2, 12), dots: false })
}

/// Draws `series` to `path` (format by extension) with `spec`'s title and axis descriptions
/// (`spec.curves` is not read), the x axis spanning the points, the y axis chosen as in
/// [`plot_curves`].
pub fn plot_series(path: &Path, spec: &PlotSpec<'_>, series: &[Series]) -> anyhow::Result<()> {
    draw_file(path, &Axes { spec, series, x_labels: 10, dots: true })
}

/// What [`draw`] draws: the series, with the spec's text.
struct Axes<'a> {
    spec: &'a PlotSpec<'a>,
    series: &'a [Series],
    x_labels: usize,
    dots: bool,
}

/// Draws `axes` to `path`, creating its directory.
fn draw_file(path: &Path, axes: &Axes<'_>) -> anyhow::Result<()> {
    let format = PlotFormat::of_path(path)?;
    if axes.series.len() > CURVE_COLOURS.len() {
        bail!("at most {} curves per plot", CURVE_COLOURS.len());
    }
    create_parent(path)?;
    let size = (900, 560);
    let result = match format {
        PlotFormat::Svg => draw(SVGBackend::new(path, size).into_drawing_area(), axes, true),
        PlotFormat::Png => draw(BitMapBackend::new(path, size).into_drawing_area(), axes, false),
    };
    result.with_context(|| format!("drawing {}", path.display()))
}

/// The finite range of `values`, or `(0, 1)` when none is finite.
fn finite_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.filter(|v| v.is_finite()).fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    match lo > hi {
        true => (0.0, 1.0),
        false => (lo, hi),
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, axes: &Axes<'_>, text: bool) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (spec, series) = (axes.spec, axes.series);
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    root.fill(&WHITE).map_err(fail)?;
    let values = series.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (x_lo, x_hi) = finite_range(series.iter().flat_map(|c| c.points.iter().map(|p| p.0)));
    let x_pad = match axes.dots {
        true => ((x_hi - x_lo) * 0.04).max(0.5),
        false => 0.0,
    };
    let x_range = (x_lo - x_pad)..(x_hi + x_pad).max(x_lo + 1.0);
    let (lo, hi) = finite_range(values.clone());
    // plotters puts log-axis ticks at powers of ten and their multiples: a range within one decade
    // may get none, so such ranges stay linear.
    let log = values.clone().all(|v| v.is_finite() && v > 0.0) && lo > 0.0 && hi / lo >= 10.0;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder.caption(spec.title, ("sans-serif", 22)).x_label_area_size(45).y_label_area_size(75);
    }
    if log {
        let (lo, hi) = (lo / 1.1, hi * 1.1);
        let mut chart = builder.build_cartesian_2d(x_range, (lo..hi).log_scale()).map_err(fail)?;
        configure_and_draw(&mut chart, axes, text)
    } else {
        let pad = ((hi - lo) * 0.05).max(1e-12);
        let mut chart = builder.build_cartesian_2d(x_range, (lo - pad)..(hi + pad)).map_err(fail)?;
        configure_and_draw(&mut chart, axes, text)
    }?;
    root.present().map_err(fail)?;
    Ok(())
}

fn configure_and_draw<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    axes: &Axes<'_>,
    text: bool,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    let spec = axes.spec;
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(axes.x_labels);
    // Without label areas (no text) plotters draws the grid but no axes or tick labels.
    match text {
        true => mesh
            .x_desc(spec.x_label)
            .y_desc(spec.y_label)
            .x_label_formatter(&|x| format_value(*x))
            .y_label_formatter(&|y| format_value(*y)),
        false => &mut mesh,
    };
    mesh.draw().map_err(fail)?;
    if !text {
        let area = chart.plotting_area().strip_coord_spec();
        let (w, h) = area.dim_in_pixel();
        area.draw(&Rectangle::new([(0, 0), (w as i32 - 1, h as i32 - 1)], BLACK)).map_err(fail)?;
    }
    for (curve, (_, colour)) in axes.series.iter().zip(CURVE_COLOURS) {
        let points = curve.points.iter().copied();
        let drawn = chart.draw_series(LineSeries::new(points.clone(), colour.stroke_width(2))).map_err(fail)?;
        if text {
            drawn.label(&curve.name).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
        if axes.dots {
            chart.draw_series(points.map(|p| Circle::new(p, 4, colour.filled()))).map_err(fail)?;
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(fail)?;
    }
    Ok(())
}

/// Whole numbers as such, others with three significant digits, scientific below 0.001.
fn format_value(y: f64) -> String {
    match y.abs() {
        0.0 => "0".into(),
        a if a < 1e-3 => format!("{y:.2e}"),
        a if a.fract() == 0.0 => format!("{y:.0}"),
        a => format!("{y:.*}", (2 - a.log10().floor() as i32).max(0) as usize),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_svg_with_text_and_png_without_panicking() {
        let dir = std::env::temp_dir().join(format!("plot-curves-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let keys = [0.2, 0.1, 0.08, 0.07];
        let values = [0.3, 0.2, 0.19, 0.185];
        let curves = [Curve { name: "keys", values: &keys }, Curve { name: "values", values: &values }];
        let spec = PlotSpec { title: "objective", x_label: "iteration", y_label: "error", curves: &curves };
        plot_curves(&dir.join("a.svg"), &spec).unwrap();
        let svg = std::fs::read_to_string(dir.join("a.svg")).unwrap();
        assert!(svg.contains("<text") && svg.contains("keys") && svg.contains("values"), "{svg}");
        // Tick labels on both axes (a range within a decade stays linear, so it gets y ticks).
        assert!(svg.contains("\n0.100\n") && svg.contains("\n0.300\n") && svg.contains("\n3\n"), "{svg}");
        plot_curves(&dir.join("a.png"), &spec).unwrap();
        assert!(std::fs::read(dir.join("a.png")).unwrap().starts_with(b"\x89PNG"));
        // Several decades: a log axis with ticks at powers of ten.
        let wide = [1.0, 0.1, 0.01, 0.001];
        let curves = [Curve { name: "wide", values: &wide }];
        plot_curves(&dir.join("d.svg"), &PlotSpec { curves: &curves, ..spec.clone() }).unwrap();
        let svg = std::fs::read_to_string(dir.join("d.svg")).unwrap();
        assert!(svg.contains("\n0.0100\n") || svg.contains("\n0.01\n"), "{svg}");
        // Non-positive values fall back to a linear axis; one point still draws.
        let flat = [0.0];
        let curves = [Curve { name: "zero", values: &flat }];
        plot_curves(&dir.join("b.svg"), &PlotSpec { curves: &curves, ..spec.clone() }).unwrap();
        assert!(plot_curves(&dir.join("c.jpg"), &spec).unwrap_err().to_string().contains(".svg or .png"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn formats_three_significant_digits() {
        assert_eq!(format_value(0.1234), "0.123");
        assert_eq!(format_value(0.01234), "0.0123");
        assert_eq!(format_value(12.34), "12.3");
        assert_eq!(format_value(1234.0), "1234");
        assert_eq!(format_value(3.0), "3");
        assert_eq!(format_value(0.0001234), "1.23e-4");
    }
}
