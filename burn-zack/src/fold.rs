//! Folding the value/output rotations into the weights (Lemmas 1 and 2 of the paper for the
//! V–W_O pair): `W_V^g ← W_V^g R_g` for every KV head `g`, `W_O^h ← R_gᵀ W_O^h` for every query
//! head `h` of `g`. At full width the product `softmax(·) V W_O` is unchanged; a [`ZackCache`]
//! then keeps only each head's leading `k_vo` value coordinates and returns the attention output
//! zero-padded past them, so the truncated rows of `W_O` meet zeros: no decompression at run time.
//!
//! [`ZackCache`]: crate::cache::ZackCache

use burn::{
    module::Param,
    tensor::{backend::Backend, Tensor, TensorData},
};
use burn_kvcompress::model::CausalLm;

use crate::rotation::{Pair, RotationGeometry, Rotations};
use crate::ZackError;

/// `model` with every layer's value/output rotations folded into `v_proj` (weights and bias) and
/// `o_proj` (weights). Queries and keys are untouched: with RoPE their rotation cannot be folded
/// (it does not commute with RoPE's position-dependent rotation) and runs after RoPE in the cache.
pub fn fold_value_rotations<B: Backend>(
    mut model: CausalLm<B>,
    rotations: &Rotations,
) -> Result<CausalLm<B>, ZackError> {
    let g = RotationGeometry::of_model(model.config());
    if g != rotations.geometry {
        return Err(ZackError::GeometryMismatch { expected: g.to_string(), found: rotations.geometry.to_string() });
    }
    let (kv, d, group) = (g.kv_heads, g.head_dim, g.group());
    for (layer, decoder) in model.layers.iter_mut().enumerate() {
        let attention = &mut decoder.attention;
        let device = attention.v_proj.weight.device();
        let basis: Vec<f32> = (0..kv).flat_map(|h| rotations.head(Pair::ValueOutput, layer, h).basis.clone()).collect();
        // [kv, d, d]: R_g for each KV head.
        let r = Tensor::<B, 3>::from_data(TensorData::new(basis, [kv, d, d]), &device);

        let w_v = attention.v_proj.weight.val();
        let hidden = w_v.dims()[0];
        // [hidden, kv·d] -> [kv, hidden, d] · R_g -> back.
        let folded =
            w_v.reshape([hidden, kv, d]).swap_dims(0, 1).matmul(r.clone()).swap_dims(0, 1).reshape([hidden, kv * d]);
        attention.v_proj.weight = Param::from_tensor(folded);
        if let Some(bias) = attention.v_proj.bias.take() {
            let folded = bias.val().reshape([kv, 1, d]).matmul(r.clone()).reshape([kv * d]);
            attention.v_proj.bias = Some(Param::from_tensor(folded));
        }

        let w_o = attention.o_proj.weight.val();
        let out = w_o.dims()[1];
        // Rows of head h = g·group + j: [kv, group, d, out]; R_gᵀ · W_O^h.
        let r_t = r.swap_dims(1, 2).reshape([kv, 1, d, d]).expand([kv, group, d, d]);
        let folded = r_t.matmul(w_o.reshape([kv, group, d, out])).reshape([kv * group * d, out]);
        attention.o_proj.weight = Param::from_tensor(folded);
    }
    Ok(model)
}
