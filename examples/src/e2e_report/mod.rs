//! Records of disaggregated requests (`disagg`): one record per request (`disagg decode --json`,
//! `disagg sweep`), a sweep's summary table with each scheme's job completion time against a
//! baseline's, and the series of plots of job completion time against the link rate or against
//! the request rate.

use serde::{Deserialize, Serialize};

use crate::plot::Series;

/// One request's measurements, times in milliseconds: the first-layer, last-layer and logits
/// times from the request's submission to the prefill server, the others (queueing, TTFT, JCT)
/// from its arrival. One request at a time, a request arrives when it is submitted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestRecord {
    /// The KV scheme, as spelled on the command line.
    pub scheme: String,
    /// The emulated rate of each side's outgoing link, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests per second arriving on a fixed schedule (`None`: one request at a time, each
    /// arriving when the previous one has finished).
    #[serde(default)]
    pub request_rate: Option<f64>,
    /// The most requests decoded together (`disagg --max-batch`; 1: one at a time, as records
    /// from before batching were).
    #[serde(default = "one")]
    pub max_batch: usize,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub new_tokens: usize,
    /// Bytes of the received caches on the decode side.
    pub kv_bytes: usize,
    /// Bytes on the wire, both directions.
    pub wire_bytes: u64,
    /// Until the first layer was imported.
    pub first_layer_ms: f64,
    /// Until the last layer was imported: the prefill and the transfer, which overlap.
    pub last_layer_ms: f64,
    /// Until the logits arrived.
    pub logits_ms: f64,
    /// Time to the first token.
    pub ttft_ms: f64,
    /// Mean time between later tokens.
    pub tbt_ms: f64,
    /// Job completion time: until the last token.
    pub jct_ms: f64,
    /// Time spent waiting: from arrival until the submission to the prefill server (behind
    /// earlier requests' prefills) and from the last layer's import until decoding began (behind
    /// earlier requests' decoding).
    #[serde(default)]
    pub queue_ms: f64,
}

fn one() -> usize {
    1
}

/// The means over the requests of one (scheme, link rate, request rate and batch, prompt length).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMean {
    /// The scheme.
    pub scheme: String,
    /// The link rate, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests per second (`None`: one at a time).
    pub request_rate: Option<f64>,
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
}

impl GroupMean {
    /// Whether `other` is this group's counterpart (same link rate, request rate, batch and
    /// prompt length).
    fn matches(&self, other: &GroupMean) -> bool {
        self.link_gbps == other.link_gbps
            && self.request_rate == other.request_rate
            && self.max_batch == other.max_batch
            && self.prompt_tokens == other.prompt_tokens
    }
}

/// The means of `records` per (scheme, link rate, request rate, batch, prompt length), in the
/// order the groups first appear.
pub fn group_means(records: &[RequestRecord]) -> Vec<GroupMean> {
    let key = |r: &RequestRecord| {
        let rate = r.request_rate.map(f64::to_bits);
        (r.scheme.clone(), r.link_gbps.map(f64::to_bits), rate, r.max_batch, r.prompt_tokens)
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
            GroupMean {
                scheme: k.0,
                link_gbps: k.1.map(f64::from_bits),
                request_rate: k.2.map(f64::from_bits),
                max_batch: k.3,
                prompt_tokens: k.4,
                requests: group.len(),
                queue_ms: mean(|r| r.queue_ms),
                kv_in_ms: mean(|r| r.last_layer_ms),
                ttft_ms: mean(|r| r.ttft_ms),
                tbt_ms: mean(|r| r.tbt_ms),
                jct_ms: mean(|r| r.jct_ms),
                wire_bytes: mean(|r| r.wire_bytes as f64),
            }
        })
        .collect()
}

/// How requests arrive, in words: `"one request at a time"` (`None`) or `"{rate} requests/s"`.
pub fn describe_rate(request_rate: Option<f64>) -> String {
    request_rate.map_or("one request at a time".into(), |r| format!("{r} requests/s"))
}

