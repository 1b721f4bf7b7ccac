//! The PQ fine-tuning objective and [`finetune_codebooks`].

use burn::tensor::{
    activation::softmax,
    backend::{AutodiffBackend, Backend},
    Bool, Int, Tensor, TensorData,
};
use burn_kvcompress::finetune::{
    causal_forbidden, loss_value, relative_output_error, run_finetune, Adam, FinetuneConfig, FinetuneData,
    FinetuneProgress, FinetuneReport, LayerBatch, Objective,
};

use crate::{
    codebook::{Codebooks, KvKind},
    kernels::attention::reconstruct,
    PqError,
};

/// The nearest centroid of every sub-vector, by squared L2 (`‖c‖² − 2 x·c`, one batched matmul):
/// `x: [batch, kv_heads, n, head_dim]`, `books: [groups, subspaces, centroids, sub_dim]`;
/// returns codes `[batch, kv_heads, n, subspaces]`. Ties and rounding may pick a different
/// centroid than the cache's exact encoder where two are equally near.
pub fn nearest_codes<B: Backend>(x: Tensor<B, 4>, books: Tensor<B, 4>) -> Tensor<B, 4, Int> {
    let [batch, kv_heads, n, d] = x.dims();
    let [groups, m, centroids, ds] = books.dims();
    debug_assert_eq!(m * ds, d);
    // [batch, kv_heads, m, n, ds] · [.., m, ds, centroids]
    let x = x.reshape([batch, kv_heads, n, m, ds]).swap_dims(2, 3);
    let books = books.reshape([1, groups, m, centroids, ds]).expand([batch, kv_heads, m, centroids, ds]);
    let norms = books.clone().powi_scalar(2).sum_dim(4).swap_dims(3, 4);
    let distance = norms - x.matmul(books.swap_dims(3, 4)) * 2.0;
    distance.argmin(4).reshape([batch, kv_heads, m, n]).swap_dims(2, 3)
}

/// True where the query (one of the last `rows` of `tokens` slots) sees the key in full precision:
/// the cache keeps the newest `max(window, 1)` slots exact. `[1, 1, rows, tokens]`.
fn exact_slots<B: Backend>(rows: usize, tokens: usize, window: usize, device: &B::Device) -> Tensor<B, 4, Bool> {
    let first = tokens - rows;
    let exact: Vec<bool> =
        (0..rows).flat_map(|r| (0..tokens).map(move |j| j <= first + r && first + r - j < window.max(1))).collect();
    Tensor::from_data(TensorData::new(exact, [1, 1, rows, tokens]), device)
}

/// The attention output of `batch`'s queries over its keys and values as a PQ cache with recent
/// window `window` serves them: slots older than the window are `books[code]` (codes are the
/// nearest centroids of the exact vectors), newer ones exact. `key_books` and `value_books` are
/// `[groups, subspaces, centroids, sub_dim]`; returns `[windows, heads, query_rows, head_dim]`,
/// differentiable through the books.
pub fn pq_attention_output<B: Backend>(
    batch: &LayerBatch<B>,
    key_books: Tensor<B, 4>,
    value_books: Tensor<B, 4>,
    window: usize,
) -> Tensor<B, 4> {
    let [n, heads, rows, d] = batch.queries.dims();
    let [_, kv_heads, tokens, _] = batch.keys.dims();
    let group = heads / kv_heads;
    let device = batch.queries.device();
    let rebuild = |x: &Tensor<B, 4>, books: Tensor<B, 4>| {
        let codes = nearest_codes(x.clone().detach(), books.clone().detach());
        reconstruct(codes, &books)
    };
    let (keys, values) = (rebuild(&batch.keys, key_books), rebuild(&batch.values, value_books));
    let q = batch.queries.clone().reshape([n, kv_heads, group * rows, d]);
    let per_row = |mask: Tensor<B, 4, Bool>| mask.repeat_dim(2, group).expand([n, kv_heads, group * rows, tokens]);
    let exact = per_row(exact_slots::<B>(rows, tokens, window, &device));
    let forbidden = per_row(causal_forbidden::<B>(rows, tokens, &device));
    let exact_scores = q.clone().matmul(batch.keys.clone().swap_dims(2, 3));
    let scores = q.matmul(keys.swap_dims(2, 3)).mask_where(exact.clone(), exact_scores) / (d as f64).sqrt();
    let probs = softmax(scores.mask_fill(forbidden, f32::NEG_INFINITY), 3);
    let exact_probs = probs.clone().mask_fill(exact.bool_not(), 0.0);
    let out = exact_probs.clone().matmul(batch.values.clone()) + (probs - exact_probs).matmul(values);
    out.reshape([n, heads, rows, d])
}

