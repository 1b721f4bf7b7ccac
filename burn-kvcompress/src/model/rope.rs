//! Rotary position embedding in the "rotate half" layout of Hugging Face transformers.
//!
//! GGUF files store W_Q and W_K with the rows of each head interleaved for llama.cpp's
//! adjacent-pair RoPE; the GGUF loader un-permutes them, so one RoPE serves both formats.

use burn::{
    module::Module,
    tensor::{backend::Backend, DType, Int, Tensor, TensorData},
};

/// Precomputed cos/sin tables, `[max_position, head_dim / 2]` each.
#[derive(Module, Debug)]
pub struct RotaryEmbedding<B: Backend> {
    cos: Tensor<B, 2>,
    sin: Tensor<B, 2>,
}

impl<B: Backend> RotaryEmbedding<B> {
    /// Tables for `head_dim` and positions `0..max_position` with base `theta`
    /// (frequency `i` is `theta^(-2i/head_dim)`), computed in f64 and rounded to f32.
    pub fn new(head_dim: usize, max_position: usize, theta: f32, device: &B::Device) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(max_position * half);
        let mut sin = Vec::with_capacity(max_position * half);
        for pos in 0..max_position {
            for i in 0..half {
                let inv_freq = (theta as f64).powf(-2.0 * i as f64 / head_dim as f64);
                let angle = pos as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let table = |v: Vec<f32>| Tensor::from_data(TensorData::new(v, [max_position, half]), device);
        Self { cos: table(cos), sin: table(sin) }
    }

    /// Longest sequence covered.
    pub fn max_position(&self) -> usize {
        self.cos.dims()[0]
    }

    /// The tables `(cos, sin)`, `[max_position, head_dim / 2]` each, f32.
    pub fn tables(&self) -> (&Tensor<B, 2>, &Tensor<B, 2>) {
        (&self.cos, &self.sin)
    }

    /// Rotates the rows `x` `[rows, heads · head_dim]` (any float type) by `positions` `[rows]`
    /// (each `< max_position`), in f32: channels `i` and `i + head_dim / 2` of each head become
    /// `x1 · cos − x2 · sin` and `x2 · cos + x1 · sin`. Burn's ops; the CubeCL backends run the
    /// same in one launch (`kernels::rotary`, through [`ModelOps`](super::ModelOps)).
    pub fn apply(&self, x: Tensor<B, 2>, heads: usize, positions: &Tensor<B, 1, Int>) -> Tensor<B, 2> {
        let [rows, width] = x.dims();
        let half = width / heads / 2;
        let x = x.cast(DType::F32).reshape([rows, heads, 2 * half]);
        let gather = |t: &Tensor<B, 2>| t.clone().select(0, positions.clone()).reshape([rows, 1, half]);
        let (cos, sin) = (gather(&self.cos), gather(&self.sin));
        let x1 = x.clone().narrow(2, 0, half);
        let x2 = x.narrow(2, half, half);
        Tensor::cat(vec![x1.clone() * cos.clone() - x2.clone() * sin.clone(), x2 * cos + x1 * sin], 2)
            .reshape([rows, width])
    }
}
