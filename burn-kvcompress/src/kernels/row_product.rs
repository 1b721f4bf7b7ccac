//! Products of a few activation rows with a weight matrix, `[rows, k] · [k, n]` for `rows ≤`
//! [`MAX_ROWS`] (up to [`MMA_MAX_ROWS`](super::MMA_MAX_ROWS) on tensor cores): a decode step's
//! projections, bound by reading the weights once.
//!
//! Burn's matrix product tiles for many rows and reads an 8B model's f16 weights at a fraction
//! of the bandwidth when a decode step brings one. Here a cube owns 32 vectors of `N` adjacent
//! columns and a span of `k` (a split); its warps take the span's weight rows in turn, each lane
//! reading one vector per row (a warp reads 32 · N contiguous elements), accumulating in f32 for
//! every activation row; the warps' sums meet in shared memory, and a second small kernel adds
//! the splits' partial sums `[splits, rows, n]` and rounds them to the weights' type (one launch
//! where Burn's sum and cast took two: decode steps are bound by launching). Splits are sized so
//! that the grid holds several cubes per multiprocessor. The weights stay in their float type
//! (f16, bf16 or f32); activations are read in it too and converted to f32, and the result is
//! rounded to it once.
//!
//! With 8 rows this kernel reads a Llama-3-8B layer's gate and up weights at 1.3 TB/s, against
//! 4.1 with one (H200): each weight takes 8 products in f32. Where the device has f16 or bf16
//! warp products, 2 to 32 rows run on tensor cores instead ([`row_mma`](super::row_mma)), at
//! 2.8–3.6 TB/s for the layer's products at 8 rows, into the same partial sums.
//!
//! Error: the products and sums are f32's, in a different order than a matrix product's, so the
//! result differs from `x.matmul(w)` (computed in f32) by at most about `k · u_f32 · Σ|x||w|`
//! before the final rounding to the operands' type.

use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{
    dense_arg, dense_output, dense_output_of, kernel_float,
    row_mma::{row_mma_applies, row_products_mma},
    weight_slots::{cube_weight, WeightSlots},
    widest_vector, CubeF32,
};

/// Most activation rows the CUDA-core kernel takes; more go through the tensor-core kernel where
/// it applies (up to [`MMA_MAX_ROWS`](super::MMA_MAX_ROWS)), else through the matrix product.
pub const MAX_ROWS: usize = 8;

/// Warps per cube, each taking every `WARPS`-th weight row of the cube's split.
const WARPS: u32 = 8;
// The final reduction lets warp `m` add up activation row `m`: every row needs a warp.
const _: () = assert!(MAX_ROWS as u32 <= WARPS);
/// Lanes per warp, each owning one vector of columns.
const LANES: u32 = 32;
/// Cubes the grid aims for per multiprocessor (or in all, where the count is unknown: 128).
const CUBES_PER_SM: u32 = 4;

/// Most weights one launch multiplies the rows by ([`row_products`]): a layer's query, key and
/// value projections.
pub const MAX_WEIGHTS: usize = 3;

