//! RMSNorm of activation rows in one launch: `y = x / sqrt(mean(x²) + ε) · γ`, rows `[rows,
//! hidden]` in the weights' float type; [`add_rms_norm`] first adds a pending residual `δ` to the
//! rows (`x + δ`, in their type, as Burn's addition computes it) and returns the sum too, so that
//! a layer's residual addition and the next norm take one launch.
//!
//! Burn's `RmsNorm` takes about eight launches (a cast, the square, the mean, the sum with ε, the
//! root, a cast back, the quotient and the product), and a decode step is bound by launching
//! them. Here a cube normalizes a row: its units sum the squares of strided elements in f32, a
//! tree in shared memory adds their sums ([`sum_runs`], half the units' sums in each of its two
//! runs), and each unit writes its elements, `x · (1 / rms) · γ` computed in f32 and rounded to
//! the rows' type once. Units read vectors of up to 16 bytes, two a unit for a row of 4096 f16:
//! the summing loop's loads wait on each other, and with one element a load the norm of 8 such
//! rows took 10 µs on an H200.
//!
//! Error against Burn's ops, which compute the root in f32 but divide and scale in the rows'
//! type: both round the same f32 sum of squares (in another order here: a relative difference
//! of at most `hidden · 2^-24`), and Burn's rounds twice more in the rows' type (`u` each, 2^-11
//! for f16), so the two differ by at most about `(2u + hidden · 2^-24) · |y|` plus one rounding
//! of the result.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{dense_output_of, float_arg, kernel_float, sum_runs, widest_vector, CubeF32};

/// Units per cube.
const UNITS: u32 = 256;
/// Units whose partial sums fill each of the two runs the tree adds at once ([`sum_runs`]).
const HALF_UNITS: u32 = UNITS / 2;

/// Normalizes row `CUBE_POS_X` of `x` `[rows, hidden]` in vectors of `N` (`pieces` =
/// `hidden / N` a row; with `add`, of `x + delta`, which it also writes to `sum`) into `out`,
/// scaled by `gamma` `[hidden]`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn rms_norm_kernel<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    delta: &Array<Vector<F, N>>,
    gamma: &Array<Vector<F, N>>,
    out: &mut Array<Vector<F, N>>,
    sum_out: &mut Array<Vector<F, N>>,
    pieces: u32,
    hidden: u32,
    epsilon: f32,
    #[comptime] add: bool,
    #[define(F)] _dtype: StorageType,
) {
    let row_start = CUBE_POS_X * pieces;
    let mut low = SharedMemory::<f32>::new(HALF_UNITS as usize);
    let mut high = SharedMemory::<f32>::new(HALF_UNITS as usize);
    let mut squares = Vector::<f32, N>::new(0.0f32);
    let mut c = UNIT_POS;
    while c < pieces {
        let v = Vector::<f32, N>::cast_from(row_value(x, delta, (row_start + c) as usize, add));
        squares += v * v;
        c += UNITS;
    }
    let mut sum = 0.0f32;
    #[unroll]
    for e in 0..N::value() {
        sum += squares[e];
    }
    if UNIT_POS < HALF_UNITS {
        low[UNIT_POS as usize] = sum;
    } else {
        high[(UNIT_POS - HALF_UNITS) as usize] = sum;
    }
    sync_cube();
    sum_runs(&mut low, &mut high, 1u32, HALF_UNITS);
    let inverse = 1.0f32 / f32::sqrt((low[0] + high[0]) / f32::cast_from(hidden) + epsilon);
    let mut c = UNIT_POS;
    while c < pieces {
        let at = (row_start + c) as usize;
        let value = row_value(x, delta, at, add);
        if comptime!(add) {
            sum_out[at] = value;
        }
        let normed = Vector::<f32, N>::cast_from(value) * Vector::new(inverse);
        out[at] = Vector::<F, N>::cast_from(normed * Vector::<f32, N>::cast_from(gamma[c as usize]));
        c += UNITS;
    }
}

/// Vector `at` of the rows: `x[at]`, or with `add`, `x[at] + delta[at]` in their type.
#[cube]
fn row_value<F: Float, N: Size>(
    x: &Array<Vector<F, N>>,
    delta: &Array<Vector<F, N>>,
    at: usize,
    #[comptime] add: bool,
) -> Vector<F, N> {
    let mut value = x[at];
    if comptime!(add) {
        value += delta[at];
    }
    value
}

