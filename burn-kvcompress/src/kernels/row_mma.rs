//! Products of a few activation rows with weight matrices on tensor cores: the decode step's
//! projections at batch 2–32, where the CUDA-core kernel ([`row_products`](super::row_products))
//! spends more instructions per weight byte than the loads can hide (2–8 rows) or does not run
//! (past 8, where cuBLAS would wait on the host before and after every product).
//!
//! A weight `[k, n]` lies row-major, so the two f16 of a loaded 32-bit word are two columns of
//! one row, while an `mma` register of `A` holds two steps of its depth. One `16 × 8 × 16`
//! product takes a step of 16 weight rows (its depth `k`) at 16 columns (its `m`): column `c` of
//! a lane's low piece and of its high piece. Its `A` registers pair the same column of two
//! adjacent rows (two halves of two loaded words; the compiler's byte permutes), so every weight
//! enters one product per row group and `B` holds activations only. The activation rows are the
//! products' `n`, 8 a row group: each `A` feeds one product per group (up to [`MMA_MAX_ROWS`]
//! rows in four groups, the weights read once for all of them; missing rows are zeros), and a
//! group's sums take 32 registers a lane. No staging in shared memory: lane `(g, t)` (`g = lane
//! / 4`, `t = lane mod 4`) loads 16-byte pieces of rows `2t`, `2t + 1`, `2t + 8` and `2t + 9` of
//! the step at columns `8g ..` and `64 + 8g ..` of its warp's block of 128 (a warp's load covers
//! rows of 128 contiguous bytes), and the activation pairs `x[8q + g, 2t .. 2t + 2]` and `x[8q +
//! g, 2t + 8 .. 2t + 10]` of the step for each group `q`. Product `c` of the eight a step's pieces
//! feed takes column `c` of each piece: its sums are columns `8g + c` and `64 + 8g + c`.
//!
//! A cube's warps take the steps of its split of `k` in turn, [`UNROLL`] steps' loads in flight
//! per warp, add up their sums through shared memory a group at a time, and write
//! the split's partial sums `[splits, rows, Σ n]` (f32) that [`sum_splits`](super::row_product)
//! adds and rounds.
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
    row_product::MAX_WEIGHTS,
    warp_mma::{Halves, Pair, WARP},
    weight_slots::{cube_weight, WeightSlots},
};

/// Elements of a 16-byte piece of a weight row.
const PIECE: u32 = 8;
/// Columns of a warp's block: a low and a high half of 8 pieces each (a product's 16 columns
/// are one column of each of a lane's two pieces, 8 lanes `g`).
const BLOCK_COLUMNS: u32 = 128;
/// Weight rows of one step: the products' depth.
const STEP_ROWS: u32 = 16;
/// 16-byte pieces a lane loads per step: 4 rows at the block's low and high columns.
const LANE_PIECES: u32 = 8;
/// Fewest rows the kernel takes. One row is the CUDA-core kernel's, which its instructions do
/// not bind there: it reads an 8B model's output head at 4.3 TB/s where this kernel reaches 4.0
/// (H200, `row_bench --rows 1`), and a batch-1 step takes 6.95 ms with it against 7.32.
pub const MMA_MIN_ROWS: usize = 2;
/// Activation rows of one product (its `n`): a row group.
const GROUP_ROWS: u32 = 8;
/// Most rows the kernel takes: four row groups, whose sums (32 registers a lane each) and the
/// loads in flight still fit a lane's registers.
pub const MMA_MAX_ROWS: usize = 4 * GROUP_ROWS as usize;
/// Warps per cube, each taking every `WARPS`-th step of the cube's split.
const WARPS: u32 = 4;
/// Steps a warp loads before it multiplies them: 16 pieces (256 bytes) a lane in flight. On an
/// H200 one step at a time was slower at 24 and 32 rows (their sums leave room for both), four
/// no faster at 8 and 16 (`results/row-products-h200.md`).
const UNROLL: u32 = 2;
/// Cubes the grid aims for per multiprocessor (or in all, where the count is unknown: 128).
const CUBES_PER_SM: u32 = 4;
/// Floats between two lanes' sums in the cube's reduction (32, padded so that a warp's stores
/// of one sum fall in distinct banks).
const LANE_SUMS: u32 = 33;
/// Sums a lane holds per row group: 2 activation rows × 2 halves of the block × 8 columns.
const SUMS: u32 = 32;

/// Whether the tensor-core kernel (which [`row_products`](super::row_products) then runs) takes
/// `[rows, k]` times weights `[k, n_i]` of `widths` in `dtype` on a device with `properties`: f16
/// or bf16, [`MMA_MIN_ROWS`] to [`MMA_MAX_ROWS`] rows, `k` a multiple of 16 and every width a
/// non-zero multiple of 8 (whole steps and pieces), at most [`MAX_WEIGHTS`] weights, and a device
/// with `16 × 8 × 16` warp products of `dtype` into f32.
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
    (MMA_MIN_ROWS..=MMA_MAX_ROWS).contains(&rows)
        && k > 0
        && k.is_multiple_of(STEP_ROWS as usize)
        && (1..=MAX_WEIGHTS).contains(&widths.len())
        && widths.iter().all(|&n| n > 0 && n.is_multiple_of(PIECE as usize))
        && properties.features.matmul.mma.contains(&product)
}

