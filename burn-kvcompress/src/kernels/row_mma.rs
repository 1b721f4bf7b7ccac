//! Products of a few activation rows with weight matrices on tensor cores: the decode step's
//! projections at batch 2–8, where the CUDA-core kernel ([`row_products`](super::row_products))
//! spends more instructions per weight byte than the loads can hide.
//!
//! A weight `[k, n]` lies row-major, so the two f16 of any 32-bit word are two columns of one
//! row, while an `mma` register holds two steps of its depth. The kernel makes the depth carry
//! the column's parity: one `16 × 8 × 16` product takes 8 weight rows, its depth `κ = 2ρ + j`
//! row slot `ρ` and parity `j`, its `A` operand (`m`: 16 pairs of columns) exactly the words the
//! lanes load, and it runs twice, once against activations placed at parity 0 (`B` = `(x, 0)`),
//! once at parity 1 (`(0, x)`), giving the even and the odd columns. The activation rows are the
//! products' `n` (up to 8; missing rows are zeros). No staging in shared memory: lane `(g, t)`
//! (`g = lane / 4`, `t = lane mod 4`) loads 16-byte pieces of rows `2t` and `2t + 1` of the step
//! at columns `8g ..` and `64 + 8g ..` of its warp's block of 128 (a warp's load covers four rows
//! of 128 contiguous bytes), and the activation pair `x[g, 2t .. 2t + 2]` of the step: row slot
//! `ρ = t` is weight row `2t`, slot `t + 4` row `2t + 1`, so that the pair is one word. Product
//! `i` of the four a piece feeds takes the piece's word `i`.
//!
//! A cube's warps take the steps of its split of `k` in turn, [`UNROLL`] steps' loads in flight
//! per warp, add up their sums through shared memory, and write the split's partial sums
//! `[splits, rows, Σ n]` (f32) that [`sum_splits`](super::row_product) adds and rounds.
//!
//! Error: the products of f16 (or bf16) operands are exact; the tensor cores add them in f32,
//! in another order than a matrix product, so the result differs from the exact product by at
//! most about `k · u_f32 · Σ|x||w|` before the final rounding to the operands' type.

use burn::tensor::DType;
use burn_cubecl::{
    cubecl::{
        features::MmaConfig,
        ir::{DeviceProperties, ElemType, FloatKind, StorageType},
    },
    tensor::CubeTensor,
    CubeRuntime,
};
use cubecl::{cmma::MmaDefinition, prelude::*};

use super::{
    dense_output,
    row_product::{MAX_ROWS, MAX_WEIGHTS},
    warp_mma::{Halves, Pair, WARP},
    weight_slots::{cube_weight, WeightSlots},
};

/// Elements of a 16-byte piece of a weight row.
const PIECE: u32 = 8;
/// Columns of a warp's block: 8 lanes of pieces, twice (the products' 16 pairs of columns).
const BLOCK_COLUMNS: u32 = 128;
/// Weight rows of one step: the products' depth of 16 holds 8 rows, each at both parities.
const STEP_ROWS: u32 = 8;
/// Fewest rows the kernel takes. One row is the CUDA-core kernel's, which its instructions do
/// not bind there: it reads an 8B model's output head at 4.3 TB/s where this kernel reaches 4.0
/// (H200, `row_bench --rows 1`), and a batch-1 step takes 6.95 ms with it against 7.32.
pub const MMA_MIN_ROWS: usize = 2;
/// Warps per cube, each taking every `WARPS`-th step of the cube's split.
const WARPS: u32 = 4;
/// Steps a warp loads before it multiplies them: 16 pieces (256 bytes) a lane in flight.
const UNROLL: u32 = 4;
/// Cubes the grid aims for per multiprocessor (or in all, where the count is unknown: 128).
const CUBES_PER_SM: u32 = 4;
/// Floats between two lanes' sums in the cube's reduction (32, padded so that a warp's stores
/// of one sum fall in distinct banks).
const LANE_SUMS: u32 = 33;
/// Sums a lane holds: 2 activation rows × 2 halves of the block × 8 columns.
const SUMS: u32 = 32;

