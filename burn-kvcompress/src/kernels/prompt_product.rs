//! Products of many activation rows (a prompt's) with a weight matrix in f16 or bf16: through
//! cuBLAS on the CUDA backend where the library loads ([`cublas_product`](super::cublas_product)),
//! else through cubek (the kernels Burn's matrix product runs) with a variant chosen here.
//!
//! Without Burn's `autotune` feature (the workspace turns Burn's default features off) its
//! matrix product always runs cubek's simplest tensor-core variant (`SimpleCyclicCmma`). On an
//! H200, for a Llama-3-8B layer's products at 8192 rows, that reaches 104–120 TFLOP/s; the
//! double-buffered TMA variant 219–245 and the double-buffered cyclic one 150–173, where cuBLAS
//! (PyTorch) reaches 734–769 (`prompt_bench` beside `cli/bench/prompt_anchor.py`,
//! `results/prompt-h200.md`). [`prompt_product`] tries those two in that order (the TMA one needs
//! a device with TMA and operands whose rows are 16-byte aligned; the cyclic one warp matrix
//! instructions) and falls back to Burn's matrix product where neither launches (wgpu, awkward
//! shapes). f32 operands keep Burn's product: the variants' f32 tiles may round through TF32.
//!
//! Error: the same element types and accumulation as Burn's product (`MatmulElems::from_globals`);
//! the variants differ from it only in the order of the sums.

use burn::tensor::{DType, Shape, Tensor, TensorPrimitive};
use burn_cubecl::{
    kernel::into_contiguous, ops::numeric::empty_device_dtype, tensor::CubeTensor, BoolElement, CubeRuntime,
};
use cubek::{
    matmul::{
        definition::{MatmulElems, MatmulGlobalElems, MatmulSetupError},
        launch::{launch_ref, Strategy},
    },
    std::InputBinding,
};

use super::CubeF32;

/// `x` `[rows, k]` times `w` `[k, n]` (the same float type) to `[rows, n]`: cuBLAS where it
/// runs (CUDA, f16 or bf16), else the fastest of cubek's variants that launches for these
/// operands, else Burn's matrix product.
pub fn prompt_product<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    w: Tensor<CubeF32<R, BT>, 2>,
) -> Tensor<CubeF32<R, BT>, 2> {
    if !matches!(w.dtype(), DType::F16 | DType::BF16) || x.dtype() != w.dtype() {
        return x.matmul(w);
    }
    let operands = Operands::new(x, w);
    #[cfg(feature = "cuda")]
    if super::cublas_product(&operands.x, &operands.w, &operands.out).is_ok() {
        return operands.output();
    }
    let variants = [Strategy::DoubleTmaMma(Default::default()), Strategy::DoubleCyclicCmma(Default::default())];
    if variants.iter().any(|strategy| operands.launch(strategy).is_ok()) {
        return operands.output();
    }
    operands.burn_product()
}

/// `x` `[rows, k]` times `w` `[k, n]` (the same float type) by cubek's `strategy`, or the reason
/// it does not launch for these operands on this device (nothing is launched then).
pub fn product_by<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    w: Tensor<CubeF32<R, BT>, 2>,
    strategy: &Strategy,
) -> Result<Tensor<CubeF32<R, BT>, 2>, MatmulSetupError> {
    let operands = Operands::new(x, w);
    operands.launch(strategy)?;
    Ok(operands.output())
}

/// A product's contiguous inputs and its output buffer, prepared once for every variant tried.
struct Operands<R: CubeRuntime> {
    x: CubeTensor<R>,
    w: CubeTensor<R>,
    out: CubeTensor<R>,
}

impl<R: CubeRuntime> Operands<R> {
    fn new<BT: BoolElement>(x: Tensor<CubeF32<R, BT>, 2>, w: Tensor<CubeF32<R, BT>, 2>) -> Self {
        let ([rows, _], [_, n]) = (x.dims(), w.dims());
        let x = into_contiguous(x.into_primitive().tensor());
        let w = into_contiguous(w.into_primitive().tensor());
        let out = empty_device_dtype(w.client.clone(), w.device.clone(), Shape::new([rows, n]), w.dtype);
        Self { x, w, out }
    }

    /// Launches `strategy` into the output, or says why it does not launch (launching nothing).
    fn launch(&self, strategy: &Strategy) -> Result<(), MatmulSetupError> {
        let dtype = self.w.dtype;
        let mut elems =
            MatmulElems::from_globals(&MatmulGlobalElems { lhs: dtype.into(), rhs: dtype.into(), out: dtype.into() });
        launch_ref(
            strategy,
            &self.w.client,
            InputBinding::new(self.x.clone().binding(), dtype.into()),
            InputBinding::new(self.w.clone().binding(), dtype.into()),
            self.out.clone().binding(),
            &mut elems,
        )
    }

    /// The output as a tensor (after a launch that succeeded).
    fn output<BT: BoolElement>(self) -> Tensor<CubeF32<R, BT>, 2> {
        Tensor::from_primitive(TensorPrimitive::Float(self.out))
    }

    /// Burn's matrix product of the inputs (the output buffer is dropped unused).
    fn burn_product<BT: BoolElement>(self) -> Tensor<CubeF32<R, BT>, 2> {
        let tensor = |t| Tensor::<CubeF32<R, BT>, 2>::from_primitive(TensorPrimitive::Float(t));
        tensor(self.x).matmul(tensor(self.w))
    }
}
