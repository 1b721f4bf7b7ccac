//! Fine-tuning codebooks from their k-means starting point with Burn's autodiff.
//!
//! k-means minimizes the reconstruction error of keys and values, but attention uses keys only
//! through `q · k` and values only through softmax-weighted sums; a centroid's error matters in
//! proportion to how queries look at it. This module trains the centroids on what attention
//! makes of them: per layer, the error of the attention output through the output projection
//! ([`relative_output_error`](burn_kvcompress::finetune::relative_output_error)), with the
//! layer's exact outputs as the target and the recent window kept exact as the cache keeps it.
//!
//! Codes are reassigned to the nearest centroid at every step, as the cache would encode with the
//! moved centroids; the gradient reaches the selected centroids through the gather that rebuilds
//! keys and values (a straight-through estimate of the assignment).
//!
//! **Why this loss and not the next-token loss through the frozen model**: the layer-wise loss
//! is the quantity the codebooks control, it trains every layer in parallel on its own recorded
//! inputs, and a step costs one attention forward and backward per layer instead of a full model
//! pass with a compressed cache in the autodiff graph; the improvement is checked where it
//! counts, on decode perplexity of unseen text.

mod objective;

pub use objective::{finetune_codebooks, nearest_codes, pq_attention_output};
