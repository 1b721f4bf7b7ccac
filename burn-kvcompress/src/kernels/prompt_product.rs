//! Products of many activation rows (a prompt's) with a weight matrix in f16 or bf16, through
//! cubek (the kernels Burn's matrix product runs) with a variant chosen here.
//!
//! Without Burn's `autotune` feature (the workspace turns Burn's default features off) its
//! matrix product always runs cubek's simplest tensor-core variant (`SimpleCyclicCmma`). On an
//! H200, for a Llama-3-8B layer's products at 8192 rows, that reaches 101–118 TFLOP/s; the
//! double-buffered TMA variant 209–242 and the double-buffered cyclic one 146–172, where cuBLAS
//! (PyTorch) reaches 673–743 (`prompt_bench` beside `examples/bench/prompt_anchor.py`,
//! `results/prompt-h200.md`). [`prompt_product`] tries those two in that order (the TMA one needs
//! a device with TMA and operands whose rows are 16-byte aligned; the cyclic one warp matrix
//! instructions) and falls back to Burn's matrix product where neither launches (wgpu, awkward
//! shapes). f32 operands keep Burn's product: the variants' f32 tiles may round through TF32.
//!
//! Error: the same element types and accumulation as Burn's product (`MatmulElems::from_globals`);
//! the variants differ from it only in the order of the sums.

use burn::tensor::{DType, Shape, Tensor, TensorPrimitive};
use burn_cubecl::{kernel::into_contiguous, ops::numeric::empty_device_dtype, BoolElement, CubeRuntime};
use cubek::{
    matmul::{
        definition::{MatmulElems, MatmulGlobalElems, MatmulSetupError},
        launch::{launch_ref, Strategy},
    },
    std::InputBinding,
};

use super::CubeF32;

/// `x` `[rows, k]` times `w` `[k, n]` (the same float type) to `[rows, n]`: the fastest of cubek's
/// variants that launches for these operands, else Burn's matrix product.
pub fn prompt_product<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    w: Tensor<CubeF32<R, BT>, 2>,
) -> Tensor<CubeF32<R, BT>, 2> {
    if matches!(w.dtype(), DType::F16 | DType::BF16) && x.dtype() == w.dtype() {
        let variants = [Strategy::DoubleTmaMma(Default::default()), Strategy::DoubleCyclicCmma(Default::default())];
        for strategy in &variants {
            if let Ok(out) = product_by(x.clone(), w.clone(), strategy) {
                return out;
            }
        }
    }
    x.matmul(w)
}

/// `x` `[rows, k]` times `w` `[k, n]` (the same float type) by cubek's `strategy`, or the reason
/// it does not launch for these operands on this device (nothing is launched then).
pub fn product_by<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    w: Tensor<CubeF32<R, BT>, 2>,
    strategy: &Strategy,
) -> Result<Tensor<CubeF32<R, BT>, 2>, MatmulSetupError> {
    let ([rows, _], [_, n]) = (x.dims(), w.dims());
    let dtype = w.dtype();
    let x = into_contiguous(x.into_primitive().tensor());
    let w = into_contiguous(w.into_primitive().tensor());
    let client = w.client.clone();
    let out = empty_device_dtype(client.clone(), w.device.clone(), Shape::new([rows, n]), dtype);
    let mut elems =
        MatmulElems::from_globals(&MatmulGlobalElems { lhs: dtype.into(), rhs: dtype.into(), out: dtype.into() });
    launch_ref(
        strategy,
        &client,
        InputBinding::new(x.binding(), dtype.into()),
        InputBinding::new(w.binding(), dtype.into()),
        out.clone().binding(),
        &mut elems,
    )?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}
