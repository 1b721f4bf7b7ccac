//! RMSNorm of activation rows in one launch: `y = x / sqrt(mean(x²) + ε) · γ`, rows `[rows,
//! hidden]` in the weights' float type.
//!
//! Burn's `RmsNorm` takes about eight launches (a cast, the square, the mean, the sum with ε, the
//! root, a cast back, the quotient and the product), and a decode step is bound by launching
//! them. Here a cube normalizes two rows: its units sum the squares of strided elements in f32,
//! a tree in shared memory adds the two rows' sums at once ([`sum_runs`]), and each unit writes its
//! elements, `x · (1 / rms) · γ` computed in f32 and rounded to the rows' type once.
//!
//! Error against Burn's ops, which compute the root in f32 but divide and scale in the rows'
//! type: both round the same f32 sum of squares (in another order here: a relative difference
//! of at most `hidden · 2^-24`), and Burn's rounds twice more in the rows' type (`u` each, 2^-11
//! for f16), so the two differ by at most about `(2u + hidden · 2^-24) · |y|` plus one rounding
//! of the result.

use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_cubecl::{BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{dense_output_of, float_arg, sum_runs, CubeF32};

/// Units per cube.
const UNITS: u32 = 256;
/// Rows per cube: the tree reduces two runs at once.
const ROWS_PER_CUBE: u32 = 2;

/// Normalizes rows `2c` and `2c + 1` (the second where it exists) of `x` `[rows, hidden]` into
/// `out`, scaled by `gamma` `[hidden]`.
#[cube(launch_unchecked)]
fn rms_norm_kernel<F: Float>(
    x: &Array<F>,
    gamma: &Array<F>,
    out: &mut Array<F>,
    rows: u32,
    hidden: u32,
    epsilon: f32,
    #[define(F)] _dtype: StorageType,
) {
    let first_row = CUBE_POS_X * ROWS_PER_CUBE;
    let has_second = first_row + 1 < rows;
    let mut squares = SharedMemory::<f32>::new(UNITS as usize);
    let mut second_squares = SharedMemory::<f32>::new(UNITS as usize);
    let mut sum = 0.0f32;
    let mut second_sum = 0.0f32;
    let mut c = UNIT_POS;
    while c < hidden {
        let v = f32::cast_from(x[(first_row * hidden + c) as usize]);
        sum += v * v;
        if has_second {
            let w = f32::cast_from(x[((first_row + 1) * hidden + c) as usize]);
            second_sum += w * w;
        }
        c += UNITS;
    }
    squares[UNIT_POS as usize] = sum;
    second_squares[UNIT_POS as usize] = second_sum;
    sync_cube();
    sum_runs(&mut squares, &mut second_squares, 1u32, UNITS);
    let mean = f32::cast_from(hidden);
    let inverse = 1.0f32 / f32::sqrt(squares[0] / mean + epsilon);
    let second_inverse = 1.0f32 / f32::sqrt(second_squares[0] / mean + epsilon);
    let mut c = UNIT_POS;
    while c < hidden {
        let g = f32::cast_from(gamma[c as usize]);
        let at = (first_row * hidden + c) as usize;
        out[at] = F::cast_from(f32::cast_from(x[at]) * inverse * g);
        if has_second {
            let at = at + hidden as usize;
            out[at] = F::cast_from(f32::cast_from(x[at]) * second_inverse * g);
        }
        c += UNITS;
    }
}

/// `x` `[rows, hidden]` normalized by its rows' root mean square (plus `epsilon`) and scaled by
/// `gamma` `[hidden]`, in `x`'s float type (f16, bf16 or f32; `gamma` in the same).
///
/// # Panics
/// If the shapes or the types disagree, or the type is not one of those.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn rms_norm<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    gamma: &Tensor<CubeF32<R, BT>, 1>,
    epsilon: f64,
) -> Tensor<CubeF32<R, BT>, 2> {
    let [rows, hidden] = x.dims();
    let dtype = x.dtype();
    assert_eq!(gamma.dims(), [hidden], "rms_norm: rows of {hidden}, gamma {:?}", gamma.dims());
    assert!(
        matches!(dtype, DType::F16 | DType::BF16 | DType::F32) && gamma.dtype() == dtype,
        "rms_norm: x in {dtype:?}, gamma in {:?}",
        gamma.dtype()
    );
    let x = float_arg(&x);
    let out = dense_output_of(&x, rows * hidden, dtype);
    let cubes = rows.div_ceil(ROWS_PER_CUBE as usize);
    if cubes > 0 && hidden > 0 {
        // SAFETY: cube `c < ⌈rows / 2⌉` reads and writes row `2c < rows` and row `2c + 1` only
        // where `2c + 1 < rows`, at columns `< hidden` (every loop's bound), of `x` and `out`
        // (both `rows · hidden`, `out` allocated above) and entries `< hidden` of `gamma`;
        // shared memory holds `UNITS` entries, indexed by the unit.
        unsafe {
            rms_norm_kernel::launch_unchecked(
                &x.client.clone(),
                CubeCount::Static(cubes as u32, 1, 1),
                CubeDim::new_1d(UNITS),
                x.into_array_arg(),
                float_arg(gamma).into_array_arg(),
                out.clone().into_array_arg(),
                rows as u32,
                hidden as u32,
                epsilon as f32,
                dtype.into(),
            )
        };
    }
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([rows, hidden])
}
