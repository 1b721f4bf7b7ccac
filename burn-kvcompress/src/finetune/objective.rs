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

    /// Layer `layer`'s projection, `[heads · head_dim, hidden]`.
    pub fn layer<B: Backend>(&self, layer: usize, device: &B::Device) -> Tensor<B, 2> {
        let data = TensorData::new(self.weights[layer].clone(), [self.heads * self.head_dim, self.hidden]);
        Tensor::from_data(data, device)
    }
}

/// `‖(Ô − O) W_O‖² / ‖O W_O‖²`, summed over windows and query rows: the error of the layer's
/// attention contribution to the residual stream. `approx` and `exact` are `[windows, heads,
/// rows, head_dim]`, `w_o` is `[heads · head_dim, hidden]`; returns a one-element tensor
/// (differentiable through `approx`). The heads' errors are summed before the norm, so errors
/// that cancel across heads (those sharing a KV head's compression) cost nothing.
pub fn relative_output_error<B: Backend>(approx: Tensor<B, 4>, exact: Tensor<B, 4>, w_o: Tensor<B, 2>) -> Tensor<B, 1> {
    let [windows, heads, rows, d] = exact.dims();
    let project = |x: Tensor<B, 4>| x.swap_dims(1, 2).reshape([windows * rows, heads * d]).matmul(w_o.clone());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::NdArray;

    fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<NdArray, D> {
        Tensor::from_data(TensorData::new(values, shape), &Default::default())
    }

    #[test]
    fn relative_error_is_measured_after_the_projection() {
        // 1 window, 2 heads, 1 row, head_dim 2; W_O maps both heads' first channel to one output.
        let w_o = tensor(vec![1.0, 0.0, 1.0, 0.0], [4, 1]);
        let exact = tensor(vec![1.0, 5.0, 2.0, 7.0], [1, 2, 1, 2]);
        let loss = |approx: Vec<f32>| {
            loss_value(relative_output_error(tensor(approx, [1, 2, 1, 2]), exact.clone(), w_o.clone()))
        };
        assert_eq!(loss(vec![1.0, 5.0, 2.0, 7.0]), 0.0);
        // The output is 1 + 2 = 3; doubling it is an error of 3, relative 1.
        assert!((loss(vec![2.0, 10.0, 4.0, 14.0]) - 1.0).abs() < 1e-6);
        // Errors in the second channel, which W_O ignores, and errors cancelling across heads cost nothing.
        assert_eq!(loss(vec![1.0, -9.0, 2.0, 0.0]), 0.0);
        assert_eq!(loss(vec![1.5, 5.0, 1.5, 7.0]), 0.0);
    }
}
