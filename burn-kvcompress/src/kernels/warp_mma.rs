//! Decode attention of one warp on tensor cores, the parts ZACK's and MILLION's tensor-core
//! kernels share: f16 `32 × 16` by `16 × 8` warp products into f32 (CUDA's `wmma`), an online
//! softmax per warp over rounds of 32 slots (one slot per lane), `Oᵀ += Ṽᵀ Pᵀ` from a staged
//! value tile, and the split's partial results for the log-sum-exp merge.
//!
//! Per warp, shared memory holds its weights tile (`[8 heads × 32 slots]` f16, the value
//! products' `B` operand) and a scratch of `[8 × 32]` f32 ([`SCRATCH_LD`] apart) through which
//! accumulators are rescaled and written; warp `w` (`UNIT_POS / 32`) owns the `w`-th of each.
//!
//! Online softmax: the warp keeps per query head a reference `m` (uniform over the warp) and its
//! lanes' masses; a round whose max exceeds `m` by more than [`RESCALE_MARGIN`] moves `m` to it
//! and rescales the masses and the value sums (through the scratch), so the weights `exp(s − m)`
//! stay below `e^8` (f16 holds them) and `m` moves a few times per split. The rounding of a
//! weight to f16 moves the output by at most `2^-11 · max |v|` (the mass is summed in f32).

use cubecl::{
    cmma::{self, Matrix, MatrixIdent, MatrixLayout},
    prelude::*,
};

use super::{masked_score, SplitOut};

/// Lanes of a warp, and the slots of a round (the score products' `m`).
pub const WARP: u32 = 32;
/// Query heads per product (the products' `n`): a group of up to 8, padded with zero queries.
pub const MMA_HEADS: u32 = 8;
/// Coordinates, or slots, per product (the products' `k`).
pub const MMA_DEPTH: u32 = 16;
/// Channels per value product (its `m`).
pub const CHANNEL_BLOCK: u32 = 32;
/// Floats between the columns of a warp's `[32 × 8]` scratch (32, padded by 4 so that the
/// columns of a stored product fall in distinct banks).
pub const SCRATCH_LD: u32 = 36;
/// How far a round's max score may exceed a head's reference `m` before `m` moves: the weights
/// `exp(s − m)` stay below `e^8 ≈ 2981`, well within f16.
pub const RESCALE_MARGIN: f32 = 8.0;

/// Two f16 of a manual warp product's operand (`MmaDefinition`: one 32-bit register).
pub type Halves<E> = Vector<E, Const<2>>;
/// Two f32 of a manual warp product's accumulator.
pub type Pair = Vector<f32, Const<2>>;

/// Bytes of shared memory of one warp's weights tile and scratch.
pub const WARP_SHARED_BYTES: u32 = 2 * MMA_HEADS * WARP + 4 * MMA_HEADS * SCRATCH_LD;

/// The log-sum-exp state of a warp's query heads: the reference `max` (uniform over the warp)
/// and each lane's share of the mass.
#[derive(CubeType)]
pub struct WarpSoftmax {
    pub max: Array<f32>,
    pub mass: Array<f32>,
}

/// A warp's softmax state before its first round: reference [`masked_score()`], no mass.
#[cube]
pub fn warp_softmax(#[comptime] group: u32) -> WarpSoftmax {
    let mut softmax = WarpSoftmax { max: Array::<f32>::new(group as usize), mass: Array::<f32>::new(group as usize) };
    #[unroll]
    for g in 0..group {
        softmax.max[g as usize] = masked_score();
        softmax.mass[g as usize] = 0.0;
    }
    softmax
}

/// A zero `[32 × 8]` f32 accumulator of products with depth 16.
#[cube]
pub fn accumulator() -> Matrix<f32> {
    Matrix::<f32>::from_value(
        MatrixIdent::Accumulator,
        WARP as usize,
        MMA_HEADS as usize,
        MMA_DEPTH as usize,
        MatrixLayout::Undefined,
        0.0,
    )
}

/// The value sums of a warp: one zero accumulator per block of 32 channels of `head_dim`.
#[cube]
pub fn value_sums(#[comptime] head_dim: u32) -> Sequence<Matrix<f32>> {
    let mut sums = Sequence::<Matrix<f32>>::new();
    #[unroll]
    for _ in 0..comptime!(head_dim.div_ceil(CHANNEL_BLOCK)) {
        sums.push(accumulator());
    }
    sums
}

/// An operand (`ident` A: `[32 × 16]`, B: `[16 × 8]`) of `32 × 8 × 16` products, laid out in
/// memory as `layout`, to be loaded before use.
#[allow(unsafe_code)]
#[cube]
pub fn operand<E: Float>(#[comptime] ident: MatrixIdent, #[comptime] layout: MatrixLayout) -> Matrix<E> {
    // SAFETY: every caller loads the operand before the product that reads it.
    unsafe { Matrix::<E>::uninitialized(ident, WARP as usize, MMA_HEADS as usize, MMA_DEPTH as usize, layout) }
}