/// `x` `[rows, hidden]` normalized by its rows' root mean square (plus `epsilon`) and scaled by
/// `gamma` `[hidden]`, in `x`'s float type (f16, bf16 or f32; `gamma` in the same).
///
/// # Panics
/// If the shapes or the types disagree, or the type is not one of those.
pub fn rms_norm<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    gamma: &Tensor<CubeF32<R, BT>, 1>,
    epsilon: f64,
) -> Tensor<CubeF32<R, BT>, 2> {
    launch(x, None, gamma, epsilon).0
}

/// `[x + delta, rms_norm(x + delta)]` for rows `x`, `delta` `[rows, hidden]` of one float type
/// (the sum in that type, as Burn's addition computes it), in one launch: a layer's residual
/// addition and the norm after it.
///
/// # Panics
/// As [`rms_norm`]'s, and if `delta` differs from `x` in shape or type.
pub fn add_rms_norm<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    delta: Tensor<CubeF32<R, BT>, 2>,
    gamma: &Tensor<CubeF32<R, BT>, 1>,
    epsilon: f64,
) -> [Tensor<CubeF32<R, BT>, 2>; 2] {
    assert_eq!(
        (x.dims(), x.dtype()),
        (delta.dims(), delta.dtype()),
        "add_rms_norm: rows and the residual to add differ"
    );
    let (normed, sum) = launch(x, Some(delta), gamma, epsilon);
    [sum.expect("written with a residual"), normed]
}

/// The norm of `x` (plus `delta`, then also returned) by [`rms_norm_kernel`].
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
#[allow(clippy::type_complexity)]
fn launch<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    delta: Option<Tensor<CubeF32<R, BT>, 2>>,
    gamma: &Tensor<CubeF32<R, BT>, 1>,
    epsilon: f64,
) -> (Tensor<CubeF32<R, BT>, 2>, Option<Tensor<CubeF32<R, BT>, 2>>) {
    let [rows, hidden] = x.dims();
    let dtype = x.dtype();
    assert_eq!(gamma.dims(), [hidden], "rms_norm: rows of {hidden}, gamma {:?}", gamma.dims());
    assert!(kernel_float(dtype) && gamma.dtype() == dtype, "rms_norm: x in {dtype:?}, gamma in {:?}", gamma.dtype());
    let add = delta.is_some();
    let x = float_arg(&x);
    let delta = delta.map(|d| float_arg(&d));
    let out = dense_output_of(&x, rows * hidden, dtype);
    let sum = add.then(|| dense_output_of(&x, rows * hidden, dtype));
    if rows > 0 && hidden > 0 {
        let vector = widest_vector(&x.client, dtype.size(), &[hidden]);
        // Without a residual, `x` stands in for the unread `delta` and `out` for the unwritten
        // `sum` (as `row_products` binds one output for the absent weights').
        let delta_arg = delta.as_ref().unwrap_or(&x).clone().into_array_arg();
        let sum_arg = sum.as_ref().unwrap_or(&out).clone().into_array_arg();
        // SAFETY: cube `r < rows` reads and writes row `r` at vectors `< hidden / vector` (both
        // loops' bound; `vector` divides `hidden`) of `x`, `delta`, `out` and, with a residual,
        // `sum` (each `rows · hidden`; `out` and `sum` allocated above; without one, `delta` is
        // `x`, and `sum` is `out` and not written as `sum`) and vectors `< hidden / vector` of
        // `gamma`; each shared array holds
        // `HALF_UNITS` entries, indexed by the unit below `HALF_UNITS` or by the unit minus
        // `HALF_UNITS` (units `< UNITS = 2 · HALF_UNITS`).
        unsafe {
            rms_norm_kernel::launch_unchecked(
                &x.client.clone(),
                CubeCount::Static(rows as u32, 1, 1),
                CubeDim::new_1d(UNITS),
                vector,
                x.into_array_arg(),
                delta_arg,
                float_arg(gamma).into_array_arg(),
                out.clone().into_array_arg(),
                sum_arg,
                (hidden / vector) as u32,
                hidden as u32,
                epsilon as f32,
                add,
                dtype.into(),
            )
        };
    }
    let rows_of = |t: CubeTensor<R>| {
        Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(t)).reshape([rows, hidden])
    };
    (rows_of(out), sum.map(rows_of))
}
