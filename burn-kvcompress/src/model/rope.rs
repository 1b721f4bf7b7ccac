//! Rotary position embedding in the "rotate half" layout of Hugging Face transformers.
//!
//! GGUF files store W_Q and W_K with the rows of each head interleaved for llama.cpp's
//! adjacent-pair RoPE; the GGUF loader un-permutes them, so one RoPE serves both formats.

use burn::{
    module::Module,
    tensor::{backend::Backend, Int, Tensor, TensorData},
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

    /// Rotates `x` `[batch, heads, seq, head_dim]` by the positions `[batch, seq]` (row-major
    /// host values, each `< max_position`).
    pub fn apply(&self, x: Tensor<B, 4>, positions: &[usize]) -> Tensor<B, 4> {
        let [batch, _, seq, head_dim] = x.dims();
        let half = head_dim / 2;
        debug_assert_eq!(positions.len(), batch * seq);
        let device = x.device();
        let ids: Vec<i64> = positions.iter().map(|&p| p as i64).collect();
        let ids = Tensor::<B, 1, Int>::from_data(TensorData::new(ids, [batch * seq]), &device);
        let gather = |t: &Tensor<B, 2>| t.clone().select(0, ids.clone()).reshape([batch, 1, seq, half]);
        let (cos, sin) = (gather(&self.cos), gather(&self.sin));
        let x1 = x.clone().narrow(3, 0, half);
        let x2 = x.narrow(3, half, half);
        Tensor::cat(vec![x1.clone() * cos.clone() - x2.clone() * sin.clone(), x2 * cos + x1 * sin], 3)
    }
}
