//! The requests of a sweep grouped by what was run, with their means, tails and load.

use super::record::{ArrivalProcess, RequestRecord};

/// The requests of one (scheme, link rate, request rate and arrivals, batch, prompt length):
/// their means, 99th percentiles and the load they made.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMean {
    /// The scheme.
    pub scheme: String,
    /// The link rate, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests per second (`None`: one at a time).
    pub request_rate: Option<f64>,
    /// How they arrived at the rate.
    pub arrivals: ArrivalProcess,
    /// The most requests decoded together.
    pub max_batch: usize,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Requests averaged.
    pub requests: usize,
    /// Mean time waiting behind other requests, ms.
    pub queue_ms: f64,
    /// Mean time from submission until the last layer was imported (prefill and transfer), ms.
    pub kv_in_ms: f64,
    /// Mean time to the first token, ms.
    pub ttft_ms: f64,
    /// Mean time between tokens, ms.
    pub tbt_ms: f64,
    /// Mean job completion time, ms.
    pub jct_ms: f64,
    /// Mean bytes on the wire.
    pub wire_bytes: f64,
    /// The 99th percentiles (nearest rank) of the time to the first token, of the gaps between
    /// tokens (every gap of every request; each request's mean gap for records without gaps)
    /// and of the job completion time, ms.
    pub p99: Tails,
    /// Requests completed per second: the requests over the time from the first one's arrival
    /// to the last one's last token.
    pub served_per_s: f64,
    /// The most requests decoded together in one step.
    pub peak_batch: usize,
    /// How many of its largest request the KV budget holds at once, where it had one.
    pub budget_holds: Option<usize>,
}

/// 99th percentiles, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tails {
    /// Of the time to the first token.
    pub ttft_ms: f64,
    /// Of the gaps between tokens.
    pub tbt_ms: f64,
    /// Of the job completion time.
    pub jct_ms: f64,
}

impl GroupMean {
    /// Whether `other` is this group's counterpart (same link rate, request rate and arrivals,
    /// batch and prompt length).
    pub(crate) fn matches(&self, other: &GroupMean) -> bool {
        self.request_rate == other.request_rate && self.same_load_line(other)
    }

    /// Whether `other` lies on this group's load line: the same link, arrivals, batch and
    /// prompt length, whatever the request rate.
    pub(crate) fn same_load_line(&self, other: &GroupMean) -> bool {
        self.link_gbps == other.link_gbps
            && self.arrivals == other.arrivals
            && self.max_batch == other.max_batch
            && self.prompt_tokens == other.prompt_tokens
    }
}

/// The 99th percentile of `values` by nearest rank (the smallest value at least 99% of them do
/// not exceed); NaN for none.
pub fn p99(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = (values.len() * 99).div_ceil(100);
    values[rank - 1]
}

/// The groups of `records` per (scheme, link rate, request rate and arrivals, batch, prompt
/// length), in the order they first appear.
pub fn group_means(records: &[RequestRecord]) -> Vec<GroupMean> {
    let key = |r: &RequestRecord| {
        let rate = r.request_rate.map(f64::to_bits);
        (r.scheme.clone(), r.link_gbps.map(f64::to_bits), rate, r.arrivals, r.max_batch, r.prompt_tokens)
    };
    let mut keys = Vec::new();
    for r in records {
        if !keys.contains(&key(r)) {
            keys.push(key(r));
        }
    }
    keys.into_iter()
        .map(|k| {
            let group: Vec<&RequestRecord> = records.iter().filter(|r| key(r) == k).collect();
            let mean = |f: fn(&RequestRecord) -> f64| group.iter().map(|r| f(r)).sum::<f64>() / group.len() as f64;
            let all = |f: fn(&RequestRecord) -> f64| group.iter().map(|r| f(r)).collect::<Vec<_>>();
            GroupMean {
                scheme: k.0,
                link_gbps: k.1.map(f64::from_bits),
                request_rate: k.2.map(f64::from_bits),
                arrivals: k.3,
                max_batch: k.4,
                prompt_tokens: k.5,
                requests: group.len(),
                queue_ms: mean(|r| r.queue_ms),
                kv_in_ms: mean(|r| r.last_layer_ms),
                ttft_ms: mean(|r| r.ttft_ms),
                tbt_ms: mean(|r| r.tbt_ms),
                jct_ms: mean(|r| r.jct_ms),
                wire_bytes: mean(|r| r.wire_bytes as f64),
                p99: Tails {
                    ttft_ms: p99(all(|r| r.ttft_ms)),
                    tbt_ms: p99(token_gaps(&group)),
                    jct_ms: p99(all(|r| r.jct_ms)),
                },
                served_per_s: served_per_s(&group),
                peak_batch: group.iter().map(|r| r.peak_batch).max().unwrap_or(1),
                budget_holds: budget_holds(&group),
            }
        })
        .collect()
}