/// Whether the tensor-core kernel (which [`row_products`](super::row_products) then runs) takes
/// `[rows, k]` times weights `[k, n_i]` of `widths` in `dtype` on a device with `properties`: f16
/// or bf16, [`MMA_MIN_ROWS`] to [`MAX_ROWS`] rows, `k` a multiple of 8 and every width a non-zero
/// multiple of 8 (whole pieces and steps), at most [`MAX_WEIGHTS`] weights, and a device with `16
/// × 8 × 16` warp products of `dtype` into f32.
pub fn row_mma_applies(rows: usize, k: usize, widths: &[usize], dtype: DType, properties: &DeviceProperties) -> bool {
    let kind = match dtype {
        DType::F16 => FloatKind::F16,
        DType::BF16 => FloatKind::BF16,
        _ => return false,
    };
    let operand: StorageType = ElemType::Float(kind).into();
    let product = MmaConfig {
        a_type: operand,
        b_type: operand,
        cd_type: ElemType::Float(FloatKind::F32).into(),
        m: 16,
        n: 8,
        k: 16,
    };
    (MMA_MIN_ROWS..=MAX_ROWS).contains(&rows)
        && k > 0
        && k.is_multiple_of(STEP_ROWS as usize)
        && (1..=MAX_WEIGHTS).contains(&widths.len())
        && widths.iter().all(|&n| n > 0 && n.is_multiple_of(PIECE as usize))
        && properties.features.matmul.mma.contains(&product)
}

/// Partial sums of the cube's split of `k`: `partial[split, row, column]`, the weights' columns
/// concatenated. Weight `i` (`[k, width_i]` in pieces) is taken by the cubes from `first_cube_i`
/// (`first_cube_0` = 0), a block of [`BLOCK_COLUMNS`] each, and written from column `width_0 + …
/// + width_(i−1)`; `x` is `[rows, k]` in pairs.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
fn row_mma_kernel<E: Float, N: Size>(
    x: &Array<Halves<E>>,
    w_0: &Array<Vector<E, N>>,
    w_1: &Array<Vector<E, N>>,
    w_2: &Array<Vector<E, N>>,
    partial: &mut Array<f32>,
    rows: u32,
    k: u32,
    width_0: u32,
    width_1: u32,
    width_2: u32,
    first_cube_1: u32,
    first_cube_2: u32,
    split_steps: u32,
    #[define(E)] _dtype: StorageType,
) {
    let mut sums = Array::<Pair>::new(comptime!((SUMS / 2) as usize));
    #[unroll]
    for i in 0..comptime!(SUMS / 2) {
        sums[i as usize] = Pair::new(0.0);
    }
    let weight = cube_weight(width_0, width_1, width_2, first_cube_1, first_cube_2);
    let span = Span { block: weight.cube * BLOCK_COLUMNS, width: weight.size, rows, k, split_steps };
    if weight.slot == 0 {
        accumulate(x, w_0, &mut sums, &span);
    } else if weight.slot == 1 {
        accumulate(x, w_1, &mut sums, &span);
    } else {
        accumulate(x, w_2, &mut sums, &span);
    }
    let total = width_0 + width_1 + width_2;
    write_split(&sums, partial, &span, weight.offset, total);
}

/// What a warp's loop needs of its cube: the block's first column `block` of a weight of `width`
/// columns, `rows` activation rows of `k`, and the steps per split.
#[derive(CubeType, Clone, Copy)]
struct Span {
    block: u32,
    width: u32,
    rows: u32,
    k: u32,
    split_steps: u32,
}

/// Adds the calling warp's steps of the cube's split of `w` `[k, width]` (in pieces) times `x`
/// to `sums`: [`UNROLL`] steps at a time, then the rest one at a time.
#[cube]
fn accumulate<E: Float, N: Size>(x: &Array<Halves<E>>, w: &Array<Vector<E, N>>, sums: &mut Array<Pair>, span: &Span) {
    let steps = span.k / STEP_ROWS;
    let end = u32::min((CUBE_POS_Y + 1) * span.split_steps, steps);
    let mut step = CUBE_POS_Y * span.split_steps + UNIT_POS_Y;
    while step + (UNROLL - 1) * WARPS < end {
        add_steps(x, w, sums, span, step, UNROLL);
        step += UNROLL * WARPS;
    }
    while step < end {
        add_steps(x, w, sums, span, step, 1u32);
        step += WARPS;
    }
}

