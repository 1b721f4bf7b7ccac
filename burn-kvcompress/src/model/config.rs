//! The architecture hyper-parameters of a Llama or Mistral model.

use serde::{Deserialize, Serialize};

use crate::error::LoadError;

/// Which decoder architecture a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// Llama: RoPE, RMSNorm, SwiGLU, GQA, full causal attention.
    Llama,
    /// Mistral: Llama with sliding-window attention.
    Mistral,
}

/// The most elements the RoPE tables may hold (`max_position × head_dim`, cos and sin together):
/// 4 GiB of f32, 8M positions at 128 channels. The tables are the one allocation the
/// configuration sizes without the file paying for it in weight bytes, so a file declaring a
/// larger context is refused ([`LoadError::TooLarge`]) rather than allowed to exhaust memory.
pub const MAX_ROPE_ELEMENTS: u128 = 1 << 30;

/// The most elements one weight may have: what an f32 buffer can index (`isize::MAX` bytes).
const MAX_WEIGHT_ELEMENTS: u128 = isize::MAX as u128 / 4;

/// Hyper-parameters of a [`CausalLm`](super::CausalLm). Serializes to JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// The architecture.
    pub architecture: Architecture,
    /// Vocabulary size (rows of the embedding and of the output head).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU feed-forward layer.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (GQA when fewer than `num_heads`).
    pub num_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Whether the output head reuses the token embedding.
    pub tie_embeddings: bool,
    /// Sliding attention window (Mistral); `None` is full attention.
    pub sliding_window: Option<usize>,
    /// Longest sequence the RoPE table covers.
    pub max_position: usize,
}

impl ModelConfig {
    /// Checks the configuration for inconsistencies a forward pass could not survive.
    pub fn validate(&self) -> Result<(), LoadError> {
        let fail = |msg: String| Err(LoadError::InvalidConfig(msg));
        let positive = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("intermediate_size", self.intermediate_size),
            ("num_layers", self.num_layers),
            ("num_heads", self.num_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("max_position", self.max_position),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return fail(format!("{name} must be positive"));
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return fail(format!(
                "num_heads ({}) is not a multiple of num_kv_heads ({})",
                self.num_heads, self.num_kv_heads
            ));
        }
        if !self.head_dim.is_multiple_of(2) {
            return fail(format!("head_dim ({}) must be even for RoPE", self.head_dim));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return fail(format!("rope_theta ({}) must be finite and > 1", self.rope_theta));
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return fail(format!("rms_norm_eps ({}) must be finite and > 0", self.rms_norm_eps));
        }
        if self.sliding_window == Some(0) {
            return fail("sliding_window must be positive".into());
        }
        self.check_sizes()
    }

    /// Checks, in arithmetic that cannot overflow, that every weight the configuration implies
    /// fits in memory and that the RoPE tables stay within [`MAX_ROPE_ELEMENTS`], before anything
    /// is allocated from them.
    fn check_sizes(&self) -> Result<(), LoadError> {
        let n = |x: usize| x as u128;
        let (hidden, q_dim, kv_dim) =
            (n(self.hidden_size), n(self.num_heads) * n(self.head_dim), n(self.num_kv_heads) * n(self.head_dim));
        let weights = [
            ("the embedding (vocab_size × hidden_size)", n(self.vocab_size) * hidden),
            ("W_Q (num_heads × head_dim × hidden_size)", q_dim * hidden),
            ("W_K (num_kv_heads × head_dim × hidden_size)", kv_dim * hidden),
            ("the feed-forward weights (intermediate_size × hidden_size)", n(self.intermediate_size) * hidden),
        ];
        let too_large = |what: &'static str, elements: u128, limit: u128| LoadError::TooLarge { what, elements, limit };
        if let Some(&(what, elements)) = weights.iter().find(|(_, elements)| *elements > MAX_WEIGHT_ELEMENTS) {
            return Err(too_large(what, elements, MAX_WEIGHT_ELEMENTS));
        }
        let rope = n(self.max_position) * n(self.head_dim);
        if rope > MAX_ROPE_ELEMENTS {
            return Err(too_large("the RoPE tables (max_position × head_dim)", rope, MAX_ROPE_ELEMENTS));
        }
        Ok(())
    }

    /// Llama-3-8B's shape (Llama 3.1's context of 131072 positions, RoPE without its
    /// long-context scaling): 32 layers of 32 query and 8 KV heads of 128 channels, for speed
    /// measurements with [`RandomWeights`](crate::loading::RandomWeights).
    pub fn llama3_8b() -> Self {
        Self {
            architecture: Architecture::Llama,
            vocab_size: 128_256,
            hidden_size: 4096,
            intermediate_size: 14_336,
            num_layers: 32,
            num_heads: 32,
            num_kv_heads: 8,
            head_dim: 128,
            rope_theta: 500_000.0,
            rms_norm_eps: 1e-5,
            tie_embeddings: false,
            sliding_window: None,
            max_position: 131_072,
        }
    }

    /// Query heads per KV head.
    pub fn group_size(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}
