//! Learning HACK's rotations from their Hadamard start with Burn's autodiff, kept orthogonal.
//!
//! A random-sign Hadamard transform spreads every channel's energy evenly whatever the data; a
//! learned rotation can instead place the directions that the quantization harms least where the
//! codes are coarsest. Each KV head's query/key rotation and value rotation are trained on the
//! error of the layer's attention output through the output projection
//! ([`relative_output_error`]), computed as the cache computes it on the channel axes: keys
//! rotated after RoPE and quantized per channel over blocks of Π slots, values rotated (as the
//! folded `W_V` does) and quantized per slot in channel groups, the output rotated back (as the
//! folded `W_O` does). The rounding passes gradients straight through (`round(y)` counts as `y`
//! in the backward pass) while each block's min and scale stay differentiable, so a step lowers
//! the partitions' ranges where outliers widen them.
//!
//! Simplifications, all of which make the training harsher than the cache: the first `sinks`
//! slots stay in float as in the cache, but no recent window does (every full block after the
//! sinks is quantized, for every query row); ranges are min/max (no clipping); the 8-bit codes of
//! queries and attention weights are left out (on the tiny test model they move a layer's output by
//! 0.1–3.6 %, the 2-bit codes by 9–30 %).
//! Each matrix stays orthogonal through [`OrthogonalAdam`] steps.

use burn::tensor::{activation::softmax, backend::AutodiffBackend, backend::Backend, Tensor};
use burn_kvcompress::finetune::{
    causal_forbidden, loss_value, relative_output_error, run_finetune, FinetuneConfig, FinetuneData, FinetuneProgress,
    FinetuneReport, LayerBatch, Objective, OrthogonalAdam,
};

use crate::{
    cache::{value_group, HackSchemeError},
    rotation::{HackRotations, RotationRole, RotationShape},
    Axes, HackConfig,
};

/// `x` quantized to `levels + 1` levels over its last axis's min/max and dequantized, the
/// rounding passed straight through: `[.., group]` in, same shape out.
fn fake_quantize<B: Backend, const D: usize>(x: Tensor<B, D>, levels: f32) -> Tensor<B, D> {
    let min = x.clone().min_dim(D - 1);
    let scale = (x.clone().max_dim(D - 1) - min.clone()).div_scalar(levels).clamp_min(1e-8);
    let y = (x - min.clone()) / scale.clone();
    let rounded = y.clone().round().clamp(0.0, levels);
    let y = y.clone() + (rounded - y).detach();
    y * scale + min
}

/// Keys `[n, kv, tokens, d]` with the full blocks of Π slots after the first `sinks` quantized per
/// channel over each block (the rest in float), as the channel layout holds them.
fn quantize_keys<B: Backend>(keys: Tensor<B, 4>, config: &HackConfig) -> Tensor<B, 4> {
    let [n, kv, tokens, d] = keys.dims();
    let (sinks, pi) = (config.sinks.min(tokens), config.partition);
    let blocks = (tokens - sinks) / pi;
    if blocks == 0 {
        return keys;
    }
    let levels = ((1u32 << config.key_bits) - 1) as f32;
    let coded = keys.clone().narrow(2, sinks, blocks * pi).reshape([n, kv, blocks, pi, d]).swap_dims(3, 4);
    let coded = fake_quantize(coded, levels).swap_dims(3, 4).reshape([n, kv, blocks * pi, d]);
    join(keys, coded, sinks, blocks * pi)
}

/// Values `[n, kv, tokens, d]` with the same slots quantized per slot in channel groups.
fn quantize_values<B: Backend>(values: Tensor<B, 4>, config: &HackConfig) -> Tensor<B, 4> {
    let [n, kv, tokens, d] = values.dims();
    let (sinks, pi) = (config.sinks.min(tokens), config.partition);
    let blocks = (tokens - sinks) / pi;
    if blocks == 0 {
        return values;
    }
    let levels = ((1u32 << config.value_bits) - 1) as f32;
    let group = value_group(d, pi);
    let coded = values.clone().narrow(2, sinks, blocks * pi).reshape([n, kv, blocks * pi, d / group, group]);
    let coded = fake_quantize(coded, levels).reshape([n, kv, blocks * pi, d]);
    join(values, coded, sinks, blocks * pi)
}

/// `x` with slots `start .. start + len` replaced by `coded`.
fn join<B: Backend>(x: Tensor<B, 4>, coded: Tensor<B, 4>, start: usize, len: usize) -> Tensor<B, 4> {
    let tokens = x.dims()[2];
    let mut parts = vec![coded];
    if start > 0 {
        parts.insert(0, x.clone().narrow(2, 0, start));
    }
    if start + len < tokens {
        parts.push(x.narrow(2, start + len, tokens - start - len));
    }
    Tensor::cat(parts, 2)
}

/// `x: [n, kv, rows, d]` times each KV head's `r: [kv, d, d]`.
fn per_head<B: Backend>(x: Tensor<B, 4>, r: &Tensor<B, 3>) -> Tensor<B, 4> {
    let [n, kv, _, d] = x.dims();
    x.matmul(r.clone().reshape([1, kv, d, d]).expand([n, kv, d, d]))
}

