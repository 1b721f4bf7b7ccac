//! Evaluation: the decode-perplexity protocol of the design document, and the KL divergence of
//! a run's next-token distributions from a reference run's.

mod divergence;
mod perplexity;

pub use divergence::{kl_divergence, log_softmax, NextTokenLogProbs, Reference};
pub use perplexity::{decode_perplexity, decode_perplexity_with, log_softmax_nll, PerplexityConfig, PerplexityReport};