/// A Markdown table of `groups`: per group its means, where the job completion time goes
/// (queueing; prefill and transfer until the last layer is in; then the first token; then
/// decoding) and how much lower its job completion time is than `baseline`'s at the same link
/// rate, request rate and prompt length ("–" where the baseline was not run).
pub fn markdown_table(groups: &[GroupMean], baseline: &str) -> String {
    let mut out = String::from(
        "| scheme | link Gbit/s | requests/s | prompt | requests | queue ms | prefill + transfer ms | \
         to first token ms | decode ms | TTFT ms | TBT ms | JCT ms | wire MB | JCT vs baseline |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for g in groups {
        let link = g.link_gbps.map_or("unpaced".to_string(), |l| format!("{l}"));
        let rate = match (g.request_rate, g.max_batch) {
            (None, _) => "one at a time".to_string(),
            (Some(r), 1) => format!("{r}"),
            (Some(r), batch) => format!("{r}, batch {batch}"),
        };
        let versus = groups
            .iter()
            .find(|b| b.scheme == baseline && b.matches(g))
            .map_or("–".to_string(), |b| format!("{:+.1} %", (g.jct_ms / b.jct_ms - 1.0) * 100.0));
        out += &format!(
            "| {} | {link} | {rate} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} | {versus} |\n",
            g.scheme,
            g.prompt_tokens,
            g.requests,
            g.queue_ms,
            g.kv_in_ms,
            g.ttft_ms - g.queue_ms - g.kv_in_ms,
            g.jct_ms - g.ttft_ms,
            g.ttft_ms,
            g.tbt_ms,
            g.jct_ms,
            g.wire_bytes / 1e6,
        );
    }
    out
}

/// The quantity a plot of job completion time puts on its horizontal axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JctAxis {
    /// The link rate, Gbit/s: one series per (scheme, request rate, prompt length).
    LinkRate,
    /// The request rate, requests/s: one series per (scheme, link rate, prompt length).
    RequestRate,
}