/// Partial sums of the cube's split of `k`: `partial[split, row, column]`, the weights' columns
/// concatenated. Weight `i` (`[k, width_i]` in pieces) is taken by the cubes from `first_cube_i`
/// (`first_cube_0` = 0), a block of [`BLOCK_COLUMNS`] each, and written from column `width_0 + …
/// + width_(i−1)`; `x` is `[rows, k]` in pairs, `groups` = ⌈rows / 8⌉ row groups.
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
    #[comptime] groups: u32,
    #[define(E)] _dtype: StorageType,
) {
    let mut sums = Array::<Pair>::new(comptime!((groups * SUMS / 2) as usize));
    #[unroll]
    for i in 0..comptime!(groups * SUMS / 2) {
        sums[i as usize] = Pair::new(0.0);
    }
    let weight = cube_weight(width_0, width_1, width_2, first_cube_1, first_cube_2);
    let span = Span { block: weight.cube * BLOCK_COLUMNS, width: weight.size, rows, k, split_steps };
    if weight.slot == 0 {
        accumulate(x, w_0, &mut sums, &span, groups);
    } else if weight.slot == 1 {
        accumulate(x, w_1, &mut sums, &span, groups);
    } else {
        accumulate(x, w_2, &mut sums, &span, groups);
    }
    let total = width_0 + width_1 + width_2;
    write_split(&sums, partial, &span, weight.offset, total, groups);
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
/// to `sums` (`groups` row groups): [`UNROLL`] steps at a time, then the rest one at a time.
#[cube]
fn accumulate<E: Float, N: Size>(
    x: &Array<Halves<E>>,
    w: &Array<Vector<E, N>>,
    sums: &mut Array<Pair>,
    span: &Span,
    #[comptime] groups: u32,
) {
    let steps = span.k / STEP_ROWS;
    let end = u32::min((CUBE_POS_Y + 1) * span.split_steps, steps);
    let mut step = CUBE_POS_Y * span.split_steps + UNIT_POS_Y;
    while step + (UNROLL - 1) * WARPS < end {
        add_steps(x, w, sums, span, step, UNROLL, groups);
        step += UNROLL * WARPS;
    }
    while step < end {
        add_steps(x, w, sums, span, step, 1u32, groups);
        step += WARPS;
    }
}

/// Adds `count` steps from `first` (every [`WARPS`]-th) to the calling lane's `sums`, all their
/// loads issued before the first product. A lane's pieces past the weight's width are loaded
/// from its last piece (in bounds, never written); activation rows past `rows` are zeros. Each
/// step's `A` operand feeds one product per row group: group `q` takes rows `8q .. 8q + 8`.
#[cube]
fn add_steps<E: Float, N: Size>(
    x: &Array<Halves<E>>,
    w: &Array<Vector<E, N>>,
    sums: &mut Array<Pair>,
    span: &Span,
    first: u32,
    #[comptime] count: u32,
    #[comptime] groups: u32,
) {
    let lane = UNIT_POS_X;
    let (g, t) = (lane / 4, lane % 4);
    let pieces = span.width / PIECE;
    let low = u32::min(span.block / PIECE + g, pieces - 1);
    let high = u32::min(span.block / PIECE + BLOCK_COLUMNS / (2 * PIECE) + g, pieces - 1);
    // Per step, the pieces of rows 2t, 2t + 1, 2t + 8, 2t + 9 (depths of A's registers 0–1 and
    // 2–3), each at the low then the high columns.
    let mut loaded = Array::<Vector<E, N>>::new(comptime!((LANE_PIECES * count) as usize));
    let mut pairs = Array::<Halves<E>>::new(comptime!((2 * count * groups) as usize));
    #[unroll]
    for u in 0..count {
        let step = first + u * WARPS;
        #[unroll]
        for r in 0..4u32 {
            let row = step * STEP_ROWS + 2 * t + (r % 2) + 8 * (r / 2);
            loaded[(LANE_PIECES * u + 2 * r) as usize] = w[(row * pieces + low) as usize];
            loaded[(LANE_PIECES * u + 2 * r + 1) as usize] = w[(row * pieces + high) as usize];
        }
        #[unroll]
        for q in 0..groups {
            let x_row = u32::min(q * GROUP_ROWS + g, span.rows - 1);
            let live = q * GROUP_ROWS + g < span.rows;
            let at = x_row * (span.k / 2) + step * (STEP_ROWS / 2) + t;
            pairs[(2 * (u * groups + q)) as usize] = live_pair(x[at as usize], live);
            pairs[(2 * (u * groups + q) + 1) as usize] = live_pair(x[(at + 4) as usize], live);
        }
    }
    let zero = E::cast_from(0.0f32);
    #[unroll]
    for u in 0..count {
        #[unroll]
        for c in 0..PIECE {
            // A: register 2h + m of rows (2t, 2t + 1) or (2t + 8, 2t + 9) by `h`, at the low or
            // high column by `m`, each the pair of rows at column `c` of the piece.
            let mut a = Array::<Halves<E>>::new(4usize);
            #[unroll]
            for h in 0..2u32 {
                #[unroll]
                for m in 0..2u32 {
                    let mut word = Halves::<E>::new(zero);
                    let first = loaded[(LANE_PIECES * u + 4 * h + m) as usize];
                    let second = loaded[(LANE_PIECES * u + 4 * h + 2 + m) as usize];
                    word[0] = first[c as usize];
                    word[1] = second[c as usize];
                    a[(2 * h + m) as usize] = word;
                }
            }
            #[unroll]
            for q in 0..groups {
                let mut b = Array::<Halves<E>>::new(2usize);
                b[0] = pairs[(2 * (u * groups + q)) as usize];
                b[1] = pairs[(2 * (u * groups + q) + 1) as usize];
                add_product(&a, &b, sums, q * PIECE + c);
            }
        }
    }
}

/// `pair` where its activation row is `live`, else zeros (a row past the last of a group).
#[cube]
fn live_pair<E: Float>(pair: Halves<E>, live: bool) -> Halves<E> {
    let zero = E::cast_from(0.0f32);
    let mut out = Halves::<E>::new(zero);
    out[0] = select(live, pair[0], zero);
    out[1] = select(live, pair[1], zero);
    out
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

/// Adds up the cube's warps' `sums` through shared memory, one row group at a time, and writes
/// them as the split's partial sums. Accumulator `8q + c` of lane `(g, t)` holds, in pair `h`
/// (the block's half), activation rows `8q + 2t`, `8q + 2t + 1` at column `64h + 8g + c` of the
/// block; warp `w` then writes row `8q + 2t + w / 2`, half `w mod 2` (8 contiguous columns a
/// lane).
#[cube]
fn write_split(
    sums: &Array<Pair>,
    partial: &mut Array<f32>,
    span: &Span,
    first_column: u32,
    total: u32,
    #[comptime] groups: u32,
) {
    let lane = UNIT_POS_X;
    let warp = UNIT_POS_Y;
    let (g, t) = (lane / 4, lane % 4);
    let mut shared = SharedMemory::<f32>::new(comptime!((WARPS * WARP * LANE_SUMS) as usize));
    let own = (warp * WARP + lane) * LANE_SUMS;
    let (r, half) = (warp / 2, warp % 2);
    let column = span.block + half * (BLOCK_COLUMNS / 2) + g * PIECE;
    #[unroll]
    for q in 0..groups {
        #[unroll]
        for product in 0..comptime!(SUMS / 4) {
            #[unroll]
            for h in 0..2u32 {
                let pair = sums[(q * (SUMS / 2) + 2 * product + h) as usize];
                #[unroll]
                for e in 0..2u32 {
                    shared[(own + (2 * e + h) * PIECE + product) as usize] = pair[e as usize];
                }
            }
        }
        sync_cube();
        let row = q * GROUP_ROWS + 2 * t + r;
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
        // The next group's sums overwrite what this group's writes read.
        sync_cube();
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
    let groups = (rows as u32).div_ceil(GROUP_ROWS);
    // SAFETY: cube (c, s) takes weight `i` (cubes from `first_cube_i`, `cubes_i` of them, one block
    // of 128 columns each; absent weights have no cubes) and steps `s · split_steps ..
    // min((s + 1) · split_steps, steps)` of 16 rows (`k = 16 · steps`, checked by
    // `row_mma_applies`): `w_i` (`[k, width_i / 8]` pieces) is read at rows below `k` and pieces
    // clamped below `width_i / 8`; `x` (`[rows, k / 2]` pairs, k even) at row `min(8q + g, rows −
    // 1)`, pair below `k / 2`. The writes to `partial` (`[splits, rows, total]`, allocated above)
    // are guarded by `row < rows` and `column < width_i` (8 columns from a multiple of 8: within
    // the width); shared memory holds `WARPS · 32 · LANE_SUMS` floats, indexed below that.
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
            groups,
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
        // Gate and up of Llama-3-8B (2 · 14336 columns, 224 blocks), k = 4096 (256 steps):
        // 448 cubes where 528 fit at once.
        assert_eq!(splits_for(224, 256, Some(132)), 2);
        // Down: 32 blocks, k = 14336; the output head: more blocks than fit.
        assert_eq!(splits_for(32, 896, Some(132)), 16);
        assert_eq!(splits_for(1002, 512, Some(132)), 1);
        // A short k keeps a step per warp; no device count: 128 cubes.
        assert_eq!(splits_for(1, 6, Some(132)), 2);
        assert_eq!(splits_for(4, 512, None), 32);
    }
}
