//! Evaluation: the decode-perplexity protocol of the design document.

mod perplexity;

pub use perplexity::{decode_perplexity, log_softmax_nll, PerplexityConfig, PerplexityReport};
