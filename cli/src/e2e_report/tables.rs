//! The sweep's Markdown tables: where each group's job completion time goes, the load each
//! group made and its tails, and the most load each scheme serves within a TBT target.

use super::groups::GroupMean;
use super::record::{arrivals_cell, rate_cell};

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
        let versus = groups
            .iter()
            .find(|b| b.scheme == baseline && b.matches(g))
            .map_or("–".to_string(), |b| percent_change(g.jct_ms, b.jct_ms));
        out += &format!(
            "{} {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.1} | {:.2} | {versus} |\n",
            group_cells(g),
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

/// A Markdown table of the load each group made: requests served per second, the most decoded
/// together, how many the KV budget holds, and the 99th percentiles of TTFT, of the gaps between
/// tokens and of JCT.
pub fn load_table(groups: &[GroupMean]) -> String {
    let mut out = String::from(
        "| scheme | link Gbit/s | requests/s | prompt | requests | served req/s | decoded together (most) | \
         budget holds | TTFT p99 ms | TBT p99 ms | JCT p99 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for g in groups {
        out += &format!(
            "{} {:.3} | {} | {} | {:.1} | {:.2} | {:.1} |\n",
            group_cells(g),
            g.served_per_s,
            g.peak_batch,
            g.budget_holds.map_or("–".to_string(), |n| n.to_string()),
            g.p99.ttft_ms,
            g.p99.tbt_ms,
            g.p99.jct_ms,
        );
    }
    out
}

/// The group of `groups` that serves the most requests per second among those of `scheme` on
/// `line`'s load line (same link, arrivals, batch, prompt) arriving at a rate whose 99th
/// percentile gap between tokens stays within `tbt_ms`.
fn most_served_within<'a>(
    groups: &'a [GroupMean],
    scheme: &str,
    line: &GroupMean,
    tbt_ms: f64,
) -> Option<&'a GroupMean> {
    groups
        .iter()
        .filter(|g| g.scheme == scheme && g.same_load_line(line) && g.request_rate.is_some() && g.p99.tbt_ms <= tbt_ms)
        .max_by(|a, b| a.served_per_s.total_cmp(&b.served_per_s))
}

/// A Markdown table, per scheme and load line (link, arrivals, batch, prompt) run at request
/// rates: the most requests per second served with the 99th percentile gap between tokens
/// within `tbt_ms`, at which request rate, the mean JCT there, and both against `baseline`'s
/// on the same line ("none" where no rate stayed within; "–" without a baseline).
pub fn within_tbt_table(groups: &[GroupMean], baseline: &str, tbt_ms: f64) -> String {
    let mut out = format!(
        "| scheme | link Gbit/s | arrivals, batch | prompt | most served req/s with TBT p99 ≤ {tbt_ms} ms | \
         at requests/s | mean JCT ms there | served vs baseline | JCT vs baseline |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut lines: Vec<&GroupMean> = Vec::new();
    for g in groups.iter().filter(|g| g.request_rate.is_some()) {
        if !lines.iter().any(|l| l.scheme == g.scheme && l.same_load_line(g)) {
            lines.push(g);
        }
    }
    for line in lines {
        let best = most_served_within(groups, &line.scheme, line, tbt_ms);
        let base = most_served_within(groups, baseline, line, tbt_ms);
        let cells = match best {
            None => "none | – | – | – | –".to_string(),
            Some(b) => {
                let (served, jct) = match base {
                    None => ("–".to_string(), "–".to_string()),
                    Some(base) => {
                        (format!("{:.2}×", b.served_per_s / base.served_per_s), percent_change(b.jct_ms, base.jct_ms))
                    }
                };
                let rate = b.request_rate.expect("a group at a rate");
                format!("{:.3} | {rate} | {:.1} | {served} | {jct}", b.served_per_s, b.jct_ms)
            }
        };
        let arrivals = arrivals_cell(line.arrivals, line.max_batch);
        out += &format!("| {} | {} | {arrivals} | {} | {cells} |\n", line.scheme, link_cell(line), line.prompt_tokens);
    }
    out
}

/// How much `value` lies above (+) or below (−) `base`, in percent of `base`: a cell.
fn percent_change(value: f64, base: f64) -> String {
    format!("{:+.1} %", (value / base - 1.0) * 100.0)
}

/// The cells that name a group: `| scheme | link | rate | prompt | requests |`.
fn group_cells(g: &GroupMean) -> String {
    let rate = rate_cell(g.request_rate, g.arrivals, g.max_batch);
    format!("| {} | {} | {rate} | {} | {} |", g.scheme, link_cell(g), g.prompt_tokens, g.requests)
}

fn link_cell(g: &GroupMean) -> String {
    g.link_gbps.map_or("unpaced".to_string(), |l| format!("{l}"))
}

#[cfg(test)]
mod tests {
    use super::super::groups::group_means;
    use super::super::record::{ArrivalProcess, RequestRecord};
    use super::super::tests::{queued, record};
    use super::*;

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
    }

    /// A batched, Poisson-arriving request of `scheme` at `rate` whose every token gap is
    /// `gap_ms`, arriving at `arrival_ms` and done `jct_ms` later.
    fn loaded(scheme: &str, rate: f64, gap_ms: f32, arrival_ms: f64, jct_ms: f64) -> RequestRecord {
        let r = queued(record(scheme, 10.0, 64, 10.0, 15.0, jct_ms), rate, 0.0);
        RequestRecord {
            arrivals: ArrivalProcess::Poisson { seed: 0 },
            max_batch: 8,
            arrival_ms,
            token_gaps_ms: vec![gap_ms; 7],
            ..r
        }
    }

    #[test]
    fn the_load_table_gives_each_groups_throughput_and_tails() {
        let records = [loaded("dense", 1.0, 20.0, 0.0, 1000.0), loaded("dense", 1.0, 30.0, 1000.0, 1000.0)];
        let table = load_table(&group_means(&records));
        let row = table.lines().nth(2).unwrap();
        // Two requests from 0 to 2 s; the larger gaps are the tail.
        assert_eq!(row, "| dense | 10 | 1 Poisson, batch 8 | 64 | 2 | 1.000 | 1 | – | 15.0 | 30.00 | 1000.0 |");
    }

    #[test]
    fn the_most_load_within_the_tbt_target_is_found_per_scheme_and_compared() {
        let records = [
            // dense: 2 req/s within 50 ms, 4 req/s beyond it.
            loaded("dense", 1.0, 20.0, 0.0, 500.0),
            loaded("dense", 2.0, 40.0, 0.0, 500.0),
            loaded("dense", 4.0, 60.0, 0.0, 250.0),
            // hack: 4 req/s within it.
            loaded("hack", 2.0, 10.0, 0.0, 500.0),
            loaded("hack", 4.0, 20.0, 0.0, 250.0),
            // pq: no rate within it.
            loaded("pq", 4.0, 70.0, 0.0, 250.0),
        ];
        let table = within_tbt_table(&group_means(&records), "dense", 50.0);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            rows,
            [
                "| dense | 10 | Poisson, batch 8 | 64 | 2.000 | 2 | 500.0 | 1.00× | +0.0 % |",
                "| hack | 10 | Poisson, batch 8 | 64 | 4.000 | 4 | 250.0 | 2.00× | -50.0 % |",
                "| pq | 10 | Poisson, batch 8 | 64 | none | – | – | – | – |",
            ]
        );
    }
}
