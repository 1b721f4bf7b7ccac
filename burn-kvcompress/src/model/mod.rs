//! Llama and Mistral decoders generic over the KV cache scheme.

mod causal_lm;
mod config;
mod fold;
mod layer;
mod ops;
mod precision;
mod residual;
mod rope;

pub use causal_lm::{logits_to_host, CausalLm, Logits};
pub use config::{Architecture, ModelConfig, MAX_ROPE_ELEMENTS};
pub use fold::fold_value_rotation;
pub use layer::{DecoderLayer, FeedForward, SelfAttention};
pub use ops::{AddRmsNormOp, ModelOps, ModelOpsBackend, RmsNormOp, RotaryQkOp, RowProducts, SwigluOp};
pub use residual::Residual;
pub use rope::{rotate_heads, RotaryEmbedding};