/// Adds `count` steps from `first` (every [`WARPS`]-th) to the calling lane's `sums`, all their
/// loads issued before the first product. A lane's pieces past the weight's width are loaded
/// from its last piece (in bounds, never written); activation rows past `rows` are zeros.
#[cube]
fn add_steps<E: Float, N: Size>(
    x: &Array<Halves<E>>,
    w: &Array<Vector<E, N>>,
    sums: &mut Array<Pair>,
    span: &Span,
    first: u32,
    #[comptime] count: u32,
) {
    let lane = UNIT_POS_X;
    let (g, t) = (lane / 4, lane % 4);
    let pieces = span.width / PIECE;
    let low = u32::min(span.block / PIECE + g, pieces - 1);
    let high = u32::min(span.block / PIECE + BLOCK_COLUMNS / (2 * PIECE) + g, pieces - 1);
    let x_row = u32::min(g, span.rows - 1);
    let mut loaded = Array::<Vector<E, N>>::new(comptime!((4 * count) as usize));
    let mut pairs = Array::<Halves<E>>::new(count as usize);
    #[unroll]
    for u in 0..count {
        let step = first + u * WARPS;
        let row = step * STEP_ROWS + 2 * t;
        loaded[(4 * u) as usize] = w[(row * pieces + low) as usize];
        loaded[(4 * u + 1) as usize] = w[(row * pieces + high) as usize];
        loaded[(4 * u + 2) as usize] = w[((row + 1) * pieces + low) as usize];
        loaded[(4 * u + 3) as usize] = w[((row + 1) * pieces + high) as usize];
        pairs[u as usize] = x[(x_row * (span.k / 2) + step * (STEP_ROWS / 2) + t) as usize];
    }
    let zero = E::cast_from(0.0f32);
    let live = g < span.rows;
    #[unroll]
    for u in 0..count {
        let pair = pairs[u as usize];
        let x_first = select(live, pair[0], zero);
        let x_second = select(live, pair[1], zero);
        #[unroll]
        for parity in 0..2u32 {
            // B: slot t (row 2t) then slot t + 4 (row 2t + 1), each at this parity.
            let mut b = Array::<Halves<E>>::new(2usize);
            let mut low_slot = Halves::<E>::new(zero);
            let mut high_slot = Halves::<E>::new(zero);
            low_slot[parity as usize] = x_first;
            high_slot[parity as usize] = x_second;
            b[0] = low_slot;
            b[1] = high_slot;
            #[unroll]
            for i in 0..comptime!(PIECE / 2) {
                let mut a = Array::<Halves<E>>::new(4usize);
                #[unroll]
                for r in 0..4u32 {
                    let piece = loaded[(4 * u + r) as usize];
                    let mut word = Halves::<E>::new(zero);
                    word[0] = piece[(2 * i) as usize];
                    word[1] = piece[(2 * i + 1) as usize];
                    a[r as usize] = word;
                }
                add_product(&a, &b, sums, 2 * i + parity);
            }
        }
    }
}

/// Adds the product of `a` and `b` to the accumulator `product` of `sums` (two pairs each).
#[cube]
fn add_product<E: Float>(a: &Array<Halves<E>>, b: &Array<Halves<E>>, sums: &mut Array<Pair>, product: u32) {
    let mma = MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
    let mut acc = Array::<Pair>::new(2usize);
    acc[0] = sums[(2 * product) as usize];
    acc[1] = sums[(2 * product + 1) as usize];
    mma.execute_inplace(a, b, &mut acc);
    sums[(2 * product) as usize] = acc[0];
    sums[(2 * product + 1) as usize] = acc[1];
}

/// Adds up the cube's warps' `sums` through shared memory and writes them as the split's partial
/// sums. Accumulator `2i + j` of lane `(g, t)` holds, in pair `h` (the block's half), activation
/// rows `2t`, `2t + 1` at column `64h + 8g + 2i + j` of the block; warp `q` then writes row `2t
/// + q / 2`, half `q mod 2` (8 contiguous columns a lane).
#[cube]
fn write_split(sums: &Array<Pair>, partial: &mut Array<f32>, span: &Span, first_column: u32, total: u32) {
    let lane = UNIT_POS_X;
    let warp = UNIT_POS_Y;
    let (g, t) = (lane / 4, lane % 4);
    let mut shared = SharedMemory::<f32>::new(comptime!((WARPS * WARP * LANE_SUMS) as usize));
    let own = (warp * WARP + lane) * LANE_SUMS;
    #[unroll]
    for product in 0..comptime!(SUMS / 4) {
        #[unroll]
        for half in 0..2u32 {
            let pair = sums[(2 * product + half) as usize];
            #[unroll]
            for r in 0..2u32 {
                shared[(own + (2 * r + half) * PIECE + product) as usize] = pair[r as usize];
            }
        }
    }
    sync_cube();
    let (r, half) = (warp / 2, warp % 2);
    let row = 2 * t + r;
    let column = span.block + half * (BLOCK_COLUMNS / 2) + g * PIECE;
    if row < span.rows && column < span.width {
        let at = (CUBE_POS_Y * span.rows + row) * total + first_column + column;
        #[unroll]
        for e in 0..PIECE {
            let mut sum = 0.0f32;
            #[unroll]
            for w in 0..WARPS {
                sum += shared[((w * WARP + lane) * LANE_SUMS + warp * PIECE + e) as usize];
            }
            partial[(at + e) as usize] = sum;
        }
    }
}