/// Clears the calling warp's weights tile (the rows of heads past the group stay zero).
#[cube]
pub fn clear_weights<E: Float>(weights: &mut SharedMemory<E>) {
    let own = (UNIT_POS / WARP) * MMA_HEADS * WARP;
    #[unroll]
    for h in 0..MMA_HEADS {
        weights[(own + h * WARP + UNIT_POS % WARP) as usize] = E::cast_from(0.0f32);
    }
}

/// One round's softmax for the calling warp: lane `t`'s scores `s[g]` of its slot (visible or
/// not) move the heads' references ([`move_references()`]; `sums` of `value_rank` channels
/// rescaled with the masses), then the weights `exp(s − m)` (0 for a hidden slot) are added to
/// the masses and stored, rounded to f16, in the warp's weights tile at slot `t`
/// ([`store_weights()`]).
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn weigh_round<E: Float>(
    s: &Array<f32>,
    visible: bool,
    softmax: &mut WarpSoftmax,
    sums: &Sequence<Matrix<f32>>,
    scratch: &mut SharedMemory<f32>,
    weights: &mut SharedMemory<E>,
    value_rank: u32,
    #[comptime] group: u32,
    #[comptime] head_dim: u32,
    #[comptime] vote: bool,
) {
    let moves = move_references(s, visible, softmax, group, vote);
    if moves.rescale {
        rescale_sums(sums, scratch, &moves.factor, value_rank, group, head_dim);
    }
    store_weights(s, visible, softmax, weights, group);
}

/// How one round moved a warp's references: per query head the factor `exp(m_old − m_new)` (1
/// where the reference stayed) by which its masses were and its value sums must be multiplied,
/// and whether any sums must be (a reference moved from a real score).
#[derive(CubeType)]
pub struct ReferenceMoves {
    pub factor: Array<f32>,
    pub rescale: bool,
}

/// Moves the reference of each query head whose round max (over the warp's visible scores `s`)
/// exceeds it by more than [`RESCALE_MARGIN`] to that max, rescaling the head's masses by
/// `exp(m_old − m_new)`; the caller rescales its value sums by the returned factors.
///
/// With `vote`, one warp vote first asks whether any score passes its reference by the margin,
/// and the heads' maxima are reduced over the warp only when one does (a few rounds per split);
/// the result is the same bit for bit. MILLION's issue-bound kernel takes 12% less time per step
/// with it (32K, batch 8, on an H100); ZACK's copy-bound kernel measured 1–2% slower with it
/// (`results/decode-instruction-diet-h100.md`). Without, the maxima are reduced every round.
#[cube]
pub fn move_references(
    s: &Array<f32>,
    visible: bool,
    softmax: &mut WarpSoftmax,
    #[comptime] group: u32,
    #[comptime] vote: bool,
) -> ReferenceMoves {
    let mut factor = Array::<f32>::new(group as usize);
    #[unroll]
    for g in 0..group {
        factor[g as usize] = 1.0;
    }
    let mut passes = true;
    if vote {
        let mut any = false;
        #[unroll]
        for g in 0..group {
            any = any || (visible && s[g as usize] > softmax.max[g as usize] + RESCALE_MARGIN);
        }
        passes = plane_any(any);
    }
    let mut rescale = false;
    if passes {
        #[unroll]
        for g in 0..group {
            let top = plane_max(select(visible, s[g as usize], masked_score()));
            if top > softmax.max[g as usize] + RESCALE_MARGIN {
                // 0 while the reference is the masked score: nothing has been summed yet.
                factor[g as usize] = f32::exp(softmax.max[g as usize] - top);
                rescale = rescale || softmax.max[g as usize] > masked_score();
                softmax.mass[g as usize] *= factor[g as usize];
                softmax.max[g as usize] = top;
            }
        }
    }
    ReferenceMoves { factor, rescale }
}

/// Adds lane `t`'s weights `exp(s[g] − m)` (0 for a hidden slot) to the masses and stores them,
/// rounded to f16, in the calling warp's weights tile at slot `t`.
#[cube]
pub fn store_weights<E: Float>(
    s: &Array<f32>,
    visible: bool,
    softmax: &mut WarpSoftmax,
    weights: &mut SharedMemory<E>,
    #[comptime] group: u32,
) {
    let lane = UNIT_POS % WARP;
    let own_weights = (UNIT_POS / WARP) * MMA_HEADS * WARP;
    #[unroll]
    for g in 0..group {
        let w = select(visible, f32::exp(s[g as usize] - softmax.max[g as usize]), 0.0);
        softmax.mass[g as usize] += w;
        weights[(own_weights + g * WARP + lane) as usize] = E::cast_from(w);
    }
    sync_plane();
}

