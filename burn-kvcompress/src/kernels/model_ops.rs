//! The CubeCL backends' [`ModelOpsBackend`]: the model's products, norms and rotary embedding
//! through this module's kernels (the row product two launches, the others one).

use burn::{
    nn::RmsNorm,
    tensor::{Int, Tensor},
};
use burn_cubecl::{BoolElement, CubeRuntime};

use super::{rms_norm, rotary, row_product, CubeF32};
use crate::model::{ModelOpsBackend, RotaryEmbedding};

impl<R: CubeRuntime, BT: BoolElement> ModelOpsBackend for CubeF32<R, BT> {
    fn row_product(x: Tensor<Self, 2>, w: Tensor<Self, 2>) -> Tensor<Self, 2> {
        row_product(x, w)
    }

    fn rms_norm(norm: &RmsNorm<Self>, x: Tensor<Self, 2>) -> Tensor<Self, 2> {
        rms_norm(x, &norm.gamma.val(), norm.epsilon)
    }

    fn rotary(
        rope: &RotaryEmbedding<Self>,
        x: Tensor<Self, 2>,
        heads: usize,
        positions: &Tensor<Self, 1, Int>,
    ) -> Tensor<Self, 2> {
        let (cos, sin) = rope.tables();
        rotary(x, heads, cos, sin, positions)
    }
}
