//! The ZACK fine-tuning objective and [`finetune_rotations`].

use crate::{
    rotation::{Pair, RotationGeometry, Rotations},
    Ranks, ZackError,
};
use burn::tensor::{activation::softmax, backend::AutodiffBackend, backend::Backend, Tensor, TensorData};
use burn_kvcompress::finetune::{
    causal_forbidden, loss_value, relative_output_error, run_finetune, FinetuneConfig, FinetuneData, FinetuneProgress,
    FinetuneReport, LayerBatch, Objective, OrthogonalAdam,
};

/// One KV head's two bases and what truncation keeps of them.
pub struct HeadBases<B: Backend> {
    /// `[head_dim, head_dim]`: the query/key basis (columns are directions).
    pub query_key: Tensor<B, 2>,
    /// `[head_dim, head_dim]`: the value/output basis.
    pub value_output: Tensor<B, 2>,
    /// Kept query/key directions.
    pub qk_rank: usize,
    /// Kept value directions.
    pub vo_rank: usize,
    /// `[head_dim]`: the calibration mean the dropped value coordinates are held at.
    pub value_mean: Tensor<B, 1>,
}

/// The attention output of `batch`'s queries as a ZACK cache with folded weights produces it,
/// per KV head `g` with bases `heads[g]`: `softmax((q R̃)(k R̃)ᵀ / √d + causal) (v R̃ᵥ) R̃ᵥᵀ +
/// μ (I − R̃ᵥ R̃ᵥᵀ)`, where `R̃` holds a basis' first `rank` columns. Returns `[windows, heads,
/// query_rows, head_dim]` in the original coordinates, differentiable through the bases.
pub fn zack_attention_output<B: Backend>(batch: &LayerBatch<B>, heads: &[HeadBases<B>]) -> Tensor<B, 4> {
    let [n, query_heads, rows, d] = batch.queries.dims();
    let [_, kv_heads, tokens, _] = batch.keys.dims();
    let group = query_heads / kv_heads;
    let device = batch.queries.device();
    let forbidden = causal_forbidden::<B>(rows, tokens, &device)
        .reshape([1, rows, tokens])
        .repeat_dim(1, group)
        .expand([n, group * rows, tokens]);
    let truncated = |basis: &Tensor<B, 2>, rank: usize| basis.clone().narrow(1, 0, rank);
    let batched = |m: Tensor<B, 2>| {
        let [a, b] = m.dims();
        m.reshape([1, a, b]).expand([n, a, b])
    };
    let outputs = heads.iter().enumerate().map(|(g, head)| {
        let q = batch.queries.clone().narrow(1, g * group, group).reshape([n, group * rows, d]);
        let k = batch.keys.clone().narrow(1, g, 1).reshape([n, tokens, d]);
        let v = batch.values.clone().narrow(1, g, 1).reshape([n, tokens, d]);
        let r_qk = batched(truncated(&head.query_key, head.qk_rank));
        let scores = q.matmul(r_qk.clone()).matmul(k.matmul(r_qk).swap_dims(1, 2)) / (d as f64).sqrt();
        let probs = softmax(scores.mask_fill(forbidden.clone(), f32::NEG_INFINITY), 2);
        let r_vo = truncated(&head.value_output, head.vo_rank);
        let mean = head.value_mean.clone().reshape([1, d]);
        let dropped_mean = mean.clone() - mean.matmul(r_vo.clone()).matmul(r_vo.clone().transpose());
        let r_vo = batched(r_vo);
        let kept = probs.matmul(v.matmul(r_vo.clone())).matmul(r_vo.swap_dims(1, 2));
        (kept + dropped_mean.reshape([1, 1, d])).reshape([n, group, rows, d])
    });
    Tensor::cat(outputs.collect(), 1)
}

/// The objective [`run_finetune`] drives: every (layer, KV head, pair) basis with its optimizer.
struct ZackObjective<'a, B: Backend> {
    rotations: Rotations,
    ranks: &'a Ranks,
    /// `[layer][kv_head][pair]`.
    optimizers: Vec<Vec<[OrthogonalAdam; 2]>>,
    data: &'a FinetuneData,
    eval_batch: usize,
    device: B::Device,
}

