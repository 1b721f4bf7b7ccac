//! Decode-perplexity: windows of `window` consecutive tokens from the start of the text; in each,
//! prefill the first `prefill` tokens in one batch, then feed the rest one at a time through the
//! KV cache, scoring `log p(token_i | tokens before i)` from the logits produced just before
//! `token_i` is fed. `ppl = exp(mean NLL)` over every scored token of every window.
//!
//! Windows are independent, so several run as one batch (same numbers, fewer weight passes).

use std::time::Instant;

use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use super::{kl_divergence, log_softmax, NextTokenLogProbs, Reference};
use crate::{
    cache::{KvScheme, LayerCaches},
    error::RunError,
    model::{logits_to_host, CausalLm, Logits},
};

/// Protocol parameters. The defaults are the project's protocol (1024 / 512 / 4 windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerplexityConfig {
    /// Tokens per window.
    pub window: usize,
    /// Tokens prefilled in one batch at the start of each window.
    pub prefill: usize,
    /// Most windows to evaluate (fewer if the text is short).
    pub max_windows: usize,
    /// Windows run together as one batch.
    pub batch: usize,
}

impl Default for PerplexityConfig {
    fn default() -> Self {
        Self { window: 1024, prefill: 512, max_windows: 4, batch: 4 }
    }
}

/// The outcome of a decode-perplexity run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerplexityReport {
    /// The scheme's name.
    pub scheme: String,
    /// `exp(mean_nll)`.
    pub ppl: f64,
    /// Mean negative log-likelihood (nats) per scored token.
    pub mean_nll: f64,
    /// Tokens scored.
    pub scored_tokens: usize,
    /// Windows evaluated.
    pub windows: usize,
    /// Largest KV-cache size over the run, bytes (all layers, the whole batch).
    pub peak_kv_bytes: usize,
    /// KV-cache bytes per cached token per sequence, all layers, at the end of a window.
    pub kv_bytes_per_token: f64,
    /// Prefill throughput, tokens per second.
    pub prefill_tokens_per_second: f64,
    /// Decode throughput, tokens per second (all sequences of the batch counted).
    pub decode_tokens_per_second: f64,
    /// Mean KL divergence (nats) of the scored positions' next-token distributions from a
    /// reference run's (see [`Reference::Compare`]); None without one.
    #[serde(default)]
    pub mean_kl: Option<f64>,
}

/// `-log softmax(logits)[target]`, computed in f64.
pub fn log_softmax_nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    max + sum.ln() - logits[target as usize] as f64
}

/// Runs the protocol on `tokens` with caches of `scheme`; `progress(done, total)` is called after
/// every decode step with the scored-token counts.
pub fn decode_perplexity<B: Backend, S: KvScheme<B>>(
    model: &CausalLm<B>,
    scheme: &S,
    tokens: &[u32],
    config: PerplexityConfig,
    device: &B::Device,
    progress: impl FnMut(usize, usize),
) -> Result<PerplexityReport, RunError> {
    decode_perplexity_with(model, scheme, tokens, config, device, Reference::None, progress).map(|(report, _)| report)
}

/// [`decode_perplexity`] that also records the next-token distributions ([`Reference::Record`],
/// returned beside the report) or measures their KL divergence from a recorded run's
/// ([`Reference::Compare`], in [`PerplexityReport::mean_kl`]).
pub fn decode_perplexity_with<B: Backend, S: KvScheme<B>>(
    model: &CausalLm<B>,
    scheme: &S,
    tokens: &[u32],
    config: PerplexityConfig,
    device: &B::Device,
    reference: Reference<'_>,
    mut progress: impl FnMut(usize, usize),
) -> Result<(PerplexityReport, Option<NextTokenLogProbs>), RunError> {
    if config.prefill == 0 || config.prefill >= config.window || config.batch == 0 {
        return Err(RunError::Input(format!("invalid protocol {config:?}")));
    }
    let windows: Vec<&[u32]> = tokens.chunks_exact(config.window).take(config.max_windows).collect();
    if windows.is_empty() {
        return Err(RunError::Input(format!(
            "the text has {} tokens, fewer than one window of {}",
            tokens.len(),
            config.window
        )));
    }
    let total = windows.len() * (config.window - config.prefill);
    let vocab = model.config().vocab_size;
    if let Reference::Compare(record) = reference {
        record.check(config, vocab)?;
    }
    let mut recorded = matches!(reference, Reference::Record).then(|| NextTokenLogProbs::new(config, vocab));
    let mut kl = 0.0;
    let (mut nll, mut scored, mut peak, mut per_token) = (0.0, 0, 0, 0.0);
    let (mut prefill_time, mut decode_time, mut decoded) = (0.0, 0.0, 0);
    for group in windows.chunks(config.batch) {
        let mut caches: LayerCaches<S::Cache> = model.new_cache(scheme, group.len(), device);
        let started = Instant::now();
        let prompt: Vec<Vec<u32>> = group.iter().map(|w| w[..config.prefill].to_vec()).collect();
        let mut logits = logits_to_host(model.forward(&prompt, &mut caches, Logits::Last)?);
        prefill_time += started.elapsed().as_secs_f64();
        let started = Instant::now();
        for i in config.prefill..config.window {
            for (row, window) in group.iter().enumerate() {
                nll += log_softmax_nll(&logits[row], window[i]);
                match (reference, recorded.as_mut()) {
                    (Reference::Compare(record), _) => {
                        kl += kl_divergence(record.row(scored), &log_softmax(&logits[row]))
                    }
                    (_, Some(record)) => record.rows.extend(log_softmax(&logits[row]).into_iter().map(|x| x as f32)),
                    _ => {}
                }
                scored += 1;
            }
            progress(scored, total);
            if i + 1 == config.window {
                break;
            }
            let step: Vec<Vec<u32>> = group.iter().map(|w| vec![w[i]]).collect();
            logits = logits_to_host(model.forward(&step, &mut caches, Logits::Last)?);
            decoded += group.len();
            peak = peak.max(caches.memory_bytes());
        }
        decode_time += started.elapsed().as_secs_f64();
        per_token = caches.memory_bytes() as f64 / (caches.len() * group.len()) as f64;
    }
    let mean_nll = nll / scored as f64;
    let mean_kl = matches!(reference, Reference::Compare(_)).then(|| kl / scored as f64);
    let report = PerplexityReport {
        scheme: scheme.name(),
        ppl: mean_nll.exp(),
        mean_nll,
        scored_tokens: scored,
        windows: windows.len(),
        peak_kv_bytes: peak,
        kv_bytes_per_token: per_token,
        prefill_tokens_per_second: (windows.len() * config.prefill) as f64 / prefill_time,
        decode_tokens_per_second: decoded as f64 / decode_time,
        mean_kl,
    };
    Ok((report, recorded))
}
