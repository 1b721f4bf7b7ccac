//! Products of a few activation rows with a weight matrix, `[rows, k] · [k, n]` for `rows ≤`
//! [`MAX_ROWS`]: a decode step's projections, bound by reading the weights once.
//!
//! Burn's matrix product tiles for many rows and reads an 8B model's f16 weights at a fraction
//! of the bandwidth when a decode step brings one. Here a cube owns 32 vectors of `N` adjacent
//! columns and a span of `k` (a split); its warps take the span's weight rows in turn, each lane
//! reading one vector per row (a warp reads 32 · N contiguous elements), accumulating in f32 for
//! every activation row; the warps' sums meet in shared memory, and a second small kernel adds
//! the splits' partial sums `[splits, rows, n]` and rounds them to the weights' type (one launch
//! where Burn's sum and cast took two: decode steps are bound by launching). Splits are sized so
//! that the grid holds several cubes per multiprocessor. The weights stay in their float type (f16, bf16 or f32);
//! activations are read in it too and converted to f32, and the result is rounded to it once.
//!
//! Error: the products and sums are f32's, in a different order than a matrix product's, so the
//! result differs from `x.matmul(w)` (computed in f32) by at most about `k · u_f32 · Σ|x||w|`
//! before the final rounding to the operands' type.