/// Every gap between tokens of `group`'s requests, ms; a request without gaps recorded gives
/// its mean gap once per gap it had.
fn token_gaps(group: &[&RequestRecord]) -> Vec<f64> {
    group
        .iter()
        .flat_map(|r| match r.token_gaps_ms.is_empty() {
            true => vec![r.tbt_ms; r.new_tokens.saturating_sub(1)],
            false => r.token_gaps_ms.iter().map(|&g| f64::from(g)).collect(),
        })
        .collect()
}

/// `group`'s requests per second from the first arrival to the last completion.
fn served_per_s(group: &[&RequestRecord]) -> f64 {
    let first = group.iter().map(|r| r.arrival_ms).fold(f64::INFINITY, f64::min);
    let last = group.iter().map(|r| r.arrival_ms + r.jct_ms).fold(f64::NEG_INFINITY, f64::max);
    group.len() as f64 / ((last - first) / 1e3)
}

/// How many of `group`'s largest request its KV budget holds, if it had one.
fn budget_holds(group: &[&RequestRecord]) -> Option<usize> {
    let budget = group.iter().find_map(|r| r.kv_budget_bytes)?;
    let largest = group.iter().filter_map(|r| r.reserved_bytes).max()?;
    Some((budget / largest.max(1)) as usize)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{queued, record};
    use super::*;

    #[test]
    fn groups_average_their_requests_in_order_of_appearance() {
        let records = [
            record("dense", 10.0, 64, 80.0, 90.0, 100.0),
            record("hack", 10.0, 64, 10.0, 15.0, 25.0),
            record("dense", 10.0, 64, 100.0, 110.0, 120.0),
            record("dense", 25.0, 64, 40.0, 50.0, 60.0),
            queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 0.5, 30.0),
            queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 0.5, 10.0),
            RequestRecord {
                arrivals: ArrivalProcess::Poisson { seed: 1 },
                ..queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 0.5, 10.0)
            },
        ];
        let groups = group_means(&records);
        let summary: Vec<_> = groups
            .iter()
            .map(|g| (g.scheme.as_str(), g.link_gbps, g.request_rate, g.requests, g.queue_ms, g.kv_in_ms, g.jct_ms))
            .collect();
        assert_eq!(
            summary,
            [
                ("dense", Some(10.0), None, 2, 0.0, 90.0, 110.0),
                ("hack", Some(10.0), None, 1, 0.0, 10.0, 25.0),
                ("dense", Some(25.0), None, 1, 0.0, 40.0, 60.0),
                ("dense", Some(10.0), Some(0.5), 2, 20.0, 80.0, 120.0),
                ("dense", Some(10.0), Some(0.5), 1, 10.0, 80.0, 110.0),
            ]
        );
    }

    #[test]
    fn the_99th_percentile_is_the_nearest_rank() {
        assert_eq!(p99((1..=100).map(f64::from).collect()), 99.0);
        assert_eq!(p99((1..=101).map(f64::from).collect()), 100.0);
        assert_eq!(p99(vec![5.0, 1.0, 3.0]), 5.0);
        assert!(p99(Vec::new()).is_nan());
    }

    #[test]
    fn tails_take_every_gap_and_the_load_spans_arrival_to_completion() {
        // Two requests 500 ms apart, with 100 gaps of 10 ms and one of 90 ms between them.
        let mut a = record("hack", 10.0, 64, 10.0, 15.0, 1000.0);
        a.token_gaps_ms = vec![10.0; 100];
        a.peak_batch = 2;
        let mut b = RequestRecord { arrival_ms: 500.0, ..a.clone() };
        b.token_gaps_ms[0] = 90.0;
        b.jct_ms = 1500.0;
        let groups = group_means(&[a.clone(), b.clone()]);
        // 200 gaps: the 198th smallest is 10, the largest 90 is beyond the 99th percentile.
        assert_eq!(groups[0].p99.tbt_ms, 10.0);
        // Two requests from 0 to 2,000 ms.
        assert_eq!(groups[0].served_per_s, 1.0);
        assert_eq!(groups[0].peak_batch, 2);
        assert_eq!(groups[0].budget_holds, None);
        // A budget of 10 bytes holds three of the larger request's 3 bytes.
        let budgeted =
            |r: RequestRecord, bytes| RequestRecord { kv_budget_bytes: Some(10), reserved_bytes: Some(bytes), ..r };
        assert_eq!(group_means(&[budgeted(a, 2), budgeted(b, 3)])[0].budget_holds, Some(3));
        // Records without gaps stand for their mean gap.
        let old = record("hack", 10.0, 64, 10.0, 15.0, 25.0);
        assert_eq!(group_means(&[old])[0].p99.tbt_ms, 2.0);
    }
}
