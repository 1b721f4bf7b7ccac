//! Choosing the next token from logits: greedy, or temperature + top-p (nucleus) sampling with a
//! fixed seed.

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// How to pick tokens. `temperature == 0` is greedy (argmax). Serializes to JSON.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SamplingConfig {
    /// Softmax temperature; 0 picks the argmax.
    pub temperature: f32,
    /// Nucleus mass: sample among the most likely tokens whose probabilities sum to `top_p`.
    pub top_p: f32,
    /// Seed of the random generator (the same seed gives the same tokens).
    pub seed: u64,
}

impl SamplingConfig {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, top_p: 1.0, seed: 0 }
    }
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self::greedy()
    }
}

/// A stateful token picker built from a [`SamplingConfig`].
#[derive(Debug, Clone)]
pub struct Sampler {
    config: SamplingConfig,
    rng: StdRng,
}

impl Sampler {
    /// A sampler seeded from `config.seed`.
    pub fn new(config: SamplingConfig) -> Self {
        Self { config, rng: StdRng::seed_from_u64(config.seed) }
    }

    /// Picks a token id from one position's logits (`[vocab]`).
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        if self.config.temperature <= 0.0 {
            return argmax(logits);
        }
        let inv_t = 1.0 / self.config.temperature as f64;
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let mut probs: Vec<(u32, f64)> =
            logits.iter().enumerate().map(|(i, &l)| (i as u32, ((l as f64 - max) * inv_t).exp())).collect();
        let total: f64 = probs.iter().map(|p| p.1).sum();
        probs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let top_p = self.config.top_p.clamp(f32::MIN_POSITIVE, 1.0) as f64 * total;
        let mut kept = 0;
        let mut mass = 0.0;
        for p in &probs {
            kept += 1;
            mass += p.1;
            if mass >= top_p {
                break;
            }
        }
        let mut target = self.rng.random::<f64>() * mass;
        for &(id, p) in &probs[..kept] {
            if target < p {
                return id;
            }
            target -= p;
        }
        probs[kept - 1].0
    }
}

/// Index of the largest logit (the first one on ties, as llama.cpp's argmax).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_argmax() {
        let mut s = Sampler::new(SamplingConfig::greedy());
        assert_eq!(s.pick(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn same_seed_same_tokens_and_top_p_restricts_support() {
        let logits = [2.0, 1.9, 0.0, -5.0, 1.0];
        let config = SamplingConfig { temperature: 1.0, top_p: 0.5, seed: 7 };
        let a: Vec<u32> = {
            let mut s = Sampler::new(config);
            (0..50).map(|_| s.pick(&logits)).collect()
        };
        let b: Vec<u32> = {
            let mut s = Sampler::new(config);
            (0..50).map(|_| s.pick(&logits)).collect()
        };
        assert_eq!(a, b);
        // p(0) ~ 0.41, p(1) ~ 0.37: the nucleus of mass 0.5 holds tokens 0 and 1 only.
        assert!(a.iter().all(|&t| t == 0 || t == 1), "{a:?}");
        assert!(a.contains(&0) && a.contains(&1));
    }
}
