//! The next-token distributions of a decode-perplexity run, kept to measure how far another
//! run's distributions are from them: the mean KL divergence `KL(P_ref ‖ P)` over the scored
//! positions (in nats), what a compressed cache costs the model beyond the perplexity of the
//! observed tokens.

use crate::error::RunError;

use super::PerplexityConfig;

/// Log-probabilities of every vocabulary entry at every scored position of a run, in the order
/// the run scores them.
#[derive(Debug, Clone, PartialEq)]
pub struct NextTokenLogProbs {
    /// The protocol of the run (a comparison needs the same one).
    pub config: PerplexityConfig,
    /// Vocabulary size.
    pub vocab: usize,
    /// `[positions, vocab]`, row-major.
    pub rows: Vec<f32>,
}

/// What a run does with next-token distributions besides scoring the tokens.
#[derive(Debug, Clone, Copy)]
pub enum Reference<'a> {
    /// Nothing.
    None,
    /// Keep them (to be the reference of later runs).
    Record,
    /// Measure the KL divergence from these.
    Compare(&'a NextTokenLogProbs),
}

/// `log softmax(logits)` in f64.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_sum = logits.iter().map(|&l| (l as f64 - max).exp()).sum::<f64>().ln() + max;
    logits.iter().map(|&l| l as f64 - log_sum).collect()
}

/// `KL(p ‖ q) = Σ p (log p − log q)` of two distributions given as log-probabilities.
pub fn kl_divergence(log_p: &[f32], log_q: &[f64]) -> f64 {
    log_p.iter().zip(log_q).map(|(&lp, &lq)| (lp as f64).exp() * (lp as f64 - lq)).sum()
}

impl NextTokenLogProbs {
    /// An empty record for a run of `config` over a vocabulary of `vocab`.
    pub fn new(config: PerplexityConfig, vocab: usize) -> Self {
        Self { config, vocab, rows: Vec::new() }
    }

    /// Positions recorded.
    pub fn positions(&self) -> usize {
        self.rows.len() / self.vocab.max(1)
    }

    /// Position `i`'s log-probabilities.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.rows[i * self.vocab..(i + 1) * self.vocab]
    }

    /// Checks that a run of `config` over `vocab` entries can be compared with this record.
    pub fn check(&self, config: PerplexityConfig, vocab: usize) -> Result<(), RunError> {
        if self.config != config || self.vocab != vocab {
            return Err(RunError::Input(format!(
                "the reference run had protocol {:?} over {} entries; this one {config:?} over {vocab}",
                self.config, self.vocab
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_equal_distributions_and_positive_otherwise() {
        let logits = [1.0f32, -2.0, 0.5, 3.0];
        let log_p: Vec<f32> = log_softmax(&logits).into_iter().map(|x| x as f32).collect();
        assert!(kl_divergence(&log_p, &log_softmax(&logits)).abs() < 1e-7);
        let other = log_softmax(&[1.0, -2.0, 0.5, 2.0]);
        let kl = kl_divergence(&log_p, &other);
        // By hand: p = softmax(logits), log q − log p = −1 on entry 3 minus the change of log Z.
        let p: Vec<f64> = log_p.iter().map(|&x| (x as f64).exp()).collect();
        let z_ratio = (p[0] + p[1] + p[2]) + p[3] * (-1.0f64).exp();
        let expected = p[3] * 1.0 + z_ratio.ln();
        assert!((kl - expected).abs() < 1e-6, "{kl} vs {expected}");
        assert!(kl > 0.0);
    }
}