/// Partial sums of the cube's split: `partial[split, row, column vector]`, the columns of the
/// weights concatenated. Weight `i` has `columns_i` column vectors, taken by the cubes from
/// `first_cube_i` (`first_cube_0` = 0) and written from column vector `columns_0 + … +
/// columns_(i−1)`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn row_product_kernel<F: Float, N: Size>(
    x: &Array<F>,
    w_0: &Array<Vector<F, N>>,
    w_1: &Array<Vector<F, N>>,
    w_2: &Array<Vector<F, N>>,
    partial: &mut Array<Vector<f32, N>>,
    k: u32,
    columns_0: u32,
    columns_1: u32,
    columns_2: u32,
    first_cube_1: u32,
    first_cube_2: u32,
    split_rows: u32,
    #[comptime] rows: u32,
    #[define(F)] _dtype: StorageType,
) {
    let total = columns_0 + columns_1 + columns_2;
    let split = CUBE_POS_Y;
    let mut sums = Array::<Vector<f32, N>>::new(rows as usize);
    #[unroll]
    for m in 0..rows {
        sums[m as usize] = Vector::new(0.0f32);
    }
    let weight = cube_weight(columns_0, columns_1, columns_2, first_cube_1, first_cube_2);
    let columns = weight.size;
    let column = weight.cube * LANES + UNIT_POS_X;
    let at = weight.offset + column;
    if weight.slot == 0 {
        accumulate(x, w_0, &mut sums, column, columns, k, split, split_rows, rows);
    } else if weight.slot == 1 {
        accumulate(x, w_1, &mut sums, column, columns, k, split, split_rows, rows);
    } else {
        accumulate(x, w_2, &mut sums, column, columns, k, split, split_rows, rows);
    }
    let mut shared = SharedMemory::<Vector<f32, N>>::new(comptime!((rows * WARPS * LANES) as usize));
    #[unroll]
    for m in 0..rows {
        shared[((m * WARPS + UNIT_POS_Y) * LANES + UNIT_POS_X) as usize] = sums[m as usize];
    }
    sync_cube();
    // Warp `m` adds up activation row `m`'s sums of the cube's warps (rows ≤ WARPS).
    let m = UNIT_POS_Y;
    if m < rows && column < columns {
        let mut total_sum = Vector::<f32, N>::new(0.0f32);
        #[unroll]
        for warp in 0..WARPS {
            total_sum += shared[((m * WARPS + warp) * LANES + UNIT_POS_X) as usize];
        }
        partial[((split * rows + m) * total + at) as usize] = total_sum;
    }
}

/// Adds the products of the activation rows `x` with column vector `column` (below `columns`)
/// of `w` `[k, columns]` over the weight rows of split `split` that the calling warp takes to
/// `sums` (one per activation row).
#[allow(clippy::too_many_arguments)]
#[cube]
fn accumulate<F: Float, N: Size>(
    x: &Array<F>,
    w: &Array<Vector<F, N>>,
    sums: &mut Array<Vector<f32, N>>,
    column: u32,
    columns: u32,
    k: u32,
    split: u32,
    split_rows: u32,
    #[comptime] rows: u32,
) {
    if column < columns {
        let end = u32::min((split + 1) * split_rows, k);
        let mut r = split * split_rows + UNIT_POS_Y;
        while r < end {
            let weights = Vector::<f32, N>::cast_from(w[(r * columns + column) as usize]);
            #[unroll]
            for m in 0..rows {
                let activation = f32::cast_from(x[(m * k + r) as usize]);
                sums[m as usize] += weights * Vector::new(activation);
            }
            r += WARPS;
        }
    }
}

/// Splits of `k` for `column_cubes` cubes of columns: enough for `CUBES_PER_SM` cubes per
/// multiprocessor, at least `WARPS` weight rows each.
fn splits_for(column_cubes: u32, k: u32, sms: Option<u32>) -> u32 {
    let target = sms.map_or(128, |sms| sms * CUBES_PER_SM);
    target.div_ceil(column_cubes).clamp(1, k.div_ceil(WARPS).max(1))
}

/// `x` `[rows, k]` times `w` `[k, n]` in their float type (the same for both): the tensor-core
/// kernel where [`row_mma_applies`], else this module's for `rows ≤ MAX_ROWS`,
/// [`prompt_product`](super::prompt_product) for more rows, Burn's matrix product for operands of
/// different types.
pub fn row_product<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    w: Tensor<CubeF32<R, BT>, 2>,
) -> Tensor<CubeF32<R, BT>, 2> {
    let [out] = row_products(x, [w]);
    out
}

