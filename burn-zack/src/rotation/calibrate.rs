//! From accumulated Gram matrices (and the model's output projection) to rotations.

use burn::tensor::backend::Backend;
use burn_kvcompress::{fingerprint::ModelFingerprint, model::CausalLm};

use super::{
    gram::Activation, BlockWeighting, Centering, GramAccumulator, HeadRotation, RotationConfig, RotationGeometry,
    Rotations, ValueSamples,
};
use crate::{linalg::symmetric_eigen, ZackError};

/// Rotations from calibration sums: for every layer and KV head `g` with query heads `h ∈ g`,
///
/// - query/key: right singular vectors of `[Q_g; K_g]`, the post-RoPE queries of all heads of
///   the group stacked over the keys (one rotation shared by the group, so the cache stays
///   GQA-sized);
/// - value/output: right singular vectors of `[V_g; W_O^hᵀ for h ∈ g]`, where `W_O^h` is head
///   `h`'s `head_dim × hidden` block of the output projection's rows, and `V_g` the values or
///   the attention outputs of the group's heads (`config.value_samples`).
///
/// Keys and values are centered as `config.centering` says (see [`Centering`]); each block is
/// weighted as `config.weighting` says; the SVD is the eigendecomposition of the weighted
/// Gram matrix (`σ_j = √λ_j`). `model` supplies `W_O` and must match the accumulator's geometry.
pub fn calibrate_rotations<B: Backend>(
    grams: &GramAccumulator,
    model: &CausalLm<B>,
    config: RotationConfig,
    fingerprint: ModelFingerprint,
    calibration: String,
) -> Result<Rotations, ZackError> {
    let g = grams.geometry();
    let model_geometry = RotationGeometry::of_model(model.config());
    if model_geometry != g {
        return Err(ZackError::GeometryMismatch { expected: model_geometry.to_string(), found: g.to_string() });
    }
    if grams.tokens() == 0 {
        return Err(ZackError::Calibration("no calibration tokens were accumulated".into()));
    }
    let d = g.head_dim;
    let mut query_key = Vec::with_capacity(g.layers);
    let mut value_output = Vec::with_capacity(g.layers);
    for (layer, decoder) in model.layers.iter().enumerate() {
        let w_o: Vec<f32> =
            decoder.attention.o_proj.weight.val().into_data().convert::<f32>().into_vec().expect("f32 weights");
        let hidden = w_o.len() / (g.heads * d);
        let (mut qk, mut vo) = (Vec::with_capacity(g.kv_heads), Vec::with_capacity(g.kv_heads));
        for kv_head in 0..g.kv_heads {
            let queries = grams.moments(Activation::Queries, layer, kv_head);
            let keys = grams.moments(Activation::Keys, layer, kv_head);
            let key_gram = match config.centering {
                Centering::KeysAndValues => keys.centered_gram(),
                Centering::None | Centering::Values => keys.gram.clone(),
            };
            let qk_gram = weighted_sum(config.weighting, &queries.gram, &key_gram, d);
            qk.push(rotation_of(&qk_gram, keys.mean(), d));
            let heads = kv_head * g.group()..(kv_head + 1) * g.group();
            let output = output_gram(&w_o, heads, d, hidden);
            let values = match config.value_samples {
                ValueSamples::Values => grams.moments(Activation::Values, layer, kv_head),
                ValueSamples::Outputs => grams.moments(Activation::Outputs, layer, kv_head),
            };
            let value_gram = match config.centering {
                Centering::None => values.gram.clone(),
                Centering::Values | Centering::KeysAndValues => values.centered_gram(),
            };
            vo.push(rotation_of(&weighted_sum(config.weighting, &value_gram, &output, d), values.mean(), d));
        }
        query_key.push(qk);
        value_output.push(vo);
    }
    Ok(Rotations { geometry: g, model: fingerprint, config, calibration, query_key, value_output })
}

/// `Σ_{h ∈ heads} W_O^h W_O^hᵀ` (upper triangle), with `w_o` the `[heads·d, hidden]` weight.
fn output_gram(w_o: &[f32], heads: std::ops::Range<usize>, d: usize, hidden: usize) -> Vec<f64> {
    let mut gram = vec![0.0; d * d];
    for head in heads {
        let rows = &w_o[head * d * hidden..(head + 1) * d * hidden];
        for i in 0..d {
            for j in i..d {
                let (a, b) = (&rows[i * hidden..(i + 1) * hidden], &rows[j * hidden..(j + 1) * hidden]);
                gram[i * d + j] += a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum::<f64>();
            }
        }
    }
    gram
}

/// The weighted Gram of the stacked blocks `[A; B]`: `f_A AᵀA + f_B BᵀB` (upper triangles).
fn weighted_sum(weighting: BlockWeighting, a: &[f64], b: &[f64], d: usize) -> Vec<f64> {
    let trace = |m: &[f64]| (0..d).map(|i| m[i * d + i]).sum::<f64>();
    let (fa, fb) = (weighting.gram_factor(trace(a)), weighting.gram_factor(trace(b)));
    a.iter().zip(b).map(|(&x, &y)| fa * x + fb * y).collect()
}

/// Basis and singular values from a Gram matrix, with the pair's mean.
fn rotation_of(gram: &[f64], mean: Vec<f64>, d: usize) -> HeadRotation {
    let eigen = symmetric_eigen(gram, d);
    HeadRotation {
        basis: eigen.vectors.iter().map(|&x| x as f32).collect(),
        singular_values: eigen.values.iter().map(|&l| l.max(0.0).sqrt() as f32).collect(),
        mean: mean.into_iter().map(|x| x as f32).collect(),
    }
}