/// Splits of `k` for `column_cubes` cubes of columns: as many as keep the grid within
/// [`CUBES_PER_SM`] cubes per multiprocessor (one wave: a second one of a few cubes would take
/// as long as the first), at least one, at most one per warp's step.
fn splits_for(column_cubes: u32, steps: u32, sms: Option<u32>) -> u32 {
    let target = sms.map_or(128, |sms| sms * CUBES_PER_SM);
    (target / column_cubes).clamp(1, steps.div_ceil(WARPS).max(1))
}

/// The splits' partial sums `[splits, rows, Σ widths]` (f32) of `x` `[rows, k]` times the
/// weights `w_args` (`[k, width_i]`, dense, of `x`'s type), and the number of splits; the caller
/// has checked [`row_mma_applies`].
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub(super) fn row_products_mma<R: CubeRuntime>(
    x: CubeTensor<R>,
    w_args: &[CubeTensor<R>],
    rows: usize,
    k: usize,
    widths: &[usize],
) -> (CubeTensor<R>, u32) {
    let client = x.client.clone();
    let slots = WeightSlots::new(widths.iter().map(|&n| n as u32), BLOCK_COLUMNS);
    let steps = k as u32 / STEP_ROWS;
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    let splits = splits_for(slots.column_cubes(), steps, sms);
    let split_steps = steps.div_ceil(splits);
    let total: usize = widths.iter().sum();
    let partial = dense_output::<R, f32>(&x, splits as usize * rows * total);
    let [first_cube_1, first_cube_2] = slots.first_cubes();
    let dtype = x.dtype;
    // SAFETY: cube (c, s) takes weight `i` (cubes from `first_cube_i`, `cubes_i` of them, one block
    // of 128 columns each; absent weights have no cubes) and steps `s · split_steps ..
    // min((s + 1) · split_steps, steps)` of 8 rows (`k = 8 · steps`, checked by
    // `row_mma_applies`): `w_i` (`[k, width_i / 8]` pieces) is read at rows below `k` and pieces
    // clamped below `width_i / 8`; `x` (`[rows, k / 2]` pairs, k even) at row `min(g, rows − 1)`,
    // pair below `k / 2`. The writes to `partial` (`[splits, rows, total]`, allocated above) are
    // guarded by `row < rows` and `column < width_i` (8 columns from a multiple of 8: within the
    // width); shared memory holds `WARPS · 32 · LANE_SUMS` floats, indexed below that.
    unsafe {
        row_mma_kernel::launch_unchecked(
            &client,
            CubeCount::Static(slots.column_cubes(), splits, 1),
            CubeDim::new_2d(WARP, WARPS),
            PIECE as usize,
            x.into_array_arg(),
            WeightSlots::arg(w_args, 0),
            WeightSlots::arg(w_args, 1),
            WeightSlots::arg(w_args, 2),
            partial.clone().into_array_arg(),
            rows as u32,
            k as u32,
            slots.sizes[0],
            slots.sizes[1],
            slots.sizes[2],
            first_cube_1,
            first_cube_2,
            split_steps,
            dtype.into(),
        )
    };
    (partial, splits)
}

#[cfg(test)]
mod tests {
    use super::splits_for;

    #[test]
    fn splits_fill_one_wave_and_keep_a_step_per_warp() {
        // Gate and up of Llama-3-8B (2 · 14336 columns, 224 blocks), k = 4096 (512 steps):
        // 448 cubes where 528 fit at once.
        assert_eq!(splits_for(224, 512, Some(132)), 2);
        // Down: 32 blocks, k = 14336; the output head: more blocks than fit.
        assert_eq!(splits_for(32, 1792, Some(132)), 16);
        assert_eq!(splits_for(1002, 512, Some(132)), 1);
        // A short k keeps a step per warp; no device count: 128 cubes.
        assert_eq!(splits_for(1, 6, Some(132)), 2);
        assert_eq!(splits_for(4, 512, None), 32);
    }
}
