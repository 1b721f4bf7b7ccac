//! Folding the value/output rotations into the weights (Lemmas 1 and 2 of the paper for the
//! V–W_O pair): `W_V^g ← W_V^g R_g` for every KV head `g`, `W_O^h ← R_gᵀ W_O^h` for every query
//! head `h` of `g`. At full width the product `softmax(·) V W_O` is unchanged; a [`ZackCache`]
//! then keeps only each head's leading `k_vo` value coordinates and returns the attention output
//! zero-padded past them, so the truncated rows of `W_O` meet zeros: no decompression at run time.
//!
//! The dropped coordinates are not lost to zero but set to their calibration mean: attention
//! weights sum to 1, so a value coordinate held at its mean `μ'_j` contributes `μ'_j W_O'^h[j]`
//! whatever the weights are, a constant that goes into the output projection's bias.
//!
//! [`ZackCache`]: crate::cache::ZackCache

use burn::{
    module::Param,
    tensor::{backend::Backend, DType, Tensor, TensorData},
};
use burn_kvcompress::model::{fold_value_rotation, CausalLm};

use crate::rotation::{Pair, RotationGeometry, Rotations};
use crate::{Ranks, ZackError};

/// `model` with every layer's value/output rotations folded into `v_proj` (weights and bias) and
/// `o_proj` (weights, and a bias holding the mean of the value coordinates that `ranks` drop).
/// Queries and keys are untouched: with RoPE their rotation cannot be folded (it does not commute
/// with RoPE's position-dependent rotation) and runs after RoPE in the cache.
///
/// Weights in f16 or bf16 ([`CausalLm::with_weights_as`]) are folded in f32 and rounded back to
/// their type once.
pub fn fold_value_rotations<B: Backend>(
    mut model: CausalLm<B>,
    rotations: &Rotations,
    ranks: &Ranks,
) -> Result<CausalLm<B>, ZackError> {
    let g = RotationGeometry::of_model(model.config());
    if g != rotations.geometry {
        return Err(ZackError::GeometryMismatch { expected: g.to_string(), found: rotations.geometry.to_string() });
    }
    ranks.check(g)?;
    let (kv, d, group) = (g.kv_heads, g.head_dim, g.group());
    for (layer, decoder) in model.layers.iter_mut().enumerate() {
        let attention = &mut decoder.attention;
        let device = attention.v_proj.weight.device();
        let basis: Vec<f32> = (0..kv).flat_map(|h| rotations.head(Pair::ValueOutput, layer, h).basis.clone()).collect();
        // [kv, d, d]: R_g for each KV head.
        let r = Tensor::<B, 3>::from_data(TensorData::new(basis, [kv, d, d]), &device);

        let folded = fold_value_rotation(attention, r);
        let dtype = attention.o_proj.weight.val().dtype();
        let out = folded.dims()[1];
        let dropped = dropped_mean(rotations, ranks, layer);
        if dropped.iter().any(|&x| x != 0.0) {
            // Per query head h of KV head g, the rotated mean μ_g R_g past rank k_g: [1, heads·d].
            let per_head: Vec<f32> = dropped.chunks_exact(d).flat_map(|m| m.repeat(group)).collect();
            let restored = Tensor::<B, 2>::from_data(TensorData::new(per_head, [1, kv * group * d]), &device)
                .matmul(folded)
                .reshape([out]);
            let bias = match attention.o_proj.bias.take() {
                Some(bias) => bias.val().cast(DType::F32) + restored,
                None => restored,
            };
            attention.o_proj.bias = Some(Param::from_tensor(bias.cast(dtype)));
        }
    }
    Ok(model)
}

/// Per KV head of `layer`, the rotated value mean `μ R` with its first `k_vo` coordinates zeroed:
/// `[kv_heads · head_dim]`.
fn dropped_mean(rotations: &Rotations, ranks: &Ranks, layer: usize) -> Vec<f32> {
    let d = rotations.geometry.head_dim;
    (0..rotations.geometry.kv_heads)
        .flat_map(|h| {
            let rotation = rotations.head(Pair::ValueOutput, layer, h);
            let rank = ranks.rank(Pair::ValueOutput, layer, h);
            (0..d).map(move |j| match j < rank {
                true => 0.0,
                false => {
                    (0..d).map(|c| f64::from(rotation.mean[c]) * f64::from(rotation.basis[c * d + j])).sum::<f64>()
                        as f32
                }
            })
        })
        .collect()
}
