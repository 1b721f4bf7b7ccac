//! Records of disaggregated requests (`disagg`): one record per request (`disagg decode --json`,
//! `disagg sweep`), a sweep's tables (each scheme's job completion time against a baseline's,
//! the load each run made with its tails, the most load each scheme serves within a target gap
//! between tokens) and the series of its plots against the link rate or the request rate.

mod groups;
mod record;
mod series;
mod tables;

pub use groups::{group_means, p99, GroupMean, Tails};
pub use record::{describe_arrivals, ArrivalProcess, RequestRecord};
pub use series::{series, Axis, Quantity};
pub use tables::{load_table, markdown_table, within_tbt_table};

#[cfg(test)]
mod tests {
    use super::*;

    /// A request of `scheme` one at a time over a `link` Gbit/s link: its last layer, first
    /// token and last token at the given times, ms.
    pub(super) fn record(
        scheme: &str,
        link: f64,
        prompt: usize,
        last_layer: f64,
        ttft: f64,
        jct: f64,
    ) -> RequestRecord {
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
            arrivals: ArrivalProcess::Fixed,
            arrival_ms: 0.0,
            token_gaps_ms: Vec::new(),
            peak_batch: 1,
            kv_budget_bytes: None,
            reserved_bytes: None,
        }
    }

    /// `record` arriving at `rate` requests/s after waiting `queue` ms.
    pub(super) fn queued(r: RequestRecord, rate: f64, queue: f64) -> RequestRecord {
        RequestRecord {
            request_rate: Some(rate),
            queue_ms: queue,
            ttft_ms: r.ttft_ms + queue,
            jct_ms: r.jct_ms + queue,
            ..r
        }
    }
}