/// The attention output of `batch`'s queries as a channel-layout HACK cache with rotations
/// `keys`, `values` (`[kv_heads, d, d]` each) and folded weights produces it, in the model's
/// coordinates (see the module documentation for what is simplified): `[windows, heads,
/// query_rows, head_dim]`, differentiable through the rotations.
pub fn hack_attention_output<B: Backend>(
    batch: &LayerBatch<B>,
    config: &HackConfig,
    keys: &Tensor<B, 3>,
    values: &Tensor<B, 3>,
) -> Tensor<B, 4> {
    let [n, heads, rows, d] = batch.queries.dims();
    let [_, kv, tokens, _] = batch.keys.dims();
    let group = heads / kv;
    let q = per_head(batch.queries.clone().reshape([n, kv, group * rows, d]), keys);
    let k = quantize_keys(per_head(batch.keys.clone(), keys), config);
    let v = quantize_values(per_head(batch.values.clone(), values), config);
    let forbidden = causal_forbidden::<B>(rows, tokens, &q.device())
        .reshape([1, 1, rows, tokens])
        .repeat_dim(2, group)
        .expand([n, kv, group * rows, tokens]);
    let scores = q.matmul(k.swap_dims(2, 3)) / (d as f64).sqrt();
    let probs = softmax(scores.mask_fill(forbidden, f32::NEG_INFINITY), 3);
    let out = per_head(probs.matmul(v), &values.clone().swap_dims(1, 2));
    out.reshape([n, heads, rows, d])
}

/// The objective [`run_finetune`] drives: every (layer, KV head, role) rotation with its optimizer.
struct HackObjective<'a, B: Backend> {
    rotations: HackRotations,
    config: &'a HackConfig,
    /// `[layer][role]`, one optimizer per KV head's matrix.
    optimizers: Vec<[Vec<OrthogonalAdam>; 2]>,
    data: &'a FinetuneData,
    eval_batch: usize,
    device: B::Device,
}

impl<B: Backend> HackObjective<'_, B> {
    /// Layer `layer`'s rotations as tensors (`require_grad` to train them).
    fn matrices(&self, layer: usize, require_grad: bool) -> [Tensor<B, 3>; 2] {
        [RotationRole::Key, RotationRole::Value].map(|role| {
            let r = self.rotations.tensor::<B>(role, layer, &self.device);
            if require_grad {
                r.require_grad()
            } else {
                r
            }
        })
    }

    fn layer_loss(&self, layer: usize, batch: &LayerBatch<B>, [keys, values]: &[Tensor<B, 3>; 2]) -> Tensor<B, 1> {
        let approx = hack_attention_output(batch, self.config, keys, values);
        relative_output_error(approx, batch.outputs.clone(), self.data.projections.layer(layer, &self.device))
    }
}

impl<B: AutodiffBackend> Objective for HackObjective<'_, B> {
    type Error = HackSchemeError;
    type Parameters = HackRotations;

    fn step(&mut self, windows: &[usize], learning_rate: f64) -> Result<f64, HackSchemeError> {
        let layers = self.rotations.shape.layers;
        let d = self.rotations.shape.head_dim;
        let mut total = 0.0;
        for layer in 0..layers {
            let batch = self.data.train.batch::<B>(layer, windows, &self.device);
            let matrices = self.matrices(layer, true);
            let loss = self.layer_loss(layer, &batch, &matrices);
            let grads = loss.backward();
            total += loss_value(loss);
            for (role, matrix) in matrices.into_iter().enumerate() {
                let Some(grad) = matrix.grad(&grads) else { continue };
                let grad: Vec<f32> = grad.into_data().convert::<f32>().into_vec().expect("f32 data");
                let stored = match role {
                    0 => &mut self.rotations.keys[layer],
                    _ => &mut self.rotations.values[layer],
                };
                let heads = stored.chunks_exact_mut(d * d).zip(grad.chunks_exact(d * d));
                for ((r, g), optimizer) in heads.zip(&mut self.optimizers[layer][role]) {
                    optimizer.step(r, g, learning_rate);
                }
            }
        }
        Ok(total / layers as f64)
    }

    fn held_out_loss(&mut self) -> Result<f64, HackSchemeError> {
        let loss =
            |layer, batch: &LayerBatch<B>| loss_value(self.layer_loss(layer, batch, &self.matrices(layer, false)));
        Ok(self.data.held_out.mean_loss(self.eval_batch, &self.device, loss))
    }

    fn parameters(&self) -> &HackRotations {
        &self.rotations
    }

    fn set_parameters(&mut self, rotations: HackRotations) {
        self.rotations = rotations;
    }
}

/// Fine-tunes `start` for the channel-axes format `config` on `data`'s training windows
/// (held-out windows for early stopping) on the autodiff backend `B`, keeping every matrix
/// orthogonal. Returns the rotations with the best held-out loss (the start if no step improved
/// it) and the run's report.
pub fn finetune_hack_rotations<B: AutodiffBackend>(
    start: &HackRotations,
    config: &HackConfig,
    data: &FinetuneData,
    finetune: &FinetuneConfig,
    device: &B::Device,
    on_progress: &mut dyn FnMut(FinetuneProgress),
) -> Result<(HackRotations, FinetuneReport), HackSchemeError> {
    let samples = RotationShape::from(data.check()?);
    if samples != start.shape {
        return Err(HackSchemeError::Shape { expected: start.shape.to_string(), found: samples.to_string() });
    }
    if config.axes != Axes::Channel {
        return Err(HackSchemeError::Finetune(format!("{config}: rotations are trained for axes=channel")));
    }
    let heads = || (0..start.shape.kv_heads).map(|_| OrthogonalAdam::new(start.shape.head_dim)).collect();
    let mut objective = HackObjective::<B> {
        rotations: start.clone(),
        config,
        optimizers: (0..start.shape.layers).map(|_| [heads(), heads()]).collect(),
        data,
        eval_batch: finetune.windows_per_step.max(1),
        device: device.clone(),
    };
    let report = run_finetune(&mut objective, data.train.len(), finetune, on_progress)?;
    Ok((objective.rotations, report))
}