impl<B: Backend> ZackObjective<'_, B> {
    fn matrix(&self, values: &[f32]) -> Tensor<B, 2> {
        let d = self.rotations.geometry.head_dim;
        Tensor::from_data(TensorData::new(values.to_vec(), [d, d]), &self.device)
    }

    /// Layer `layer`'s bases as tensors (`require_grad` to train them).
    fn bases(&self, layer: usize, require_grad: bool) -> Vec<HeadBases<B>> {
        let d = self.rotations.geometry.head_dim;
        (0..self.rotations.geometry.kv_heads)
            .map(|h| {
                let [query_key, value_output] = Pair::ALL.map(|pair| {
                    let basis = self.matrix(&self.rotations.head(pair, layer, h).basis);
                    if require_grad {
                        basis.require_grad()
                    } else {
                        basis
                    }
                });
                let mean = self.rotations.head(Pair::ValueOutput, layer, h).mean.clone();
                HeadBases {
                    query_key,
                    value_output,
                    qk_rank: self.ranks.rank(Pair::QueryKey, layer, h),
                    vo_rank: self.ranks.rank(Pair::ValueOutput, layer, h),
                    value_mean: Tensor::from_data(TensorData::new(mean, [d]), &self.device),
                }
            })
            .collect()
    }

    fn layer_loss(&self, layer: usize, batch: &LayerBatch<B>, bases: &[HeadBases<B>]) -> Tensor<B, 1> {
        let approx = zack_attention_output(batch, bases);
        relative_output_error(approx, batch.outputs.clone(), self.data.projections.layer(layer, &self.device))
    }
}

impl<B: AutodiffBackend> Objective for ZackObjective<'_, B> {
    type Error = ZackError;
    type Parameters = Rotations;

    fn step(&mut self, windows: &[usize], learning_rate: f64) -> Result<f64, ZackError> {
        let layers = self.rotations.geometry.layers;
        let mut total = 0.0;
        for layer in 0..layers {
            let batch = self.data.train.batch::<B>(layer, windows, &self.device);
            let bases = self.bases(layer, true);
            let loss = self.layer_loss(layer, &batch, &bases);
            let grads = loss.backward();
            total += loss_value(loss);
            for (h, head) in bases.into_iter().enumerate() {
                for (p, (pair, basis)) in Pair::ALL.into_iter().zip([head.query_key, head.value_output]).enumerate() {
                    let Some(grad) = basis.grad(&grads) else { continue };
                    let grad: Vec<f32> = grad.into_data().convert::<f32>().into_vec().expect("f32 data");
                    let rotation = match pair {
                        Pair::QueryKey => &mut self.rotations.query_key[layer][h],
                        Pair::ValueOutput => &mut self.rotations.value_output[layer][h],
                    };
                    self.optimizers[layer][h][p].step(&mut rotation.basis, &grad, learning_rate);
                }
            }
        }
        Ok(total / layers as f64)
    }

    fn held_out_loss(&mut self) -> Result<f64, ZackError> {
        let loss = |layer, batch: &LayerBatch<B>| loss_value(self.layer_loss(layer, batch, &self.bases(layer, false)));
        Ok(self.data.held_out.mean_loss(self.eval_batch, &self.device, loss))
    }

    fn parameters(&self) -> &Rotations {
        &self.rotations
    }

    fn set_parameters(&mut self, rotations: Rotations) {
        self.rotations = rotations;
    }
}

/// Fine-tunes `rotations` at `ranks` on `data`'s training windows (held-out windows for early
/// stopping), on the autodiff backend `B`, keeping every basis orthogonal. Returns the rotations
/// with the best held-out loss (the starting point if no step improved it; singular values and
/// means unchanged) and the run's report; their calibration text says they were fine-tuned.
pub fn finetune_rotations<B: AutodiffBackend>(
    rotations: &Rotations,
    ranks: &Ranks,
    data: &FinetuneData,
    config: &FinetuneConfig,
    device: &B::Device,
    on_progress: &mut dyn FnMut(FinetuneProgress),
) -> Result<(Rotations, FinetuneReport), ZackError> {
    let shape = data.check()?;
    let g = rotations.geometry;
    let samples = RotationGeometry {
        layers: shape.layers,
        heads: shape.heads,
        kv_heads: shape.kv_heads,
        head_dim: shape.head_dim,
    };
    if samples != g {
        return Err(ZackError::GeometryMismatch { expected: g.to_string(), found: samples.to_string() });
    }
    ranks.check(g)?;
    let mut objective = ZackObjective::<B> {
        rotations: rotations.clone(),
        ranks,
        optimizers: (0..g.layers)
            .map(|_| {
                (0..g.kv_heads).map(|_| [OrthogonalAdam::new(g.head_dim), OrthogonalAdam::new(g.head_dim)]).collect()
            })
            .collect(),
        data,
        eval_batch: config.windows_per_step.max(1),
        device: device.clone(),
    };
    let report = run_finetune(&mut objective, data.train.len(), config, on_progress)?;
    let mut tuned = objective.rotations;
    let digest: String = ranks.digest()[..4].iter().map(|b| format!("{b:02x}")).collect();
    tuned.calibration = format!(
        "{}; fine-tuned at ranks {digest} (compression rate {:.4}) on {} windows of {} tokens, {} steps (held-out \
         output error {:.4} -> {:.4})",
        rotations.calibration,
        ranks.compression_rate(),
        data.train.len(),
        shape.tokens,
        report.best_step,
        report.initial_held_out,
        report.best_held_out
    );
    Ok((tuned, report))
}
