//! Fine-tuning rotations from their SVD starting point with Burn's autodiff, kept orthogonal.
//!
//! The SVD puts the most energy of the stacked activations in the leading directions, which is
//! not the same as the least damage to attention when the rest is cut: query/key truncation acts
//! through a softmax and value truncation through attention-weighted sums and `W_O`. This module
//! trains each KV head's two bases at the chosen ranks on the error of the layer's attention
//! output through the output projection
//! ([`relative_output_error`](burn_kvcompress::finetune::relative_output_error)), computed as the
//! cache and the folded weights compute it: scores `(q R̃)(k R̃)ᵀ / √d`, values `v R̃ᵥ R̃ᵥᵀ`
//! plus the calibration mean of the dropped coordinates.
//!
//! The bases stay orthogonal: each step is a Riemannian Adam step with a QR retraction
//! ([`OrthogonalAdam`](burn_kvcompress::finetune::OrthogonalAdam)). Only the span of a basis' first `k` columns matters to the loss; the
//! singular values and means of the file are kept, so the same rate gives the same ranks the
//! rotations were trained for.

mod objective;

pub use objective::{finetune_rotations, zack_attention_output, HeadBases};
