//! Perplexity against KV cache bits per element: the plot of an evaluation table, one series per
//! scheme family (a scheme with its compression rate left free), the llama.cpp rows as one more.

use std::path::Path;

use crate::plot::{plot_series, PlotSpec, Series};

/// Settings that move a scheme along its family's curve, left out of the family's name.
const VARYING_SETTINGS: [&str; 3] = ["rate", "ranks", "books"];

/// The family of scheme `name`: each `+`-separated part without the settings that vary along a
/// family's curve (`rate`, `ranks`, `books`). `zack:rate=0.5000,rot=647d3779,ranks=3a34abfc+hack:bits=4,pi=64`
/// is of family `zack:rot=647d3779+hack:bits=4,pi=64`; a name without them is its own family.
/// HACK alone is an exception: its grid varies every setting at a few bit widths, so its family is
/// its axes (`hack:axes=channel`, or `hack` for the paper's), whose curve
/// [`tradeoff_series`] reduces to the best perplexity at each cost.
pub fn scheme_family(name: &str) -> String {
    if let Some(settings) = name.strip_prefix("hack:").filter(|_| !name.contains('+')) {
        return match settings.split(',').find(|s| s.starts_with("axes=")) {
            Some(axes) if axes != "axes=paper" => format!("hack:{axes}"),
            _ => "hack".into(),
        };
    }
    let parts = name.split('+').map(|part| match part.split_once(':') {
        Some((kind, settings)) => {
            let kept: Vec<&str> = settings
                .split(',')
                .filter(|s| !VARYING_SETTINGS.iter().any(|v| s.split_once('=').is_some_and(|(key, _)| key == *v)))
                .collect();
            format!("{kind}:{}", kept.join(","))
        }
        None => part.to_string(),
    });
    parts.collect::<Vec<_>>().join("+")
}

/// One row of an evaluation table.
#[derive(Debug, Clone, PartialEq)]
pub struct TradeoffPoint {
    /// Series the point belongs to (see [`scheme_family`]).
    pub family: String,
    /// KV cache bits per cached element, metadata included.
    pub bits_per_element: f64,
    /// Perplexity.
    pub ppl: f64,
}

/// The points as series, one per family in order of first appearance, each sorted by bits per
/// element; of a family's points at the same bits per element, the lowest perplexity.
pub fn tradeoff_series(points: &[TradeoffPoint]) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for point in points {
        let xy = (point.bits_per_element, point.ppl);
        match series.iter_mut().find(|s| s.name == point.family) {
            Some(s) => match s.points.iter_mut().find(|p| p.0 == xy.0) {
                Some(same_cost) => same_cost.1 = same_cost.1.min(xy.1),
                None => s.points.push(xy),
            },
            None => series.push(Series { name: point.family.clone(), points: vec![xy] }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

/// Draws perplexity against bits per element for `text`'s `points` to `path` (`.svg` with legend
/// and axes, or `.png`).
pub fn plot_tradeoff(path: &Path, text: &str, points: &[TradeoffPoint]) -> anyhow::Result<()> {
    let title = format!("decode perplexity on {text} against KV cache bits per element");
    let spec = PlotSpec { title: &title, x_label: "bits per element", y_label: "perplexity", curves: &[] };
    plot_series(path, &spec, &tradeoff_series(points))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_drops_only_the_settings_that_vary_along_its_curve() {
        assert_eq!(scheme_family("dense"), "dense");
        assert_eq!(scheme_family("zack:rate=0.5000,rot=647d3779,ranks=3a34abfc"), "zack:rot=647d3779");
        assert_eq!(
            scheme_family("zack:rate=0.2500,rot=647d3779,ranks=6a27af39+hack:bits=4,pi=64"),
            "zack:rot=647d3779+hack:bits=4,pi=64"
        );
        assert_eq!(
            scheme_family("zack:rate=0.5000,rot=ab,ranks=cd+pq:sub_dim=2,nbits=8,window=64,books=0123abcd"),
            "zack:rot=ab+pq:sub_dim=2,nbits=8,window=64"
        );
        assert_eq!(scheme_family("hack:bits=2,pi=64,round=nearest"), "hack");
        assert_eq!(scheme_family("hack:bits=2,pi=64,round=nearest,axes=channel,rot=hadamard"), "hack:axes=channel");
        // A key that merely starts like a varying one stays.
        assert_eq!(scheme_family("x:rates=1,rate=2"), "x:rates=1");
    }

    #[test]
    fn series_follow_first_appearance_and_sort_by_bits() {
        let point = |family: &str, bits, ppl| TradeoffPoint { family: family.into(), bits_per_element: bits, ppl };
        let points = [
            point("dense", 32.0, 42.0),
            point("z", 16.0, 97.0),
            point("z", 28.0, 45.6),
            point("z", 24.0, 51.7),
            point("z", 24.0, 50.2),
            point("z", 24.0, 55.0),
        ];
        let series = tradeoff_series(&points);
        assert_eq!(series.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["dense", "z"]);
        // The best of the three at 24 bits.
        assert_eq!(series[1].points, [(16.0, 97.0), (24.0, 50.2), (28.0, 45.6)]);

        let dir = std::env::temp_dir().join(format!("tradeoff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // The plot's directory is created.
        let path = dir.join("plots/t.svg");
        plot_tradeoff(&path, "tempest.txt", &points).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.contains("tempest.txt") && svg.contains("dense") && svg.contains("<circle"), "{svg}");
        // Four dots, one per point of the series.
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
