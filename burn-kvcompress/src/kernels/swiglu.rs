//! SwiGLU's gating in one launch: `silu(gate) · up` for the feed-forward layer's two products
//! `[rows, intermediate]`, in the weights' float type.
//!
//! Burn composes `silu(x) = x · sigmoid(x)` from its ops, and its sigmoid as `exp(−log(1 +
//! exp(−x)))`: with the product by `up`, eight launches where a decode step is bound by launching
//! them. Here each unit computes one element in f32, `g / (1 + exp(−g)) · u`, rounded to the
//! operands' type once.
//!
//! Error: the f32 evaluation moves the result by at most `(9 + 2|g|) · 2^-24` relative: the
//! exponential's error (the device's; Vulkan allows `3 + 2|g|` units in the last place, CUDA's is
//! within that) carries into the sigmoid at most unchanged, and the sum, the quotient and the two
//! products round once each; then one rounding to the operands' type (`2^-11` relative for f16,
//! or half a subnormal's spacing below its normal range). Burn's ops round each of their steps to
//! the operands' type instead.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{dense_output_of, float_arg, kernel_float, CubeF32};

/// Units per cube.
const UNITS: u32 = 256;

/// `out[i] = silu(gate[i]) · up[i]` for `i < len`.
#[cube(launch_unchecked)]
fn swiglu_kernel<F: Float>(
    gate: &Array<F>,
    up: &Array<F>,
    out: &mut Array<F>,
    len: u32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS as u32;
    if i < len {
        let g = f32::cast_from(gate[i as usize]);
        let gated = g / (1.0f32 + f32::exp(-g));
        out[i as usize] = F::cast_from(gated * f32::cast_from(up[i as usize]));
    }
}

/// `silu(gate) · up` for `gate`, `up` `[rows, intermediate]` of one float type (f16, bf16 or
/// f32), in that type.
///
/// # Panics
/// If the shapes or the types disagree, or the type is not one of those.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn swiglu<R: CubeRuntime, BT: BoolElement>(
    gate: Tensor<CubeF32<R, BT>, 2>,
    up: Tensor<CubeF32<R, BT>, 2>,
) -> Tensor<CubeF32<R, BT>, 2> {
    let dims = gate.dims();
    let dtype = gate.dtype();
    assert_eq!(dims, up.dims(), "swiglu: gate {dims:?}, up {:?}", up.dims());
    assert!(kernel_float(dtype) && up.dtype() == dtype, "swiglu: gate in {dtype:?}, up in {:?}", up.dtype());
    let len = dims[0] * dims[1];
    let (gate, up) = (float_arg(&gate), float_arg(&up));
    let out = dense_output_of(&gate, len, dtype);
    if len > 0 {
        // SAFETY: unit `i` reads `gate[i]`, `up[i]` and writes `out[i]` only for `i < len`, the
        // length of all three (`out` allocated above, the others contiguous `[rows,
        // intermediate]`).
        unsafe {
            swiglu_kernel::launch_unchecked(
                &gate.client.clone(),
                CubeCount::Static((len as u32).div_ceil(UNITS), 1, 1),
                CubeDim::new_1d(UNITS),
                gate.into_array_arg(),
                up.into_array_arg(),
                out.clone().into_array_arg(),
                len as u32,
                dtype.into(),
            )
        };
    }
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape(dims)
}