/// `Oᵀ += Ṽᵀ Pᵀ` for the calling warp over `depths` blocks of 16 slots and `blocks` blocks of 32
/// channels from channel block `first_block`: the value tile at element `tile` of `stage`
/// (vectors of `vector` elements; `[slots × stride]`, a slot's channels from the first block's
/// first contiguous, `stride` a multiple of 8) against the weights of its slots `16 ·
/// first_depth ..` in the warp's weights tile, channel blocks past `value_rank` skipped.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn add_values<E: Float, N: Size>(
    stage: &SharedMemory<Vector<E, N>>,
    tile: u32,
    stride: u32,
    weights: &SharedMemory<E>,
    first_depth: u32,
    sums: &Sequence<Matrix<f32>>,
    value_rank: u32,
    #[comptime] vector: u32,
    #[comptime] depths: u32,
    #[comptime] first_block: u32,
    #[comptime] blocks: u32,
) {
    let own_weights = (UNIT_POS / WARP) * MMA_HEADS * WARP;
    #[unroll]
    for d in 0..depths {
        let w = operand::<E>(MatrixIdent::B, MatrixLayout::ColMajor);
        let w_at = own_weights + (first_depth + d) * MMA_DEPTH;
        cmma::load(&w, &weights.slice(w_at as usize, weights.len()), WARP);
        #[unroll]
        for c in 0..blocks {
            if (first_block + c) * CHANNEL_BLOCK < value_rank {
                let v = operand::<E>(MatrixIdent::A, MatrixLayout::ColMajor);
                let at = (tile + d * MMA_DEPTH * stride + c * CHANNEL_BLOCK) / vector;
                cmma::load(&v, &stage.slice(at as usize, stage.len()), stride);
                let acc = sums.index((first_block + c) as usize);
                cmma::execute::<E, E, f32, f32>(&v, &w, acc, acc);
            }
        }
    }
}

/// Multiplies query head `g`'s column of the calling warp's value sums by `factor[g]`, a block
/// of 32 channels at a time through its scratch (blocks past the value rank hold zeros).
#[cube]
fn rescale_sums(
    sums: &Sequence<Matrix<f32>>,
    scratch: &mut SharedMemory<f32>,
    factor: &Array<f32>,
    value_rank: u32,
    #[comptime] group: u32,
    #[comptime] head_dim: u32,
) {
    let own = (UNIT_POS / WARP) * MMA_HEADS * SCRATCH_LD;
    let lane = UNIT_POS % WARP;
    #[unroll]
    for c in 0..comptime!(head_dim.div_ceil(CHANNEL_BLOCK)) {
        if c * CHANNEL_BLOCK < value_rank {
            let acc = sums.index(c as usize);
            cmma::store(&mut scratch.slice_mut(own as usize, scratch.len()), acc, SCRATCH_LD, MatrixLayout::ColMajor);
            sync_plane();
            #[unroll]
            for g in 0..group {
                scratch[(own + g * SCRATCH_LD + lane) as usize] *= factor[g as usize];
            }
            sync_plane();
            cmma::load_with_layout(
                acc,
                &scratch.slice(own as usize, scratch.len()),
                SCRATCH_LD,
                MatrixLayout::ColMajor,
            );
            sync_plane();
        }
    }
}

/// Writes the calling warp's query heads' unnormalized outputs (0 past the value rank), their
/// reference max and mass as `target`'s split.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn write_warp_partials(
    sums: &Sequence<Matrix<f32>>,
    scratch: &mut SharedMemory<f32>,
    softmax: &WarpSoftmax,
    value_rank: u32,
    target: &SplitOut,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    #[comptime] group: u32,
    #[comptime] head_dim: u32,
) {
    let own = (UNIT_POS / WARP) * MMA_HEADS * SCRATCH_LD;
    let lane = UNIT_POS % WARP;
    #[unroll]
    for c in 0..comptime!(head_dim.div_ceil(CHANNEL_BLOCK)) {
        let block = c * CHANNEL_BLOCK < value_rank;
        if block {
            cmma::store(
                &mut scratch.slice_mut(own as usize, scratch.len()),
                sums.index(c as usize),
                SCRATCH_LD,
                MatrixLayout::ColMajor,
            );
        }
        sync_plane();
        let channel = c * CHANNEL_BLOCK + lane;
        if channel < head_dim {
            #[unroll]
            for g in 0..group {
                let mut x = 0.0f32;
                if block && channel < value_rank {
                    x = scratch[(own + g * SCRATCH_LD + lane) as usize];
                }
                target.write_output(out, g, channel, x, head_dim);
            }
        }
        sync_plane();
    }
    write_warp_stats(softmax, target, out_max, out_sum, group);
}

/// Writes the calling warp's query heads' reference max and mass (summed over its lanes) as
/// `target`'s split.
#[cube]
pub fn write_warp_stats(
    softmax: &WarpSoftmax,
    target: &SplitOut,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    #[comptime] group: u32,
) {
    let lane = UNIT_POS % WARP;
    #[unroll]
    for g in 0..group {
        let mass = plane_sum(softmax.mass[g as usize]);
        if lane == 0 {
            target.write_stats(out_max, out_sum, g, softmax.max[g as usize], mass);
        }
    }
}