/// `x` `[rows, k]` times each weight `[k, n_i]` of `weights` (up to [`MAX_WEIGHTS`], all of
/// `x`'s float type), in that type: one launch for all of them (and one for the splits' sums)
/// on tensor cores where [`row_mma_applies`], else on CUDA cores where `rows ≤ MAX_ROWS`: a
/// decode step's projections sharing their input (a layer's query, key and value projections;
/// its gate and up projections). Otherwise each product goes to
/// [`prompt_product`](super::prompt_product) (more rows) or Burn's matrix product (mixed types).
///
/// # Panics
/// If more than [`MAX_WEIGHTS`] weights are given or a weight has other than `k` rows.
pub fn row_products<R: CubeRuntime, BT: BoolElement, const W: usize>(
    x: Tensor<CubeF32<R, BT>, 2>,
    weights: [Tensor<CubeF32<R, BT>, 2>; W],
) -> [Tensor<CubeF32<R, BT>, 2>; W] {
    assert!((1..=MAX_WEIGHTS).contains(&W), "row_products: {W} weights, 1 to {MAX_WEIGHTS} per launch");
    let [rows, k] = x.dims();
    for w in &weights {
        assert_eq!(w.dims()[0], k, "row_products: x is [{rows}, {k}], a weight {:?}", w.dims());
    }
    let dtype = weights[0].dtype();
    let widths = weights.each_ref().map(|w| w.dims()[1]);
    let one_type = x.dtype() == dtype && weights.iter().all(|w| w.dtype() == dtype);
    let on_tensor_cores = one_type && {
        let client = x.clone().into_primitive().tensor().client;
        row_mma_applies(rows, k, &widths, dtype, client.properties())
    };
    let on_cuda_cores = one_type && rows > 0 && rows <= MAX_ROWS && kernel_float(dtype);
    if !on_tensor_cores && !on_cuda_cores {
        return weights.map(|w| match rows > MAX_ROWS {
            true => super::prompt_product(x.clone(), w),
            false => x.clone().matmul(w),
        });
    }
    let x_arg = dense_arg(x.into_primitive().tensor());
    let w_args = weights.map(|w| dense_arg(w.into_primitive().tensor()));
    let (partial, splits) = match on_tensor_cores {
        true => row_products_mma(x_arg, &w_args, rows, k, &widths),
        false => core_partials(x_arg, &w_args, rows, k, &widths),
    };
    let outputs = match (W, splits, dtype) {
        (1, 1, DType::F32) => vec![partial],
        _ => sum_splits(partial, splits, rows, &widths, dtype),
    };
    let mut outputs = outputs.into_iter();
    widths.map(|n| {
        let out = outputs.next().expect("one output per weight");
        Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([rows, n])
    })
}

/// The splits' partial sums `[splits, rows, Σ widths]` (f32) of `x` `[rows, k]` times the
/// weights `w_args` (`[k, width_i]`, dense, of `x`'s type) by [`row_product_kernel`] on CUDA
/// cores, and the number of splits.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
fn core_partials<R: CubeRuntime>(
    x_arg: CubeTensor<R>,
    w_args: &[CubeTensor<R>],
    rows: usize,
    k: usize,
    widths: &[usize],
) -> (CubeTensor<R>, u32) {
    let client = x_arg.client.clone();
    let dtype = x_arg.dtype;
    let vector = widest_vector(&client, dtype.size(), widths);
    let slots = WeightSlots::new(widths.iter().map(|n| (n / vector) as u32), LANES);
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    let splits = splits_for(slots.column_cubes(), k as u32, sms);
    let split_rows = (k as u32).div_ceil(splits);
    let n_total: usize = widths.iter().sum();
    let partial = dense_output::<R, f32>(&x_arg, splits as usize * rows * n_total);
    let [first_cube_1, first_cube_2] = slots.first_cubes();
    // SAFETY: cube (c, s) takes weight `i` (the cubes from `first_cube_i`, `cubes_i` of them:
    // `columns_i` vectors in lanes of `LANES`) at its column vector `(c − first_cube_i) · LANES +
    // lane`, guarded `< columns_i` before every access of `w_i` (`[k, columns_i]` vectors; rows
    // `< min((s + 1) · split_rows, k)`) and of `partial` (`[splits, rows, Σ columns_i]` vectors,
    // allocated above, `s < splits`, the weight's columns from `columns_0 + … + columns_(i−1)`);
    // absent weights have no columns and no cubes. `x` is read at rows `m < rows` and columns `r
    // < k` of its dense `[rows, k]`; shared memory holds `rows · WARPS · LANES` vectors, indexed
    // by `m < rows`, warp `< WARPS`, lane `< LANES`.
    unsafe {
        row_product_kernel::launch_unchecked(
            &client,
            CubeCount::Static(slots.column_cubes(), splits, 1),
            CubeDim::new_2d(LANES, WARPS),
            vector,
            x_arg.into_array_arg(),
            WeightSlots::arg(w_args, 0),
            WeightSlots::arg(w_args, 1),
            WeightSlots::arg(w_args, 2),
            partial.clone().into_array_arg(),
            k as u32,
            slots.sizes[0],
            slots.sizes[1],
            slots.sizes[2],
            first_cube_1,
            first_cube_2,
            split_rows,
            rows as u32,
            dtype.into(),
        )
    };
    (partial, splits)
}