use burn::tensor::{DType, Tensor, TensorPrimitive};
use burn_cubecl::{kernel::into_contiguous, tensor::CubeTensor, BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{dense_output, dense_output_of, kernel_float, CubeF32};

/// Most activation rows the kernel takes; more go through the matrix product.
pub const MAX_ROWS: usize = 8;

/// Warps per cube, each taking every `WARPS`-th weight row of the cube's split.
const WARPS: u32 = 8;
// The final reduction lets warp `m` add up activation row `m`: every row needs a warp.
const _: () = assert!(MAX_ROWS as u32 <= WARPS);
/// Lanes per warp, each owning one vector of columns.
const LANES: u32 = 32;
/// Cubes the grid aims for per multiprocessor (or in all, where the count is unknown: 128).
const CUBES_PER_SM: u32 = 4;

/// Partial sums of the cube's split: `partial[split, row, column vector]`.
#[cube(launch_unchecked)]
fn row_product_kernel<F: Float, N: Size>(
    x: &Array<F>,
    w: &Array<Vector<F, N>>,
    partial: &mut Array<Vector<f32, N>>,
    k: u32,
    columns: u32,
    split_rows: u32,
    #[comptime] rows: u32,
    #[define(F)] _dtype: StorageType,
) {
    let column = CUBE_POS_X * LANES + UNIT_POS_X;
    let split = CUBE_POS_Y;
    let end = u32::min((split + 1) * split_rows, k);
    let mut sums = Array::<Vector<f32, N>>::new(rows as usize);
    #[unroll]
    for m in 0..rows {
        sums[m as usize] = Vector::new(0.0f32);
    }
    if column < columns {
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
    let mut shared = SharedMemory::<Vector<f32, N>>::new(comptime!((rows * WARPS * LANES) as usize));
    #[unroll]
    for m in 0..rows {
        shared[((m * WARPS + UNIT_POS_Y) * LANES + UNIT_POS_X) as usize] = sums[m as usize];
    }
    sync_cube();
    // Warp `m` adds up activation row `m`'s sums of the cube's warps (rows ≤ WARPS).
    let m = UNIT_POS_Y;
    if m < rows && column < columns {
        let mut total = Vector::<f32, N>::new(0.0f32);
        #[unroll]
        for warp in 0..WARPS {
            total += shared[((m * WARPS + warp) * LANES + UNIT_POS_X) as usize];
        }
        partial[((split * rows + m) * columns + column) as usize] = total;
    }
}

/// The widest vector of `elem_bytes`-byte elements the device loads well that divides `n`.
fn vector_size<R: CubeRuntime>(client: &ComputeClient<R>, elem_bytes: usize, n: usize) -> usize {
    client.io_optimized_vector_sizes(elem_bytes).filter(|v| n.is_multiple_of(*v)).max().unwrap_or(1)
}

/// Splits of `k` for `column_cubes` cubes of columns: enough for `CUBES_PER_SM` cubes per
/// multiprocessor, at least `WARPS` weight rows each.
fn splits_for(column_cubes: u32, k: u32, sms: Option<u32>) -> u32 {
    let target = sms.map_or(128, |sms| sms * CUBES_PER_SM);
    target.div_ceil(column_cubes).clamp(1, k.div_ceil(WARPS).max(1))
}

/// `x` `[rows, k]` times `w` `[k, n]` in their float type (the same for both): this kernel for
/// `rows ≤ MAX_ROWS`, [`prompt_product`](super::prompt_product) for more rows, Burn's matrix
/// product for operands of different types.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn row_product<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<CubeF32<R, BT>, 2>,
    w: Tensor<CubeF32<R, BT>, 2>,
) -> Tensor<CubeF32<R, BT>, 2> {
    let ([rows, k], [k_w, n]) = (x.dims(), w.dims());
    assert_eq!(k, k_w, "row_product: x is [{rows}, {k}], w is [{k_w}, {n}]");
    let dtype = w.dtype();
    if rows > MAX_ROWS {
        return super::prompt_product(x, w);
    }
    if rows == 0 || x.dtype() != dtype || !kernel_float(dtype) {
        return x.matmul(w);
    }
    let x_arg = into_contiguous(x.into_primitive().tensor());
    let w_arg = into_contiguous(w.into_primitive().tensor());
    let client = w_arg.client.clone();
    let vector = vector_size(&client, dtype.size(), n);
    let columns = (n / vector) as u32;
    let column_cubes = columns.div_ceil(LANES);
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    let splits = splits_for(column_cubes, k as u32, sms);
    let split_rows = (k as u32).div_ceil(splits);
    let partial = dense_output::<R, f32>(&w_arg, splits as usize * rows * n);
    // SAFETY: cube (c, s) has lanes of columns `c · LANES + lane`, guarded `< columns` before
    // every access of `w` (`[k, columns]` vectors, rows `< min((s + 1) · split_rows, k)`) and of
    // `partial` (`[splits, rows, columns]` vectors, allocated above, `s < splits`); `x` is read
    // at rows `m < rows` and columns `r < k` of its contiguous `[rows, k]`; shared memory holds
    // `rows · WARPS · LANES` vectors, indexed by `m < rows`, warp `< WARPS`, lane `< LANES`.
    unsafe {
        row_product_kernel::launch_unchecked(
            &client,
            CubeCount::Static(column_cubes, splits, 1),
            CubeDim::new_2d(LANES, WARPS),
            vector,
            x_arg.into_array_arg(),
            w_arg.into_array_arg(),
            partial.clone().into_array_arg(),
            k as u32,
            columns,
            split_rows,
            rows as u32,
            dtype.into(),
        )
    };
    let out = match (splits, dtype) {
        (1, DType::F32) => partial,
        _ => sum_splits(partial, splits, rows * n, dtype),
    };
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([rows, n])
}

/// Units per cube of [`sum_splits_kernel`].
const SUM_UNITS: u32 = 256;

/// `out[i] = Σ_s partial[s · len + i]`, rounded to `out`'s type once.
#[cube(launch_unchecked)]
fn sum_splits_kernel<F: Float>(
    partial: &Array<f32>,
    out: &mut Array<F>,
    splits: u32,
    len: u32,
    #[define(F)] _dtype: StorageType,
) {
    let i = ABSOLUTE_POS as u32;
    if i >= len {
        terminate!();
    }
    let mut total = 0.0f32;
    for s in 0..splits {
        total += partial[(s * len + i) as usize];
    }
    out[i as usize] = F::cast_from(total);
}

/// The splits' partial sums `[splits, len]` (f32) added up and rounded to `dtype`: one launch
/// where Burn's sum and cast take two or more.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
fn sum_splits<R: CubeRuntime>(partial: CubeTensor<R>, splits: u32, len: usize, dtype: DType) -> CubeTensor<R> {
    let out = dense_output_of(&partial, len, dtype);
    // SAFETY: unit `i < len` (the kernel's guard) reads `partial[s · len + i]` for `s < splits`
    // (`splits · len` entries, the row kernel's output) and writes `out[i]` (`len`, allocated
    // above).
    unsafe {
        sum_splits_kernel::launch_unchecked(
            &partial.client.clone(),
            CubeCount::Static((len as u32).div_ceil(SUM_UNITS), 1, 1),
            CubeDim::new_1d(SUM_UNITS),
            partial.into_array_arg(),
            out.clone().into_array_arg(),
            splits,
            len as u32,
            dtype.into(),
        )
    };
    out
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
