//! Records of disaggregated requests (`disagg`): one record per request (`disagg decode --json`,
//! `disagg sweep`), a sweep's summary table with each scheme's job completion time against a
//! baseline's, and the series of a plot of job completion time against the link rate.

use serde::{Deserialize, Serialize};

use crate::plot::Series;

/// One request's measurements (times in milliseconds, from the request's submission).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestRecord {
    /// The KV scheme, as spelled on the command line.
    pub scheme: String,
    /// The emulated rate of each side's outgoing link, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
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
}

/// The means over the requests of one (scheme, link rate, prompt length).
#[derive(Debug, Clone, PartialEq)]
pub struct GroupMean {
    /// The scheme.
    pub scheme: String,
    /// The link rate, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Requests averaged.
    pub requests: usize,
    /// Mean time until the last layer was imported (prefill and transfer), ms.
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
    /// Whether `other` is this group's counterpart (same link rate and prompt length).
    fn matches(&self, other: &GroupMean) -> bool {
        self.link_gbps == other.link_gbps && self.prompt_tokens == other.prompt_tokens
    }
}

/// The means of `records` per (scheme, link rate, prompt length), in the order the groups first
/// appear.
pub fn group_means(records: &[RequestRecord]) -> Vec<GroupMean> {
    let key = |r: &RequestRecord| (r.scheme.clone(), r.link_gbps.map(f64::to_bits), r.prompt_tokens);
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
                prompt_tokens: k.2,
                requests: group.len(),
                kv_in_ms: mean(|r| r.last_layer_ms),
                ttft_ms: mean(|r| r.ttft_ms),
                tbt_ms: mean(|r| r.tbt_ms),
                jct_ms: mean(|r| r.jct_ms),
                wire_bytes: mean(|r| r.wire_bytes as f64),
            }
        })
        .collect()
}

/// A Markdown table of `groups`: per group its means, where the job completion time goes
/// (prefill and transfer until the last layer is in, then the first token, then decoding) and
/// how much lower its job completion time is than `baseline`'s at the same link rate and prompt
/// length ("–" where the baseline was not run).
pub fn markdown_table(groups: &[GroupMean], baseline: &str) -> String {
    let mut out = String::from(
        "| scheme | link Gbit/s | prompt | requests | prefill + transfer ms | to first token ms | decode ms | \
         TTFT ms | TBT ms | JCT ms | wire MB | JCT vs baseline |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for g in groups {
        let link = g.link_gbps.map_or("unpaced".to_string(), |l| format!("{l}"));
        let versus = groups
            .iter()
            .find(|b| b.scheme == baseline && b.matches(g))
            .map_or("–".to_string(), |b| format!("{:+.1} %", (g.jct_ms / b.jct_ms - 1.0) * 100.0));
        out += &format!(
            "| {} | {link} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} | {versus} |\n",
            g.scheme,
            g.prompt_tokens,
            g.requests,
            g.kv_in_ms,
            g.ttft_ms - g.kv_in_ms,
            g.jct_ms - g.ttft_ms,
            g.ttft_ms,
            g.tbt_ms,
            g.jct_ms,
            g.wire_bytes / 1e6,
        );
    }
    out
}

/// One series per (scheme, prompt length) of its mean job completion time (ms) against the link
/// rate (Gbit/s), sorted by rate; unpaced groups are left out (they have no rate).
pub fn jct_series(groups: &[GroupMean]) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for g in groups {
        let Some(link) = g.link_gbps else { continue };
        let name = format!("{}, {} tokens", g.scheme, g.prompt_tokens);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((link, g.jct_ms)),
            None => series.push(Series { name, points: vec![(link, g.jct_ms)] }),
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

    fn record(scheme: &str, link: f64, prompt: usize, last_layer: f64, ttft: f64, jct: f64) -> RequestRecord {
        RequestRecord {
            scheme: scheme.into(),
            link_gbps: Some(link),
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
        }
    }

    #[test]
    fn groups_average_their_requests_in_order_of_appearance() {
        let records = [
            record("dense", 10.0, 64, 80.0, 90.0, 100.0),
            record("hack", 10.0, 64, 10.0, 15.0, 25.0),
            record("dense", 10.0, 64, 100.0, 110.0, 120.0),
            record("dense", 25.0, 64, 40.0, 50.0, 60.0),
        ];
        let groups = group_means(&records);
        let summary: Vec<(&str, Option<f64>, usize, f64, f64)> =
            groups.iter().map(|g| (g.scheme.as_str(), g.link_gbps, g.requests, g.kv_in_ms, g.jct_ms)).collect();
        assert_eq!(
            summary,
            [
                ("dense", Some(10.0), 2, 90.0, 110.0),
                ("hack", Some(10.0), 1, 10.0, 25.0),
                ("dense", Some(25.0), 1, 40.0, 60.0)
            ]
        );
    }

    #[test]
    fn the_table_compares_each_group_with_the_baseline_at_its_link_and_prompt() {
        let records = [
            record("dense", 10.0, 64, 80.0, 90.0, 100.0),
            record("hack", 10.0, 64, 10.0, 15.0, 25.0),
            record("hack", 25.0, 64, 10.0, 15.0, 20.0),
        ];
        let table = markdown_table(&group_means(&records), "dense");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5);
        // hack at 10 Gbit/s: 25 against dense's 100 ms, 75 % lower; its JCT splits into 10 ms
        // until the last layer, 5 to the first token and 10 of decoding.
        assert!(lines[3].starts_with("| hack | 10 | 64 | 1 | 10.0 | 5.0 | 10.0 | 15.0 |"), "{}", lines[3]);
        assert!(lines[3].ends_with("| -75.0 % |"), "{}", lines[3]);
        assert!(lines[2].ends_with("| +0.0 % |"), "{}", lines[2]);
        // No dense run at 25 Gbit/s.
        assert!(lines[4].ends_with("| – |"), "{}", lines[4]);
    }

    #[test]
    fn series_follow_the_link_rate_per_scheme_and_prompt() {
        let records = [
            record("hack", 25.0, 64, 1.0, 2.0, 20.0),
            record("hack", 10.0, 64, 1.0, 2.0, 25.0),
            record("hack", 10.0, 128, 1.0, 2.0, 40.0),
        ];
        let series = jct_series(&group_means(&records));
        let got: Vec<(&str, Vec<(f64, f64)>)> = series.iter().map(|s| (s.name.as_str(), s.points.clone())).collect();
        assert_eq!(
            got,
            [("hack, 64 tokens", vec![(10.0, 25.0), (25.0, 20.0)]), ("hack, 128 tokens", vec![(10.0, 40.0)])]
        );
    }
}
