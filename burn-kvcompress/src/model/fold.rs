//! Folding a per-KV-head orthogonal rotation of the values into the weights: `W_V^g ← W_V^g R_g`
//! for every KV head `g`, `W_O^h ← R_gᵀ W_O^h` for every query head `h` of `g`. Attention weights
//! act on tokens, not channels, so `softmax(·) (V R) Rᵀ W_O = softmax(·) V W_O`: a cache then holds
//! rotated values at no cost at run time (ZACK truncates them, HACK quantizes them).

use burn::{
    module::Param,
    tensor::{backend::Backend, DType, Tensor},
};

use super::SelfAttention;

/// Folds `r: [kv_heads, head_dim, head_dim]` (one orthogonal matrix per KV head, f32) into
/// `attention`'s `v_proj` (weights and bias) and `o_proj` (weights). Weights in f16 or bf16 are
/// folded in f32 and rounded back to their type once. Returns the folded `W_O` in f32, `[heads ·
/// head_dim, hidden]`, before that rounding (a caller deriving a bias from it, as ZACK does for
/// the values it drops, rounds once too).
pub fn fold_value_rotation<B: Backend>(attention: &mut SelfAttention<B>, r: Tensor<B, 3>) -> Tensor<B, 2> {
    let (kv, d) = (attention.num_kv_heads, attention.head_dim);
    let group = attention.num_heads / kv;
    assert_eq!(r.dims(), [kv, d, d], "one head_dim × head_dim rotation per KV head");
    let dtype = attention.v_proj.weight.val().dtype();
    let w_v = attention.v_proj.weight.val().cast(DType::F32);
    let hidden = w_v.dims()[0];
    // [hidden, kv·d] -> [kv, hidden, d] · R_g -> back.
    let folded =
        w_v.reshape([hidden, kv, d]).swap_dims(0, 1).matmul(r.clone()).swap_dims(0, 1).reshape([hidden, kv * d]);
    attention.v_proj.weight = Param::from_tensor(folded.cast(dtype));
    if let Some(bias) = attention.v_proj.bias.take() {
        let folded = bias.val().cast(DType::F32).reshape([kv, 1, d]).matmul(r.clone()).reshape([kv * d]);
        attention.v_proj.bias = Some(Param::from_tensor(folded.cast(dtype)));
    }
    let w_o = attention.o_proj.weight.val().cast(DType::F32);
    let out = w_o.dims()[1];
    // Rows of head h = g·group + j: [kv, group, d, out]; R_gᵀ · W_O^h.
    let r_t = r.swap_dims(1, 2).reshape([kv, 1, d, d]).expand([kv, group, d, d]);
    let folded = r_t.matmul(w_o.reshape([kv, group, d, out])).reshape([kv * group * d, out]);
    attention.o_proj.weight = Param::from_tensor(folded.clone().cast(dtype));
    folded
}
