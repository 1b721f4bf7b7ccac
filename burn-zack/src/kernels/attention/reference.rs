//! Attention on reduced, per-head dimensions, in plain tensor ops: the cache's implementation on
//! every backend without a kernel, and the reference kernels are tested against.

use burn::tensor::{backend::Backend, FloatDType, Tensor};
use burn_kvcompress::{
    cache::{attention_reference, check_attend_shapes, AttendOptions},
    error::CacheError,
};

use crate::layout::HeadLayout;

/// ZACK attention of full post-RoPE queries over reduced keys and values.
///
/// - `q`: `[batch, heads, q_len, head_dim]`, the queries of the last `q_len` slots;
/// - `basis`: `[head_dim, Σ k_qk]`, each KV head's truncated query/key rotation `R̃_g` in its
///   key columns;
/// - `keys`: `[batch, slots, Σ k_qk]`, `k R̃_g` per head; `values`: `[batch, slots, Σ k_vo]`,
///   the leading `k_vo` coordinates of the (already rotated) values per head; f32 or f16, as
///   the cache stores them (attention computes in f32);
/// - returns `[batch, heads, q_len, head_dim]`: per head `softmax(q̃ k̃ᵀ · scale) ṽ` in its
///   first `k_vo` coordinates, zeros after (the folded `W_O` ignores them).
///
/// The scale stays `options.scale` (`1/√head_dim` of the uncompressed head): the scores
/// approximate the uncompressed `q kᵀ`.
pub fn zack_attention_reference<B: Backend>(
    q: Tensor<B, 4>,
    basis: Tensor<B, 2>,
    keys: Tensor<B, 3>,
    values: Tensor<B, 3>,
    layout: &HeadLayout,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let [batch, slots, _] = keys.dims();
    let kv_heads = layout.kv_heads();
    let (_, heads, q_len, head_dim) =
        check_attend_shapes(q.dims(), [batch, kv_heads, slots, layout.head_dim], options)?;
    let group = heads / kv_heads;
    let (keys, values) = (keys.cast(FloatDType::F32), values.cast(FloatDType::F32));
    let mut per_head = Vec::with_capacity(kv_heads);
    for head in 0..kv_heads {
        let (kc, vc) = (layout.key_columns(head), layout.value_columns(head));
        let (k_rank, v_rank) = (kc.len(), vc.len());
        let r = basis.clone().narrow(1, kc.start, k_rank).reshape([1, 1, head_dim, k_rank]);
        let q_reduced = q.clone().narrow(1, head * group, group).matmul(r.expand([batch, group, head_dim, k_rank]));
        let k = keys.clone().narrow(2, kc.start, k_rank).reshape([batch, 1, slots, k_rank]);
        let v = values.clone().narrow(2, vc.start, v_rank).reshape([batch, 1, slots, v_rank]);
        let out = attention_reference(q_reduced, k, v, options)?;
        per_head.push(if v_rank < head_dim {
            Tensor::cat(vec![out, Tensor::zeros([batch, group, q_len, head_dim - v_rank], &q.device())], 3)
        } else {
            out
        });
    }
    Ok(Tensor::cat(per_head, 1))
}
