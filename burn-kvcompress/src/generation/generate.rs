//! The prefill-then-decode loop.

use std::time::Instant;

use burn::tensor::backend::Backend;

use super::{Sampler, SamplingConfig};
use crate::{
    cache::{KvCache, LayerCaches},
    error::RunError,
    model::{logits_to_host, CausalLm, Logits},
};

/// Options of a generation run. Serializes to JSON.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GenerateOptions {
    /// Most tokens to generate per sequence.
    pub max_new_tokens: usize,
    /// Tokens that end a sequence (EOS); the stop token is included in the output.
    pub stop_tokens: Vec<u32>,
    /// Token picking.
    pub sampling: SamplingConfig,
}

/// The result of a generation run.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// New tokens per sequence.
    pub tokens: Vec<Vec<u32>>,
    /// Prompt tokens processed (padding excluded).
    pub prompt_tokens: usize,
    /// Seconds spent in prefill.
    pub prefill_seconds: f64,
    /// Decode steps run.
    pub decode_steps: usize,
    /// Seconds spent in decode steps.
    pub decode_seconds: f64,
}

/// Generates continuations of several prompts at once (left-padded into one batch) through
/// `caches`, which must be empty and built for `prompts.len()` sequences. `on_token(row, token)`
/// is called for every new token as soon as it is chosen.
pub fn generate_batch<B: Backend, C: KvCache<B>>(
    model: &CausalLm<B>,
    caches: &mut LayerCaches<C>,
    prompts: &[Vec<u32>],
    options: &GenerateOptions,
    on_token: impl FnMut(usize, u32),
) -> Result<Generation, RunError> {
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(RunError::Input("every prompt needs at least one token".into()));
    }
    let started = Instant::now();
    let logits = logits_to_host(model.prefill_padded(prompts, caches, 0)?);
    let prefill_seconds = started.elapsed().as_secs_f64();
    let decoded = decode_batch(model, caches, logits, options, on_token)?;
    Ok(Generation {
        tokens: decoded.tokens,
        prompt_tokens: prompts.iter().map(Vec::len).sum(),
        prefill_seconds,
        decode_steps: decoded.decode_steps,
        decode_seconds: decoded.decode_seconds,
    })
}

/// The decode half of a generation run.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// New tokens per sequence.
    pub tokens: Vec<Vec<u32>>,
    /// Decode steps run.
    pub decode_steps: usize,
    /// Seconds spent picking tokens and in decode steps.
    pub decode_seconds: f64,
}

/// Continues a batch whose prompts are already in `caches`, starting from the logits of each
/// row's last prompt position (`[batch][vocab]`): exactly the decode half of
/// [`generate_batch`], so a prefill done elsewhere (another process) yields the same tokens.
pub fn decode_batch<B: Backend, C: KvCache<B>>(
    model: &CausalLm<B>,
    caches: &mut LayerCaches<C>,
    mut logits: Vec<Vec<f32>>,
    options: &GenerateOptions,
    mut on_token: impl FnMut(usize, u32),
) -> Result<Decoded, RunError> {
    let mut samplers: Vec<Sampler> = (0..logits.len())
        .map(|row| {
            let mut config = options.sampling;
            config.seed = config.seed.wrapping_add(row as u64);
            Sampler::new(config)
        })
        .collect();
    let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); logits.len()];
    let mut done = vec![false; logits.len()];
    let started = Instant::now();
    let mut decode_steps = 0;
    for step in 0..options.max_new_tokens {
        let mut next = Vec::with_capacity(logits.len());
        for (row, row_logits) in logits.iter().enumerate() {
            let token = samplers[row].pick(row_logits);
            if !done[row] {
                tokens[row].push(token);
                on_token(row, token);
                done[row] = options.stop_tokens.contains(&token);
            }
            next.push(vec![token]);
        }
        if done.iter().all(|&d| d) || step + 1 == options.max_new_tokens {
            break;
        }
        logits = logits_to_host(model.forward(&next, caches, Logits::Last)?);
        decode_steps += 1;
    }
    Ok(Decoded { tokens, decode_steps, decode_seconds: started.elapsed().as_secs_f64() })
}

/// Generates a continuation of one prompt; see [`generate_batch`].
pub fn generate<B: Backend, C: KvCache<B>>(
    model: &CausalLm<B>,
    caches: &mut LayerCaches<C>,
    prompt: &[u32],
    options: &GenerateOptions,
    mut on_token: impl FnMut(u32),
) -> Result<Generation, RunError> {
    generate_batch(model, caches, &[prompt.to_vec()], options, |_, t| on_token(t))
}