/// Units per cube of [`sum_splits_kernel`].
const SUM_UNITS: u32 = 256;

/// `out_i[row, c] = Σ_s partial[s, row, first_i + c]` (the splits' sums of weight `i`'s columns,
/// which start at column `first_i` of the concatenated row of `width` columns), rounded to the
/// outputs' type once; unit `j < rows · width` takes row `j / width`, column `j mod width`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn sum_splits_kernel<F: Float>(
    partial: &Array<f32>,
    out_0: &mut Array<F>,
    out_1: &mut Array<F>,
    out_2: &mut Array<F>,
    splits: u32,
    width: u32,
    first_1: u32,
    first_2: u32,
    len: u32,
    #[define(F)] _dtype: StorageType,
) {
    let j = ABSOLUTE_POS as u32;
    if j >= len {
        terminate!();
    }
    let mut total = 0.0f32;
    for s in 0..splits {
        total += partial[(s * len + j) as usize];
    }
    let (row, column) = (j / width, j % width);
    let value = F::cast_from(total);
    if column < first_1 {
        out_0[(row * first_1 + column) as usize] = value;
    } else if column < first_2 {
        out_1[(row * (first_2 - first_1) + column - first_1) as usize] = value;
    } else {
        out_2[(row * (width - first_2) + column - first_2) as usize] = value;
    }
}

/// The splits' partial sums `[splits, rows, Σ widths]` (f32) added up, rounded to `dtype` and
/// parted into one `[rows, width_i]` output per weight: one launch where Burn's sum, cast and
/// slices take several.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub(super) fn sum_splits<R: CubeRuntime>(
    partial: CubeTensor<R>,
    splits: u32,
    rows: usize,
    widths: &[usize],
    dtype: DType,
) -> Vec<CubeTensor<R>> {
    let outputs: Vec<CubeTensor<R>> = widths.iter().map(|n| dense_output_of(&partial, rows * n, dtype)).collect();
    let width: usize = widths.iter().sum();
    let first_1 = widths[0];
    let first_2 = first_1 + widths.get(1).copied().unwrap_or(0);
    let len = rows * width;
    // SAFETY: unit `j < len = rows · width` (the kernel's guard) reads `partial[s · len + j]`
    // for `s < splits` (`splits · len` entries, the row kernel's output) and writes one element
    // of the output of the columns `j mod width` falls in: `out_i[row · width_i + column −
    // first_i]` with `row < rows` and `0 ≤ column − first_i < width_i` (`rows · width_i` each,
    // allocated above); an absent weight has no columns, so its stand-in is never written.
    unsafe {
        sum_splits_kernel::launch_unchecked(
            &partial.client.clone(),
            CubeCount::Static((len as u32).div_ceil(SUM_UNITS), 1, 1),
            CubeDim::new_1d(SUM_UNITS),
            partial.into_array_arg(),
            WeightSlots::arg(&outputs, 0),
            WeightSlots::arg(&outputs, 1),
            WeightSlots::arg(&outputs, 2),
            splits,
            width as u32,
            first_1 as u32,
            first_2 as u32,
            len as u32,
            dtype.into(),
        )
    };
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_device_and_keep_a_row_per_warp() {
        // A 4096-wide projection in f16 vectors of 8: 512 column vectors, 16 cubes of columns.
        assert_eq!(splits_for(16, 4096, Some(132)), 33);
        // The output head (128256 columns): enough cubes without splitting.
        assert_eq!(splits_for(501, 4096, Some(132)), 2);
        assert_eq!(splits_for(2000, 4096, Some(132)), 1);
        // A short k keeps at least WARPS rows per split; no device count: 128 cubes.
        assert_eq!(splits_for(1, 20, Some(132)), 3);
        assert_eq!(splits_for(4, 4096, None), 32);
    }
}
