//! The series a sweep plots: a group quantity against the link rate or the request rate.

use super::groups::GroupMean;
use super::record::{arrivals_cell, ArrivalProcess};
use crate::plot::Series;

/// The quantity a plot puts on its horizontal axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Axis {
    /// The link rate, Gbit/s: one series per (scheme, request rate, prompt length).
    LinkRate,
    /// The request rate, requests/s: one series per (scheme, link rate, arrivals and batch,
    /// prompt length).
    RequestRate,
}

/// The quantity a plot puts on its vertical axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// Mean job completion time, ms.
    MeanJct,
    /// 99th percentile of the gaps between tokens, ms.
    P99Tbt,
    /// Requests served per second.
    Served,
}

impl Quantity {
    fn of(self, g: &GroupMean) -> f64 {
        match self {
            Self::MeanJct => g.jct_ms,
            Self::P99Tbt => g.p99.tbt_ms,
            Self::Served => g.served_per_s,
        }
    }
}

/// One series per group of `groups` that differ only in `axis`'s quantity: `quantity` against
/// it, sorted; groups without a value on the axis (an unpaced link, one request at a time) are
/// left out.
pub fn series(groups: &[GroupMean], axis: Axis, quantity: Quantity) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for g in groups {
        let (x, other) = match axis {
            Axis::LinkRate => (g.link_gbps, g.request_rate.map(|r| format!(", {r} requests/s"))),
            Axis::RequestRate => (g.request_rate, g.link_gbps.map(|l| format!(", {l} Gbit/s"))),
        };
        let Some(x) = x else { continue };
        // Named only where they differ from one request at a time on a fixed schedule.
        let load = match (g.arrivals, g.max_batch) {
            (ArrivalProcess::Fixed, 1) => String::new(),
            _ => format!(", {}", arrivals_cell(g.arrivals, g.max_batch)),
        };
        let name = format!("{}{}{load}, {} tokens", g.scheme, other.unwrap_or_default(), g.prompt_tokens);
        let point = (x, quantity.of(g));
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push(point),
            None => series.push(Series { name, points: vec![point] }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

#[cfg(test)]
mod tests {
    use super::super::groups::group_means;
    use super::super::record::RequestRecord;
    use super::super::tests::{queued, record};
    use super::*;

    #[test]
    fn series_follow_the_chosen_axis_per_scheme_and_prompt() {
        let records = [
            record("hack", 25.0, 64, 1.0, 2.0, 20.0),
            record("hack", 10.0, 64, 1.0, 2.0, 25.0),
            record("hack", 10.0, 128, 1.0, 2.0, 40.0),
            queued(record("hack", 10.0, 64, 1.0, 2.0, 25.0), 2.0, 5.0),
            queued(record("hack", 10.0, 64, 1.0, 2.0, 25.0), 1.0, 1.0),
            RequestRecord { max_batch: 4, ..queued(record("hack", 10.0, 64, 1.0, 2.0, 25.0), 1.0, 1.0) },
        ];
        let groups = group_means(&records);
        let named = |series: Vec<Series>| -> Vec<(String, Vec<(f64, f64)>)> {
            series.into_iter().map(|s| (s.name, s.points)).collect()
        };
        assert_eq!(
            named(series(&groups, Axis::LinkRate, Quantity::MeanJct)),
            [
                ("hack, 64 tokens".to_string(), vec![(10.0, 25.0), (25.0, 20.0)]),
                ("hack, 128 tokens".to_string(), vec![(10.0, 40.0)]),
                ("hack, 2 requests/s, 64 tokens".to_string(), vec![(10.0, 30.0)]),
                ("hack, 1 requests/s, 64 tokens".to_string(), vec![(10.0, 26.0)]),
                ("hack, 1 requests/s, fixed, batch 4, 64 tokens".to_string(), vec![(10.0, 26.0)]),
            ]
        );
        assert_eq!(
            named(series(&groups, Axis::RequestRate, Quantity::P99Tbt)),
            [
                ("hack, 10 Gbit/s, 64 tokens".to_string(), vec![(1.0, 2.0), (2.0, 2.0)]),
                ("hack, 10 Gbit/s, fixed, batch 4, 64 tokens".to_string(), vec![(1.0, 2.0)]),
            ]
        );
    }
}