/// One series per group of `groups` that differ only in `axis`'s quantity: the mean job
/// completion time (ms) against it, sorted; groups without a value on the axis (an unpaced link,
/// one request at a time) are left out.
pub fn jct_series(groups: &[GroupMean], axis: JctAxis) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for g in groups {
        let (x, other) = match axis {
            JctAxis::LinkRate => (g.link_gbps, g.request_rate.map(|r| format!(", {r} requests/s"))),
            JctAxis::RequestRate => (g.request_rate, g.link_gbps.map(|l| format!(", {l} Gbit/s"))),
        };
        let Some(x) = x else { continue };
        let name = format!("{}{}, {} tokens", g.scheme, other.unwrap_or_default(), g.prompt_tokens);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, g.jct_ms)),
            None => series.push(Series { name, points: vec![(x, g.jct_ms)] }),
        }
    }
    for s in &mut series {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_described_in_words() {
        assert_eq!(describe_rate(None), "one request at a time");
        assert_eq!(describe_rate(Some(0.15)), "0.15 requests/s");
    }

    fn record(scheme: &str, link: f64, prompt: usize, last_layer: f64, ttft: f64, jct: f64) -> RequestRecord {
        RequestRecord {
            scheme: scheme.into(),
            link_gbps: Some(link),
            request_rate: None,
            max_batch: 1,
            prompt_tokens: prompt,
            new_tokens: 8,
            kv_bytes: 1000,
            wire_bytes: 2000,
            first_layer_ms: 1.0,
            last_layer_ms: last_layer,
            logits_ms: last_layer,
            ttft_ms: ttft,
            tbt_ms: 2.0,
            jct_ms: jct,
            queue_ms: 0.0,
        }
    }

    /// `record` arriving at `rate` requests/s after waiting `queue` ms.
    fn queued(r: RequestRecord, rate: f64, queue: f64) -> RequestRecord {
        RequestRecord {
            request_rate: Some(rate),
            queue_ms: queue,
            ttft_ms: r.ttft_ms + queue,
            jct_ms: r.jct_ms + queue,
            ..r
        }
    }

    #[test]
    fn groups_average_their_requests_in_order_of_appearance() {
        let records = [
            record("dense", 10.0, 64, 80.0, 90.0, 100.0),
            record("hack", 10.0, 64, 10.0, 15.0, 25.0),
            record("dense", 10.0, 64, 100.0, 110.0, 120.0),
            record("dense", 25.0, 64, 40.0, 50.0, 60.0),
            queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 0.5, 30.0),
            queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 0.5, 10.0),
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
            ]
        );
    }

    #[test]
    fn the_table_compares_each_group_with_the_baseline_at_its_link_request_rate_and_prompt() {
        let records = [
            record("dense", 10.0, 64, 80.0, 90.0, 100.0),
            record("hack", 10.0, 64, 10.0, 15.0, 25.0),
            record("hack", 25.0, 64, 10.0, 15.0, 20.0),
            queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 2.0, 300.0),
            queued(record("hack", 10.0, 64, 10.0, 15.0, 25.0), 2.0, 5.0),
        ];
        let table = markdown_table(&group_means(&records), "dense");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 7);
        // hack at 10 Gbit/s: 25 against dense's 100 ms, 75 % lower; its JCT splits into no
        // queueing, 10 ms until the last layer, 5 to the first token and 10 of decoding.
        assert!(
            lines[3].starts_with("| hack | 10 | one at a time | 64 | 1 | 0.0 | 10.0 | 5.0 | 10.0 | 15.0 |"),
            "{}",
            lines[3]
        );
        assert!(lines[3].ends_with("| -75.0 % |"), "{}", lines[3]);
        assert!(lines[2].ends_with("| +0.0 % |"), "{}", lines[2]);
        // No dense run at 25 Gbit/s.
        assert!(lines[4].ends_with("| – |"), "{}", lines[4]);
        // At 2 requests/s, against dense at the same rate: 30 against 400 ms, of which 5 queueing.
        assert!(lines[6].starts_with("| hack | 10 | 2 | 64 | 1 | 5.0 | 10.0 | 5.0 | 10.0 | 20.0 |"), "{}", lines[6]);
        assert!(lines[6].ends_with("| -92.5 % |"), "{}", lines[6]);
    }

    #[test]
    fn batched_runs_are_their_own_groups_and_compare_with_the_baseline_at_the_same_batch() {
        let batched = |r: RequestRecord| RequestRecord { max_batch: 4, ..r };
        let records = [
            queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 2.0, 300.0),
            batched(queued(record("dense", 10.0, 64, 80.0, 90.0, 100.0), 2.0, 100.0)),
            batched(queued(record("hack", 10.0, 64, 10.0, 15.0, 25.0), 2.0, 5.0)),
        ];
        let groups = group_means(&records);
        assert_eq!(groups.iter().map(|g| g.max_batch).collect::<Vec<_>>(), [1, 4, 4]);
        let table = markdown_table(&groups, "dense");
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[3].starts_with("| dense | 10 | 2, batch 4 | 64 | 1 | 100.0 |"), "{}", lines[3]);
        // Against the batched dense run (200 ms), not the one at a time (400).
        assert!(
            lines[4].starts_with("| hack | 10 | 2, batch 4 |") && lines[4].ends_with("| -85.0 % |"),
            "{}",
            lines[4]
        );
        // A record from before batching reads as one at a time.
        let old = r#"{"scheme":"dense","link_gbps":10.0,"prompt_tokens":64,"new_tokens":8,"kv_bytes":1,"wire_bytes":2,
            "first_layer_ms":1.0,"last_layer_ms":2.0,"logits_ms":2.0,"ttft_ms":3.0,"tbt_ms":1.0,"jct_ms":9.0}"#;
        assert_eq!(serde_json::from_str::<RequestRecord>(old).unwrap().max_batch, 1);
    }

    #[test]
    fn series_follow_the_chosen_axis_per_scheme_and_prompt() {
        let records = [
            record("hack", 25.0, 64, 1.0, 2.0, 20.0),
            record("hack", 10.0, 64, 1.0, 2.0, 25.0),
            record("hack", 10.0, 128, 1.0, 2.0, 40.0),
            queued(record("hack", 10.0, 64, 1.0, 2.0, 25.0), 2.0, 5.0),
            queued(record("hack", 10.0, 64, 1.0, 2.0, 25.0), 1.0, 1.0),
        ];
        let groups = group_means(&records);
        let named = |series: Vec<Series>| -> Vec<(String, Vec<(f64, f64)>)> {
            series.into_iter().map(|s| (s.name, s.points)).collect()
        };
        assert_eq!(
            named(jct_series(&groups, JctAxis::LinkRate)),
            [
                ("hack, 64 tokens".to_string(), vec![(10.0, 25.0), (25.0, 20.0)]),
                ("hack, 128 tokens".to_string(), vec![(10.0, 40.0)]),
                ("hack, 2 requests/s, 64 tokens".to_string(), vec![(10.0, 30.0)]),
                ("hack, 1 requests/s, 64 tokens".to_string(), vec![(10.0, 26.0)]),
            ]
        );
        assert_eq!(
            named(jct_series(&groups, JctAxis::RequestRate)),
            [("hack, 10 Gbit/s, 64 tokens".to_string(), vec![(1.0, 26.0), (2.0, 30.0)])]
        );
    }
}
