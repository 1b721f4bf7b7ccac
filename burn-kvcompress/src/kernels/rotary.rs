//! Rotary position embedding of a projection's output in one launch: the rows `[rows, heads ·
//! head_dim]` of a query or key projection (in the weights' float type) rotated in the "rotate
//! half" layout by each row's position, written in f32 (the type the caches take).
//!
//! Burn's ops take about nine launches for the same (a cast, two gathers of the tables, four
//! products, a sum, a difference and a concatenation), and a decode step is bound by launching
//! them. The arithmetic is the same as theirs, `x1 · cos − x2 · sin` and `x2 · cos + x1 · sin` in
//! f32 on the same f32 tables, up to the compiler contracting a product and a sum into one fused
//! multiply-add (a difference of at most `2^-24 · (|x1 · cos| + |x2 · sin|)` per output).

use burn::tensor::{DType, Int, Tensor, TensorPrimitive};
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{dense_output, float_arg, int_arg, kernel_float, CubeF32};

/// Units per cube.
const UNITS: u32 = 256;

/// Rotates pair `i` of head `h` of row `r` (unit `(r · heads + h) · half + i`): channels `i` and
/// `i + half` of the head by the angle of the row's position.
#[cube(launch_unchecked)]
fn rotary_kernel<F: Float>(
    x: &Array<F>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    positions: &Array<i32>,
    out: &mut Array<f32>,
    heads: u32,
    half: u32,
    max_position: u32,
    #[define(F)] _dtype: StorageType,
) {
    let pair = ABSOLUTE_POS as u32;
    if pair >= positions.len() as u32 * heads * half {
        terminate!();
    }
    let i = pair % half;
    let head_row = pair / half;
    let row = head_row / heads;
    let first = (head_row * 2 * half + i) as usize;
    let second = first + half as usize;
    // A position past the tables (or negative) takes the last angle: wrong but in bounds.
    let position = u32::min(positions[row as usize] as u32, max_position - 1);
    let angle = (position * half + i) as usize;
    let (c, s) = (cos[angle], sin[angle]);
    let (x1, x2) = (f32::cast_from(x[first]), f32::cast_from(x[second]));
    out[first] = x1 * c - x2 * s;
    out[second] = x2 * c + x1 * s;
}

/// `x` `[rows, heads · head_dim]` (f16, bf16 or f32) rotated by `positions` `[rows]` with the
/// tables `cos`, `sin` `[max_position, head_dim / 2]` (f32), as f32 `[rows, heads · head_dim]`.
/// Positions must be `< max_position`: the caller checks them (they stay on the device); one past
/// the tables takes the last row's angle.
///
/// # Panics
/// If the shapes disagree or a type is not one of those.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn rotary<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    heads: usize,
    cos: &Tensor<CubeF32<R, BT>, 2>,
    sin: &Tensor<CubeF32<R, BT>, 2>,
    positions: &Tensor<CubeF32<R, BT>, 1, Int>,
) -> Tensor<CubeF32<R, BT>, 2> {
    let ([rows, width], [max_position, half]) = (x.dims(), cos.dims());
    assert_eq!(sin.dims(), cos.dims(), "rotary: cos and sin tables differ in shape");
    assert!(max_position > 0, "rotary: empty tables");
    assert_eq!(positions.dims(), [rows], "rotary: {rows} rows, positions {:?}", positions.dims());
    assert_eq!(width, heads * 2 * half, "rotary: rows of {width} for {heads} heads of {}", 2 * half);
    assert!(
        kernel_float(x.dtype()) && cos.dtype() == DType::F32,
        "rotary: x in {:?}, tables in {:?}",
        x.dtype(),
        cos.dtype()
    );
    let dtype = x.dtype();
    let x = float_arg(&x);
    let out = dense_output::<R, f32>(&x, rows * width);
    let pairs = rows * heads * half;
    if pairs > 0 {
        // SAFETY: unit `p < rows · heads · half` (the kernel's guard; `positions.len() = rows`)
        // reads channels `< (r · heads + h + 1) · 2 · half ≤ rows · width` of `x` and writes the
        // same two of `out` (`rows · width`, allocated above), and reads entry `pos · half + i`
        // of the tables (`max_position · half`), `pos` clamped below `max_position > 0`.
        unsafe {
            rotary_kernel::launch_unchecked(
                &x.client.clone(),
                CubeCount::Static(pairs.div_ceil(UNITS as usize) as u32, 1, 1),
                CubeDim::new_1d(UNITS),
                x.into_array_arg(),
                float_arg(cos).into_array_arg(),
                float_arg(sin).into_array_arg(),
                int_arg(positions).into_array_arg(),
                out.clone().into_array_arg(),
                heads as u32,
                half as u32,
                max_position as u32,
                dtype.into(),
            )
        };
    }
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([rows, width])
}