/// The objective [`run_finetune`] drives: every layer's key and value codebooks with an Adam
/// state each.
struct PqObjective<'a, B: AutodiffBackend> {
    books: Codebooks,
    optimizers: Vec<[Adam; 2]>,
    data: &'a FinetuneData,
    window: usize,
    /// Windows per held-out batch.
    eval_batch: usize,
    device: B::Device,
}

impl<B: AutodiffBackend> PqObjective<'_, B> {
    fn book(&self, layer: usize, kind: KvKind) -> Tensor<B, 4> {
        let data = TensorData::new(self.books.layer(layer, kind).to_vec(), self.books.shape());
        Tensor::from_data(data, &self.device)
    }

    /// The loss of `layer` on `windows` of `samples`, with the books as given.
    fn layer_loss(&self, layer: usize, batch: &LayerBatch<B>, books: [Tensor<B, 4>; 2]) -> Tensor<B, 1> {
        let [keys, values] = books;
        let approx = pq_attention_output(batch, keys, values, self.window);
        relative_output_error(approx, batch.outputs.clone(), self.data.projections.layer(layer, &self.device))
    }
}

impl<B: AutodiffBackend> Objective for PqObjective<'_, B> {
    type Error = PqError;
    type Parameters = Codebooks;

    fn step(&mut self, windows: &[usize], learning_rate: f64) -> Result<f64, PqError> {
        let mut total = 0.0;
        for layer in 0..self.books.geometry.layers {
            let batch = self.data.train.batch::<B>(layer, windows, &self.device);
            let books = [KvKind::Key, KvKind::Value].map(|kind| self.book(layer, kind).require_grad());
            let loss = self.layer_loss(layer, &batch, books.clone());
            let grads = loss.backward();
            total += loss_value(loss);
            for (kind, book) in [KvKind::Key, KvKind::Value].into_iter().zip(books) {
                let Some(grad) = book.grad(&grads) else { continue };
                let grad: Vec<f32> = grad.into_data().convert::<f32>().into_vec().expect("f32 data");
                let params = match kind {
                    KvKind::Key => &mut self.books.keys[layer],
                    KvKind::Value => &mut self.books.values[layer],
                };
                self.optimizers[layer][kind as usize].step(params, &grad, learning_rate as f32);
            }
        }
        Ok(total / self.books.geometry.layers as f64)
    }

    fn held_out_loss(&mut self) -> Result<f64, PqError> {
        let loss = |layer, batch: &LayerBatch<B>| {
            let books = [KvKind::Key, KvKind::Value].map(|kind| self.book(layer, kind));
            loss_value(self.layer_loss(layer, batch, books))
        };
        Ok(self.data.held_out.mean_loss(self.eval_batch, &self.device, loss))
    }

    fn parameters(&self) -> &Codebooks {
        &self.books
    }

    fn set_parameters(&mut self, books: Codebooks) {
        self.books = books;
    }
}

/// Fine-tunes `codebooks` for a cache with recent window `window` on `data`'s training windows
/// (held-out windows for early stopping), on the autodiff backend `B`. Returns the codebooks with
/// the best held-out loss (the starting point if no step improved it) and the run's report; the
/// codebooks' calibration text says they were fine-tuned.
pub fn finetune_codebooks<B: AutodiffBackend>(
    codebooks: &Codebooks,
    window: usize,
    data: &FinetuneData,
    config: &FinetuneConfig,
    device: &B::Device,
    on_progress: &mut dyn FnMut(FinetuneProgress),
) -> Result<(Codebooks, FinetuneReport), PqError> {
    let shape = data.check()?;
    let g = codebooks.geometry;
    if (shape.layers, shape.kv_heads, shape.head_dim) != (g.layers, g.kv_heads, g.head_dim) {
        return Err(PqError::GeometryMismatch { expected: g.to_string(), found: format!("samples {shape:?}") });
    }
    codebooks.check_shapes().map_err(PqError::Config)?;
    let len = codebooks.shape().iter().product();
    let mut objective = PqObjective::<B> {
        books: codebooks.clone(),
        optimizers: (0..g.layers).map(|_| [Adam::new(len), Adam::new(len)]).collect(),
        data,
        window,
        eval_batch: config.windows_per_step.max(1),
        device: device.clone(),
    };
    let report = run_finetune(&mut objective, data.train.len(), config, on_progress)?;
    let mut books = objective.books;
    books.calibration = format!(
        "{}; fine-tuned for window {window} on {} windows of {} tokens, {} steps (held-out output error {:.4} -> {:.4})",
        codebooks.calibration,
        data.train.len(),
        shape.tokens,
        report.best_step,
        report.initial_held_out,
        report.best_held_out
    );
    Ok((books, report))
}
