//! Post-RoPE keys and folded values reduced to each KV head's kept coordinates, heads packed side
//! by side as [`HeadLayout`] says: what every ZACK cache stores, whatever form it then keeps.

use burn::tensor::{backend::Backend, Tensor};

use super::HeadLayout;

/// `k`: `[batch, kv_heads, new, head_dim]` times each head's truncated query/key basis (`basis`:
/// `[head_dim, Σ k_qk]`), to `[batch, new, Σ k_qk]`.
pub fn reduce_keys<B: Backend>(k: Tensor<B, 4>, basis: &Tensor<B, 2>, layout: &HeadLayout) -> Tensor<B, 3> {
    let [batch, _, new, d] = k.dims();
    let heads = (0..layout.kv_heads()).map(|h| {
        let columns = layout.key_columns(h);
        let r = basis.clone().narrow(1, columns.start, columns.len()).reshape([1, d, columns.len()]);
        k.clone().narrow(1, h, 1).reshape([batch, new, d]).matmul(r.expand([batch, d, columns.len()]))
    });
    Tensor::cat(heads.collect(), 2)
}

/// `v` (rotated by the folded `W_V`): `[batch, kv_heads, new, head_dim]` to each head's leading
/// `k_vo` coordinates, `[batch, new, Σ k_vo]`.
pub fn reduce_values<B: Backend>(v: Tensor<B, 4>, layout: &HeadLayout) -> Tensor<B, 3> {
    let [batch, _, new, d] = v.dims();
    let heads = (0..layout.kv_heads())
        .map(|h| v.clone().narrow(1, h, 1).reshape([batch, new, d]).narrow(2, 0, layout.vo_ranks[h]));
    Tensor::cat(heads.collect(), 2)
}
