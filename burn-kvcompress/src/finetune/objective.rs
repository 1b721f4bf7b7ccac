//! The fine-tuning loss: the attention output's error as the output projection sees it.

use burn::tensor::{backend::Backend, Bool, ElementConversion, Tensor, TensorData};

use crate::{cache::AttendOptions, model::CausalLm};

/// Every layer's output projection `W_O`, on the host: `[heads · head_dim, hidden]` row-major
/// (the layout of the model's `o_proj` weight: input rows, output columns).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputProjections {
    /// Query heads.
    pub heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Model width (the projection's output).
    pub hidden: usize,
    /// Per layer, `[heads · head_dim, hidden]` row-major.
    pub weights: Vec<Vec<f32>>,
}

impl OutputProjections {
    /// The output projections of `model` (of the *unfolded* model: the loss compares with its
    /// exact outputs).
    pub fn of_model<B: Backend>(model: &CausalLm<B>) -> Self {
        let config = model.config();
        let weights: Vec<Vec<f32>> = model
            .layers
            .iter()
            .map(|layer| layer.attention.o_proj.weight.val().into_data().convert::<f32>().into_vec().expect("f32 data"))
            .collect();
        Self { heads: config.num_heads, head_dim: config.head_dim, hidden: config.hidden_size, weights }
    }

    /// Layer `layer`'s projection per head, `[heads, head_dim, hidden]`.
    pub fn per_head<B: Backend>(&self, layer: usize, device: &B::Device) -> Tensor<B, 3> {
        let data = TensorData::new(self.weights[layer].clone(), [self.heads, self.head_dim, self.hidden]);
        Tensor::from_data(data, device)
    }
}

/// `Σ ‖(Ô_h − O_h) W_O^h‖² / Σ ‖O_h W_O^h‖²` over windows, heads `h` and query rows:
/// `approx` and `exact` are `[windows, heads, rows, head_dim]`, `w_o` is `[heads, head_dim,
/// hidden]`; returns a one-element tensor (differentiable through `approx`).
///
/// Each head's output goes through its own slice of `W_O`; the slices' products are summed by the
/// model, so this per-head form ignores the cross terms between heads: it is the error of each
/// head's contribution, which the compression of that head alone controls.
pub fn relative_output_error<B: Backend>(approx: Tensor<B, 4>, exact: Tensor<B, 4>, w_o: Tensor<B, 3>) -> Tensor<B, 1> {
    let [windows, heads, rows, d] = exact.dims();
    let project = |x: Tensor<B, 4>| x.swap_dims(0, 1).reshape([heads, windows * rows, d]).matmul(w_o.clone());
    let target = project(exact.clone()).powi_scalar(2).sum();
    let error = project(approx - exact).powi_scalar(2).sum();
    error / target.clamp_min(f32::MIN_POSITIVE)
}

/// The causal mask of queries that are the last `rows` of `tokens` slots: `[1, 1, rows, tokens]`,
/// true where a query may *not* attend.
pub fn causal_forbidden<B: Backend>(rows: usize, tokens: usize, device: &B::Device) -> Tensor<B, 4, Bool> {
    let options = AttendOptions { scale: 1.0, key_start: vec![0], window: None };
    options.forbidden_mask::<B>(rows, tokens, device)
}

/// A one-element loss as an f64.
pub fn loss_value<B: Backend>(loss: Tensor<B, 1>) -> f64 {
    loss.into_scalar().elem::<f64>()
}
