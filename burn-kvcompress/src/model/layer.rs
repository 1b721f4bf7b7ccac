//! One decoder layer: RMSNorm, GQA self-attention through a KV cache, RMSNorm, SwiGLU.

use burn::{
    module::Module,
    nn::{Linear, RmsNorm},
    tensor::{backend::Backend, Int, Tensor},
};

use super::{ModelOps, Residual, RotaryEmbedding};
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
    /// How the weights and the rotary embedding are applied.
    #[module(skip)]
    pub ops: ModelOps,
}

impl<B: Backend> SelfAttention<B> {
    /// `x`: `[batch * seq, hidden]` (batch-major) at RoPE `positions` (`[batch * seq]`, the same
    /// order, each `< rope.max_position()`); appends the new keys/values to `cache` and returns
    /// the attention output `[batch * seq, hidden]`. Projections run on 2-D tensors (a 3-D input
    /// makes ndarray run one product per sequence, 4x slower when decoding), the query, key and
    /// value projections together ([`ModelOps::project_all`]: one launch on the CubeCL backends).
    /// `x` and the output are in the weights' float type; queries are f32 from RoPE on, keys and
    /// values go to the cache in its [`input_dtype`](KvCache::input_dtype), and where the cache
    /// rotates queries and keys ([`KvCache::key_rotation`]) the rotation runs in RoPE's launch.
    pub fn forward<C: KvCache<B>>(
        &self,
        x: Tensor<B, 2>,
        rope: &RotaryEmbedding<B>,
        positions: &Tensor<B, 1, Int>,
        cache: &mut C,
        options: &AttendOptions,
    ) -> Result<Tensor<B, 2>, CacheError> {
        let batch = options.key_start.len();
        let seq = x.dims()[0] / batch;
        let dtype = x.dtype();
        let [q, k, v] = self.ops.project_all([&self.q_proj, &self.k_proj, &self.v_proj], x);
        let input = cache.input_dtype();
        let rotation = cache.key_rotation();
        let heads = [batch, self.num_heads, self.num_kv_heads];
        let [q, k] = self.ops.rotary_qk(rope, [q, k], heads, positions, rotation.as_ref(), input);
        let v = v.reshape([batch, seq, self.num_kv_heads, self.head_dim]).swap_dims(1, 2);
        cache.append_rotated(k, v.cast(input))?;
        let out = cache.attend_rotated(q, options)?;
        let rows = [batch * seq, self.num_heads * self.head_dim];
        // A decode step's `[batch, heads, 1, head_dim]` lies as `[batch, 1, heads, head_dim]`
        // does: reshaped as it is, where the swapped view would be copied first.
        let out = match seq {
            1 => out.reshape(rows),
            _ => out.swap_dims(1, 2).reshape(rows),
        };
        let out = out.cast(dtype);
        Ok(self.ops.project(&self.o_proj, out))
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
    pub ops: ModelOps,
}

impl<B: Backend> FeedForward<B> {
    /// `[rows, hidden]` to `[rows, hidden]`.
    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let [gate, up] = self.ops.project_all([&self.gate_proj, &self.up_proj], x);
        self.ops.project(&self.down_proj, self.ops.swiglu(gate, up))
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
    /// How the norms are applied.
    #[module(skip)]
    pub ops: ModelOps,
}

impl<B: Backend> DecoderLayer<B> {
    /// The residual stream `[batch * seq, hidden]` through the layer at RoPE `positions` (`[batch
    /// * seq]`), appending to `cache`. The stream comes and goes with its last addition pending
    /// ([`Residual`]): each addition runs with the norm after it.
    pub fn forward<C: KvCache<B>>(
        &self,
        x: Residual<B>,
        rope: &RotaryEmbedding<B>,
        positions: &Tensor<B, 1, Int>,
        cache: &mut C,
        options: &AttendOptions,
    ) -> Result<Residual<B>, CacheError> {
        let [x, normed] = x.normed(&self.ops, &self.attn_norm);
        let attention = self.attention.forward(normed, rope, positions, cache, options)?;
        let [x, normed] = Residual::pending(x, attention).normed(&self.ops, &self.mlp_norm);
        Ok(Residual::pending(x, self.mlp.forward(normed)))
    }
}
