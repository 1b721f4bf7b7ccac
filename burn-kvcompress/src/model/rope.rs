//! Rotary position embedding in the "rotate half" layout of Hugging Face transformers.
//!
//! GGUF files store W_Q and W_K with the rows of each head interleaved for llama.cpp's
//! adjacent-pair RoPE; the GGUF loader un-permutes them, so one RoPE serves both formats.

use burn::{
    module::Module,
    tensor::{backend::Backend, DType, FloatDType, Int, Tensor, TensorData},
};
use rayon::prelude::*;

use crate::backend::{host_f32, keeps_tensors_on_host};

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
    /// `x1 · cos − x2 · sin` and `x2 · cos + x1 · sin`. [`Self::apply_with_burn_ops`], but on the
    /// CPU backends on host slices (Burn's CPU ops broadcast the tables through a strided
    /// iterator, about a tenth of a prompt's time), with the same products and sums, so the same
    /// bits. The CubeCL backends run a layer's queries and keys in one launch
    /// (`kernels::rotary_qk`, through [`ModelOps::rotary_qk`](super::ModelOps::rotary_qk)).
    pub fn apply(&self, x: Tensor<B, 2>, heads: usize, positions: &Tensor<B, 1, Int>) -> Tensor<B, 2> {
        match keeps_tensors_on_host::<B>() {
            true => self.apply_on_host(x, heads, positions),
            false => self.apply_with_burn_ops(x, heads, positions),
        }
    }

    /// A layer's queries `q: [batch · seq, heads · head_dim]` and keys `k: [batch · seq, kv_heads ·
    /// head_dim]` (rows batch-major) rotated by `positions` `[batch · seq]` ([`Self::apply`]),
    /// then multiplied by `rotation` ([`rotate_heads`]) where given: queries `[batch, heads, seq,
    /// head_dim]` in f32 and keys `[batch, kv_heads, seq, head_dim]` in `k_dtype`. What
    /// [`ModelOps::rotary_qk`](super::ModelOps::rotary_qk) runs without a backend's kernel.
    pub fn apply_qk(
        &self,
        [q, k]: [Tensor<B, 2>; 2],
        [batch, heads, kv_heads]: [usize; 3],
        positions: &Tensor<B, 1, Int>,
        rotation: Option<&Tensor<B, 3>>,
        k_dtype: FloatDType,
    ) -> [Tensor<B, 4>; 2] {
        let rows = q.dims()[0];
        let (seq, head_dim) = (rows / batch, 2 * self.cos.dims()[1]);
        let in_heads = |x: Tensor<B, 2>, heads: usize| {
            let x = self.apply(x, heads, positions).reshape([batch, seq, heads, head_dim]).swap_dims(1, 2);
            match rotation {
                Some(r) => rotate_heads(x, r),
                None => x,
            }
        };
        [in_heads(q, heads), in_heads(k, kv_heads).cast(k_dtype)]
    }

    /// [`Self::apply`] by Burn's tensor ops on any backend.
    pub fn apply_with_burn_ops(&self, x: Tensor<B, 2>, heads: usize, positions: &Tensor<B, 1, Int>) -> Tensor<B, 2> {
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

    /// [`Self::apply`] on host copies of `x` and of the rows' tables, rows in parallel.
    fn apply_on_host(&self, x: Tensor<B, 2>, heads: usize, positions: &Tensor<B, 1, Int>) -> Tensor<B, 2> {
        let [rows, width] = x.dims();
        let half = width / heads / 2;
        let device = x.device();
        let x = host_f32(x);
        let gather = |t: &Tensor<B, 2>| host_f32(t.clone().select(0, positions.clone()));
        let (cos, sin) = (gather(&self.cos), gather(&self.sin));
        let mut out = vec![0.0f32; rows * width];
        out.par_chunks_mut(width).enumerate().for_each(|(r, row)| {
            let (cos, sin) = (&cos[r * half..(r + 1) * half], &sin[r * half..(r + 1) * half]);
            for (head_out, head_in) in row.chunks_mut(2 * half).zip(x[r * width..(r + 1) * width].chunks(2 * half)) {
                let (x1, x2) = head_in.split_at(half);
                let (out1, out2) = head_out.split_at_mut(half);
                for i in 0..half {
                    out1[i] = x1[i] * cos[i] - x2[i] * sin[i];
                    out2[i] = x2[i] * cos[i] + x1[i] * sin[i];
                }
            }
        });
        Tensor::from_data(TensorData::new(out, [rows, width]), &device)
    }
}

/// `x: [batch, heads, n, head_dim]` multiplied per head by its KV head's matrix of `r:
/// [kv_heads, head_dim, head_dim]` (query heads `g · group .. (g + 1) · group` share KV head
/// `g`'s), in their float type.
pub fn rotate_heads<B: Backend>(x: Tensor<B, 4>, r: &Tensor<B, 3>) -> Tensor<B, 4> {
    let [batch, heads, n, d] = x.dims();
    let kv_heads = r.dims()[0];
    let rows = heads / kv_heads * n;
    let r = r.clone().reshape([1, kv_heads, d, d]).expand([batch, kv_heads, d, d]);
    x.reshape([batch, kv_heads, rows, d]).matmul(r).reshape([batch, heads, n, d])
}

#[cfg(all(test, feature = "ndarray"))]
mod tests {
    use burn::tensor::Distribution;

    use super::*;

    #[test]
    fn the_host_rotation_has_the_bits_of_burn_ops() {
        type B = crate::backend::NdArray;
        let device = Default::default();
        let rope = RotaryEmbedding::<B>::new(64, 100, 10_000.0, &device);
        let x = Tensor::<B, 2>::random([7, 3 * 64], Distribution::Normal(0.0, 3.0), &device);
        let positions = Tensor::<B, 1, Int>::from_data(TensorData::new(vec![0i64, 99, 5, 5, 17, 64, 1], [7]), &device);
        let host = rope.apply(x.clone(), 3, &positions).into_data();
        let burn = rope.apply_with_burn_ops(x, 3, &positions).into_data();
        assert_eq!(host.into_vec::<f32>().unwrap(), burn.into_vec::<f32>().unwrap());
    }
}
