//! One decoder layer: RMSNorm, GQA self-attention through a KV cache, RMSNorm, SwiGLU.

use burn::{
    module::Module,
    nn::{Linear, RmsNorm},
    tensor::{activation::silu, backend::Backend, DType, Tensor},
};

use super::{Projection, RotaryEmbedding};
use crate::cache::{AttendOptions, KvCache};
use crate::error::CacheError;

/// Self-attention projections. Weights are `[d_in, d_out]` (Burn's `Linear` layout).
#[derive(Module, Debug)]
pub struct SelfAttention<B: Backend> {
    /// `[hidden, heads * head_dim]`.
    pub q_proj: Linear<B>,
    /// `[hidden, kv_heads * head_dim]`.
    pub k_proj: Linear<B>,
    /// `[hidden, kv_heads * head_dim]`.
    pub v_proj: Linear<B>,
    /// `[heads * head_dim, hidden]`.
    pub o_proj: Linear<B>,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// How the weights are applied.
    #[module(skip)]
    pub projection: Projection,
}

impl<B: Backend> SelfAttention<B> {
    /// `x`: `[batch * seq, hidden]` (batch-major) at RoPE `positions` (`[batch, seq]`,
    /// row-major); appends the new keys/values to `cache` and returns the attention output
    /// `[batch * seq, hidden]`. Projections run on 2-D tensors: one matrix product per weight
    /// (a 3-D input makes ndarray run one product per sequence, 4x slower when decoding).
    /// `x` and the output are in the weights' float type; queries, keys and values are cast to
    /// f32 for RoPE and the cache.
    pub fn forward<C: KvCache<B>>(
        &self,
        x: Tensor<B, 2>,
        rope: &RotaryEmbedding<B>,
        positions: &[usize],
        cache: &mut C,
        options: &AttendOptions,
    ) -> Result<Tensor<B, 2>, CacheError> {
        let batch = options.key_start.len();
        let seq = x.dims()[0] / batch;
        let dtype = x.dtype();
        let split = |t: Tensor<B, 2>, heads: usize| {
            t.cast(DType::F32).reshape([batch, seq, heads, self.head_dim]).swap_dims(1, 2)
        };
        let project = |linear: &Linear<B>, x: Tensor<B, 2>| self.projection.apply(linear, x);
        let q = split(project(&self.q_proj, x.clone()), self.num_heads);
        let k = split(project(&self.k_proj, x.clone()), self.num_kv_heads);
        let v = split(project(&self.v_proj, x), self.num_kv_heads);
        let q = rope.apply(q, positions);
        let k = rope.apply(k, positions);
        cache.append(k, v)?;
        let out = cache.attend(q, options)?;
        let out = out.swap_dims(1, 2).reshape([batch * seq, self.num_heads * self.head_dim]).cast(dtype);
        Ok(project(&self.o_proj, out))
    }
}

/// SwiGLU feed-forward: `down(silu(gate(x)) * up(x))`.
#[derive(Module, Debug)]
pub struct FeedForward<B: Backend> {
    /// `[hidden, intermediate]`.
    pub gate_proj: Linear<B>,
    /// `[hidden, intermediate]`.
    pub up_proj: Linear<B>,
    /// `[intermediate, hidden]`.
    pub down_proj: Linear<B>,
    /// How the weights are applied.
    #[module(skip)]
    pub projection: Projection,
}

impl<B: Backend> FeedForward<B> {
    /// `[rows, hidden]` to `[rows, hidden]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let project = |linear: &Linear<B>, x: Tensor<B, 2>| self.projection.apply(linear, x);
        let gate = silu(project(&self.gate_proj, x.clone()));
        project(&self.down_proj, gate * project(&self.up_proj, x))
    }
}

/// A pre-norm decoder layer.
#[derive(Module, Debug)]
pub struct DecoderLayer<B: Backend> {
    /// Norm before attention.
    pub attn_norm: RmsNorm<B>,
    /// Self-attention.
    pub attention: SelfAttention<B>,
    /// Norm before the feed-forward layer.
    pub mlp_norm: RmsNorm<B>,
    /// Feed-forward layer.
    pub mlp: FeedForward<B>,
}

impl<B: Backend> DecoderLayer<B> {
    /// `x`: `[batch * seq, hidden]` to `[batch * seq, hidden]`, appending to `cache`.
    pub fn forward<C: KvCache<B>>(
        &self,
        x: Tensor<B, 2>,
        rope: &RotaryEmbedding<B>,
        positions: &[usize],
        cache: &mut C,
        options: &AttendOptions,
    ) -> Result<Tensor<B, 2>, CacheError> {
        let attn = self.attention.forward(self.attn_norm.forward(x.clone()), rope, positions, cache, options)?;
        let x = x + attn;
        Ok(x.clone() + self.mlp.forward(self.mlp_norm.forward(x)))
    }
}
