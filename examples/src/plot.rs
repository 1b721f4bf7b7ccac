//! Line plots of per-iteration curves (calibration objectives) with `plotters`, as SVG or PNG.
//!
//! SVG carries its text as `<text>` elements, so it needs no font. The PNG backend is built
//! without a font feature (those need system font libraries or font files at build or run time),
//! so a PNG has a frame, the grid and the lines but no text: the curves are told apart by the
//! colours [`CURVE_COLOURS`] names, in order.

use std::path::Path;

use anyhow::{bail, Context};
use plotters::{coord::ranged1d::ValueFormatter, coord::Shift, prelude::*};

/// The colours of the curves, in order (the PNG has no legend).
pub const CURVE_COLOURS: [(&str, RGBColor); 4] =
    [("blue", RGBColor(31, 119, 180)), ("red", RGBColor(214, 39, 40)), ("green", GREEN), ("black", BLACK)];

/// One curve: a name for the legend and one value per iteration (index = x).
#[derive(Debug, Clone, PartialEq)]
pub struct Curve<'a> {
    /// Legend text.
    pub name: &'a str,
    /// y values at x = 0, 1, 2, ...
    pub values: &'a [f64],
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

/// Draws `spec` to `path` (format by extension). The y axis is logarithmic when every value is
/// positive and finite and they span a decade or more, linear otherwise.
pub fn plot_curves(path: &Path, spec: &PlotSpec<'_>) -> anyhow::Result<()> {
    let format = PlotFormat::of_path(path)?;
    if spec.curves.len() > CURVE_COLOURS.len() {
        bail!("at most {} curves per plot", CURVE_COLOURS.len());
    }
    let size = (900, 560);
    let result = match format {
        PlotFormat::Svg => draw(SVGBackend::new(path, size).into_drawing_area(), spec, true),
        PlotFormat::Png => draw(BitMapBackend::new(path, size).into_drawing_area(), spec, false),
    };
    result.with_context(|| format!("drawing {}", path.display()))
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, spec: &PlotSpec<'_>, text: bool) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    root.fill(&WHITE).map_err(fail)?;
    let values = spec.curves.iter().flat_map(|c| c.values.iter().copied());
    let last_x = spec.curves.iter().map(|c| c.values.len()).max().unwrap_or(0).saturating_sub(1).max(1) as f64;
    let (mut lo, mut hi) =
        values.clone().filter(|v| v.is_finite()).fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (lo, hi) = (0.0, 1.0);
    }
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
        let mut chart = builder.build_cartesian_2d(0.0..last_x, (lo..hi).log_scale()).map_err(fail)?;
        configure_and_draw(&mut chart, spec, text)
    } else {
        let pad = ((hi - lo) * 0.05).max(1e-12);
        let mut chart = builder.build_cartesian_2d(0.0..last_x, (lo - pad)..(hi + pad)).map_err(fail)?;
        configure_and_draw(&mut chart, spec, text)
    }?;
    root.present().map_err(fail)?;
    Ok(())
}

fn configure_and_draw<'a, DB, Y>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>,
    spec: &PlotSpec<'_>,
    text: bool,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let fail = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    let count = spec.curves.iter().map(|c| c.values.len()).max().unwrap_or(1);
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(count.clamp(2, 12));
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
    for (curve, (_, colour)) in spec.curves.iter().zip(CURVE_COLOURS) {
        let points = curve.values.iter().enumerate().map(|(x, &y)| (x as f64, y));
        let series = chart.draw_series(LineSeries::new(points, colour.stroke_width(2))).map_err(fail)?;
        if text {
            series.label(curve.name).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        }
    }
    if text {
        chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(fail)?;
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
