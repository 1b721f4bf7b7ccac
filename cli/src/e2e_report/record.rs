//! One disaggregated request's record, and how requests arrive.

use std::time::Duration;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// One request's measurements, times in milliseconds: the first-layer, last-layer and logits
/// times from the request's submission to the prefill server, the others (queueing, TTFT, JCT)
/// from its arrival. One request at a time, a request arrives when it is submitted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestRecord {
    /// The KV scheme, as spelled on the command line.
    pub scheme: String,
    /// The emulated rate of each side's outgoing link, Gbit/s (`None`: unpaced).
    pub link_gbps: Option<f64>,
    /// Requests per second arriving by `arrivals` (`None`: one request at a time, each arriving
    /// when the previous one has finished).
    #[serde(default)]
    pub request_rate: Option<f64>,
    /// How requests arrived at `request_rate` (records from before Poisson arrivals: fixed).
    #[serde(default)]
    pub arrivals: ArrivalProcess,
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
    /// When it arrived, from the first timed request's arrival in its run (records from before
    /// this field: 0).
    #[serde(default)]
    pub arrival_ms: f64,
    /// Each gap between two consecutive new tokens (empty in records from before this field).
    #[serde(default)]
    pub token_gaps_ms: Vec<f32>,
    /// The most requests a step decoded while this one ran, itself included.
    #[serde(default = "one")]
    pub peak_batch: usize,
    /// The decode side's KV budget (`--kv-budget-gb`), bytes, if it had one.
    #[serde(default)]
    pub kv_budget_bytes: Option<u64>,
    /// The bytes this request held of the budget while it ran (its cache at prompt plus new
    /// tokens), where requests arrived at a rate.
    #[serde(default)]
    pub reserved_bytes: Option<u64>,
}

fn one() -> usize {
    1
}

/// How requests arrive at a request rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "process")]
pub enum ArrivalProcess {
    /// On a fixed schedule: request `i` at `i / rate` s.
    #[default]
    Fixed,
    /// By a Poisson process: the first request at 0, each next one after a gap drawn from the
    /// exponential distribution of mean `1 / rate` s, from `seed`.
    Poisson {
        /// Seed of the gaps.
        seed: u64,
    },
}

impl ArrivalProcess {
    /// When each of `count` requests arriving at `rate` per second arrives, from the first
    /// (non-decreasing, the first at 0).
    pub fn times(self, rate: f64, count: usize) -> Vec<Duration> {
        match self {
            Self::Fixed => (0..count).map(|i| Duration::from_secs_f64(i as f64 / rate)).collect(),
            Self::Poisson { seed } => {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut at = 0.0;
                (0..count)
                    .map(|i| {
                        if i > 0 {
                            // Inverse transform: 1 − U lies in (0, 1], so the logarithm is finite.
                            at += -(1.0 - rng.random::<f64>()).ln() / rate;
                        }
                        Duration::from_secs_f64(at)
                    })
                    .collect()
            }
        }
    }

    /// `" (Poisson, seed S)"` or nothing for a fixed schedule: what follows a rate in words.
    fn suffix(self) -> String {
        match self {
            Self::Fixed => String::new(),
            Self::Poisson { seed } => format!(" (Poisson, seed {seed})"),
        }
    }
}

/// How requests arrive, in words: `"one request at a time"` (`None`), `"{rate} requests/s"` or
/// `"{rate} requests/s (Poisson, seed S)"`.
pub fn describe_arrivals(request_rate: Option<f64>, arrivals: ArrivalProcess) -> String {
    request_rate.map_or("one request at a time".into(), |r| format!("{r} requests/s{}", arrivals.suffix()))
}

