//! One decode request's measurements, as a record for the report and as a row of the job's
//! printed table.

use std::time::Duration;

use burn_kvtransfer::decode::Arrivals;
use kvcompress_cli::{
    e2e_report::{describe_arrivals, p99, RequestRecord},
    transfer_args::Transport,
};

use crate::worker::Job;

/// One request's measurements.
pub struct Row {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// The prefill server that served it (index into the job's servers).
    pub server: usize,
    /// Servers tried (more than 1 when one failed).
    pub attempts: usize,
    /// Bytes of its KV cache on the decode device.
    pub kv_bytes: usize,
    /// Bytes on the wire for it, both directions.
    pub wire_bytes: u64,
    /// When its first and last layers and its logits arrived, from its submission.
    pub arrivals: Arrivals,
    /// Time waiting: from its arrival to its submission to a prefill server, and from its caches
    /// (or states) being in to the start of its decoding.
    pub queue: Duration,
    /// From its arrival to its first new token.
    pub ttft: Duration,
    /// Mean time between new tokens.
    pub tbt: Duration,
    /// From its arrival to its last new token.
    pub jct: Duration,
    /// When it arrived, from the run's first arrival.
    pub arrival: Duration,
    /// Each gap between two consecutive new tokens.
    pub token_gaps: Vec<Duration>,
    /// The most requests a step decoded while it ran, itself included.
    pub peak_batch: usize,
    /// The bytes it held of the KV budget (its cache at prompt plus new tokens), where requests
    /// arrived at a rate.
    pub reserved_bytes: Option<usize>,
    /// The new tokens.
    pub tokens: Vec<u32>,
    /// With `--check`: the SHA-256 of the caches it was decoded from, as received (each layer's
    /// state exported and serialized).
    pub kv_hash: Option<[u8; 32]>,
    /// With `--check`: whether its received KV hashed like a local prefill's, and whether its
    /// tokens equal a single-process run's.
    pub check: Option<(bool, bool)>,
}

impl Row {
    /// The row as a record of `job`'s scheme and link.
    pub fn record(&self, job: &Job) -> RequestRecord {
        RequestRecord {
            scheme: job.kv.to_string(),
            link_gbps: job.link_gbps,
            request_rate: job.request_rate,
            arrivals: job.arrivals,
            // Requests one at a time (no rate) decode alone whatever `--max-batch` says.
            max_batch: job.request_rate.map_or(1, |_| job.run.max_batch.into()),
            prompt_tokens: self.prompt_tokens,
            new_tokens: self.tokens.len(),
            kv_bytes: self.kv_bytes,
            wire_bytes: self.wire_bytes,
            first_layer_ms: ms(self.arrivals.first_layer),
            last_layer_ms: ms(self.arrivals.last_layer),
            logits_ms: ms(self.arrivals.logits),
            ttft_ms: ms(self.ttft),
            tbt_ms: ms(self.tbt),
            jct_ms: ms(self.jct),
            queue_ms: ms(self.queue),
            arrival_ms: ms(self.arrival),
            token_gaps_ms: self.token_gaps.iter().map(|&g| ms(g) as f32).collect(),
            peak_batch: self.peak_batch,
            kv_budget_bytes: job.request_rate.and(job.run.kv_budget_bytes()).map(|b| b as u64),
            reserved_bytes: self.reserved_bytes.map(|b| b as u64),
        }
    }
}

/// `d` in milliseconds.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints `rows` of `job` under scheme `scheme`: one line per request, then the means.
pub fn print_table(scheme: &str, job: &Job, rows: &[Row]) {
    let link = job.link_gbps.map_or("unpaced".into(), |g| format!("{g} Gbit/s"));
    let arrivals = describe_arrivals(job.request_rate, job.arrivals);
    let mode = match job.run.transfer.transport {
        Transport::Tcp => format!("{:?} mode", job.run.mode),
        Transport::Nixl => "Read mode (NIXL)".into(),
    };
    println!("scheme {scheme}, {mode}, link {link}, {arrivals}, {}", job.servers);
    println!(
        "{:>3} {:>6} {:>6} {:>4} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>6} {:>5} {:>6}",
        "req",
        "prompt",
        "server",
        "try",
        "KV bytes",
        "wire B",
        "layer0 ms",
        "layerN ms",
        "queue ms",
        "TTFT ms",
        "TBT ms",
        "JCT ms",
        "tokens",
        "KV=",
        "tok="
    );
    let mark = |c: Option<bool>| c.map_or("-", |ok| if ok { "yes" } else { "NO" });
    for (i, r) in rows.iter().enumerate() {
        println!(
            "{:>3} {:>6} {:>6} {:>4} {:>10} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>9.1} {:>6} {:>5} {:>6}",
            i,
            r.prompt_tokens,
            r.server,
            r.attempts,
            r.kv_bytes,
            r.wire_bytes,
            ms(r.arrivals.first_layer),
            ms(r.arrivals.last_layer),
            ms(r.queue),
            ms(r.ttft),
            ms(r.tbt),
            ms(r.jct),
            r.tokens.len(),
            mark(r.check.map(|c| c.0)),
            mark(r.check.map(|c| c.1)),
        );
    }
    let n = rows.len().max(1) as f64;
    let mean = |f: fn(&Row) -> Duration| rows.iter().map(|r| ms(f(r))).sum::<f64>() / n;
    println!(
        "mean queue {:.1} ms, TTFT {:.1} ms, TBT {:.1} ms, JCT {:.1} ms; p99 TBT {:.1} ms; most decoded together \
         {}; wire bytes {} (--check and warm-up fetches not counted)",
        mean(|r| r.queue),
        mean(|r| r.ttft),
        mean(|r| r.tbt),
        mean(|r| r.jct),
        p99(rows.iter().flat_map(|r| r.token_gaps.iter().map(|&g| ms(g))).collect()),
        rows.iter().map(|r| r.peak_batch).max().unwrap_or(1),
        rows.iter().map(|r| r.wire_bytes).sum::<u64>()
    );
}
