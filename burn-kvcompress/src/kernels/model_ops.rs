//! The CubeCL backends' [`ModelOpsBackend`]: the model's products, norms, rotary embedding and
//! SwiGLU gating through this module's kernels (the row product two launches for up to three
//! weights, the others one).

use burn::{
    nn::RmsNorm,
    tensor::{FloatDType, Int, Tensor},
};
use burn_cubecl::{BoolElement, CubeRuntime};

use super::{add_rms_norm, rms_norm, rotary_applies, rotary_qk, row_product, row_products, swiglu, CubeF32};
use crate::model::{ModelOpsBackend, RotaryEmbedding};

impl<R: CubeRuntime, BT: BoolElement> ModelOpsBackend for CubeF32<R, BT> {
    fn row_product(x: Tensor<Self, 2>, w: Tensor<Self, 2>) -> Tensor<Self, 2> {
        row_product(x, w)
    }

    fn row_products(x: Tensor<Self, 2>, weights: Vec<Tensor<Self, 2>>) -> Vec<Tensor<Self, 2>> {
        let weights = match <[_; 3]>::try_from(weights) {
            Ok(three) => return row_products(x, three).into(),
            Err(weights) => weights,
        };
        match <[_; 2]>::try_from(weights) {
            Ok(two) => row_products(x, two).into(),
            Err(weights) => weights.into_iter().map(|w| row_product(x.clone(), w)).collect(),
        }
    }

    fn rms_norm(norm: &RmsNorm<Self>, x: Tensor<Self, 2>) -> Tensor<Self, 2> {
        rms_norm(x, &norm.gamma.val(), norm.epsilon)
    }

    fn add_rms_norm(norm: &RmsNorm<Self>, x: Tensor<Self, 2>, delta: Tensor<Self, 2>) -> [Tensor<Self, 2>; 2] {
        add_rms_norm(x, delta, &norm.gamma.val(), norm.epsilon)
    }

    /// One launch ([`rotary_qk`]) where it applies; Burn's ops for head dimensions it does not
    /// take (odd ones, or with a rotation ones that are not powers of two from 16 to 256).
    fn rotary_qk(
        rope: &RotaryEmbedding<Self>,
        [q, k]: [Tensor<Self, 2>; 2],
        heads: [usize; 3],
        positions: &Tensor<Self, 1, Int>,
        rotation: Option<&Tensor<Self, 3>>,
        k_dtype: FloatDType,
    ) -> [Tensor<Self, 4>; 2] {
        let (cos, sin) = rope.tables();
        let head_dim = 2 * cos.dims()[1];
        match rotary_applies(q.dtype(), k_dtype.into(), head_dim, rotation.is_some()) {
            true => rotary_qk(q, k, heads, cos, sin, positions, rotation, k_dtype.into()),
            false => rope.apply_qk([q, k], heads, positions, rotation, k_dtype),
        }
    }

    fn swiglu(gate: Tensor<Self, 2>, up: Tensor<Self, 2>) -> Tensor<Self, 2> {
        swiglu(gate, up)
    }
}