/// A table cell for the request rate of a group: `"one at a time"`, `"2"`, `"2 Poisson"`, with
/// `", batch N"` where more than one request decoded at a time.
pub(crate) fn rate_cell(request_rate: Option<f64>, arrivals: ArrivalProcess, max_batch: usize) -> String {
    let Some(rate) = request_rate else { return "one at a time".into() };
    match arrivals {
        ArrivalProcess::Fixed => format!("{rate}{}", batch_suffix(max_batch)),
        ArrivalProcess::Poisson { .. } => format!("{rate} {}", arrivals_cell(arrivals, max_batch)),
    }
}

/// A table cell for how a group's requests arrived and decoded: `"fixed"` or `"Poisson"`, with
/// `", batch N"` where more than one request decoded at a time.
pub(crate) fn arrivals_cell(arrivals: ArrivalProcess, max_batch: usize) -> String {
    let process = match arrivals {
        ArrivalProcess::Fixed => "fixed",
        ArrivalProcess::Poisson { .. } => "Poisson",
    };
    format!("{process}{}", batch_suffix(max_batch))
}

fn batch_suffix(max_batch: usize) -> String {
    match max_batch {
        1 => String::new(),
        batch => format!(", batch {batch}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrivals_are_described_in_words() {
        assert_eq!(describe_arrivals(None, ArrivalProcess::Fixed), "one request at a time");
        assert_eq!(describe_arrivals(Some(0.15), ArrivalProcess::Fixed), "0.15 requests/s");
        let poisson = ArrivalProcess::Poisson { seed: 3 };
        assert_eq!(describe_arrivals(Some(2.0), poisson), "2 requests/s (Poisson, seed 3)");
        assert_eq!(rate_cell(Some(2.0), poisson, 8), "2 Poisson, batch 8");
        assert_eq!(rate_cell(Some(2.0), ArrivalProcess::Fixed, 1), "2");
        assert_eq!(arrivals_cell(poisson, 8), "Poisson, batch 8");
        assert_eq!(arrivals_cell(ArrivalProcess::Fixed, 1), "fixed");
    }

    #[test]
    fn a_fixed_schedule_spaces_requests_evenly() {
        let times = ArrivalProcess::Fixed.times(4.0, 3);
        assert_eq!(times, [0.0, 0.25, 0.5].map(Duration::from_secs_f64));
    }

    #[test]
    fn poisson_arrivals_are_seeded_and_average_the_rate() {
        let poisson = |seed| ArrivalProcess::Poisson { seed }.times(2.0, 20_000);
        let times = poisson(7);
        assert_eq!(times, poisson(7));
        assert_ne!(times, poisson(8));
        assert_eq!(times[0], Duration::ZERO);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        // 19,999 exponential gaps of mean 0.5 s: their mean's standard error is 0.5/√19,999 ≈
        // 0.0035 s, so ±0.02 s is more than five of them.
        let mean_gap = times[times.len() - 1].as_secs_f64() / (times.len() - 1) as f64;
        assert!((mean_gap - 0.5).abs() < 0.02, "{mean_gap}");
        // Exponential gaps: about e^-1 of them exceed the mean (a fixed schedule: none).
        let long = times.windows(2).filter(|w| (w[1] - w[0]).as_secs_f64() > 0.5).count() as f64;
        assert!((long / 19_999.0 - (-1.0f64).exp()).abs() < 0.02, "{long}");
    }

    #[test]
    fn records_from_before_the_load_fields_still_parse() {
        let old = r#"{"scheme":"dense","link_gbps":10.0,"prompt_tokens":64,"new_tokens":8,"kv_bytes":1,"wire_bytes":2,
            "first_layer_ms":1.0,"last_layer_ms":2.0,"logits_ms":2.0,"ttft_ms":3.0,"tbt_ms":1.0,"jct_ms":9.0}"#;
        let record = serde_json::from_str::<RequestRecord>(old).unwrap();
        assert_eq!((record.max_batch, record.peak_batch, record.arrivals), (1, 1, ArrivalProcess::Fixed));
        assert!(record.token_gaps_ms.is_empty() && record.reserved_bytes.is_none());
    }
}
