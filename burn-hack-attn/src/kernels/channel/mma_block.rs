//! One product step of the tensor-core channel kernel (a pair of closed blocks, or one), step by
//! step: the blocks' query operands, their scores, their softmax joined to the running one, the
//! weight operands and the outputs. See [`super::mma_kernel`].

use burn_kvcompress::kernels::masked_score;
use cubecl::prelude::*;

use super::{
    mma_chains::{chain, chains, chains_max, chains_sum},
    mma_kernel::{BlockRun, ChannelMmaGeometry},
    mma_operands::{
        column_max, column_registers, column_sum, heads_of_lane, lane_position, lane_rows, position_words,
        product_rows, tile_products, WordList, PRODUCT_COLUMNS, PRODUCT_ROWS,
    },
    mma_stage::PairAt,
};
use crate::kernels::{
    params_word::params_pair,
    warp_codes::{join_tops, quad_max, quad_sum, ROUNDER, VISIBLE_FLOOR},
};

/// A lane's running softmax over the blocks it has attended, for its heads `2t + e`: outputs
/// `acc[4c + 2r + e]` of channel `16c + g + 8r`, max `top[e]` and mass `mass[e]`.
#[derive(CubeType)]
pub(super) struct RunningSoftmax {
    pub acc: Array<f32>,
    pub top: Array<f32>,
    pub mass: Array<f32>,
}

/// A step's numerators as the weights' quantization needs them: head `g`'s at the lane's slots
/// (`own_p[i]` at the slot [`position`](super::mma_operands::position) gives the lane's code `i`
/// of its own block's value registers, zero for padding columns), and for the lane's heads
/// `2t + e` the block's weight `join[e]` in the running outputs.
#[derive(CubeType)]
pub(super) struct StepNumerators {
    own_p: Array<f32>,
    join: Array<f32>,
    rescale: Array<f32>,
}

/// A scored step: the lane's numerators in the products' layout (`s[(2i + r) · 2 + e]` for slot
/// `16i + g + 8r` of its result block, column `2t + e`) and the blocks' weights `join[e]` in the
/// running outputs.
#[derive(CubeType)]
pub(super) struct ScoredStep {
    s: Array<f32>,
    join: Array<f32>,
    rescale: Array<f32>,
}

/// The first half of a product step: scores the step's blocks (`pair`, lying `at` in the key
/// words and metadata) and joins their softmax to the lane's running one under the larger max,
/// rescaling its outputs; `own_q` is the lane's column head's query at its channels. The blocks
/// are read from the caches themselves or from the warp's stage (`mma_stage`), which keeps the
/// caches' layout: generic over the container rather than taking slices, whose bounds checks
/// CubeCL's validation mode compiles to a `min(u32, u64)` that NVRTC rejects.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn attend_keys<W: WordList>(
    own_q: &Array<f32>,
    k_words: &W,
    k_params: &W,
    at: &PairAt,
    pair: &BlockPair,
    state: &mut RunningSoftmax,
    run: &BlockRun,
    side: u32,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> ScoredStep {
    let query = block_query::<W>(own_q, k_params, at.key_params, run.scale, side, t, geo);
    let mut s = block_scores::<W>(k_words, &query, pair, at, run.visible_from, g, t, geo);
    let numerators = block_softmax(&mut s, geo);
    // `weights.first` rescales the running mass here and the running outputs as the step adds
    // its own (`rescale`, one multiply-add an output in `block_outputs`); `join` weighs the
    // block's (folded into its weight factors).
    let mut join = Array::<f32>::new(2usize);
    let mut rescale = Array::<f32>::new(2usize);
    #[unroll]
    for e in 0..2u32 {
        let weights = join_tops(state.top[e as usize], numerators.top[e as usize]);
        join[e as usize] = weights.second;
        rescale[e as usize] = weights.first;
        state.mass[e as usize] = state.mass[e as usize] * weights.first + numerators.mass[e as usize] * weights.second;
        state.top[e as usize] = weights.max;
    }
    ScoredStep { s, join, rescale }
}

/// The `scored` step's numerators to column `g`'s lanes through the warp's tile (from `tile_base`
/// of `tile`, f32 bits): head `2t + e`'s slot `16i + g + 8r` at `(2t + e) · stride + slot`
/// ([`ChannelMmaGeometry::tile_stride`]; indices in 64 bits, as for `LaneRows`), read back as
/// 16-byte vectors of 4 consecutive slots (a word's codes lie at consecutive slots). Staged, the
/// tile lies in the key rows the step has scored: it first waits for every lane to have read them.
/// When it returns, every lane has read the tile.
#[cube]
pub(super) fn exchange_numerators(
    tile: &mut SharedMemory<u32>,
    tile_base: u32,
    scored: ScoredStep,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> StepNumerators {
    let (pi, per, stride) = comptime!((geo.partition, geo.blocks_per_step(), geo.tile_stride()));
    let column_head = g % comptime!(PRODUCT_COLUMNS / per);
    sync_plane();
    let written = (tile_base + 2 * t * stride + g) as usize;
    #[unroll]
    for i in 0..comptime!(pi / PRODUCT_ROWS) {
        #[unroll]
        for r in 0..2u32 {
            #[unroll]
            for e in 0..2u32 {
                let offset = comptime!((e * stride + PRODUCT_ROWS * i + 8 * r) as usize);
                tile[written + offset] = u32::reinterpret(scored.s[comptime!(((2 * i + r) * 2 + e) as usize)]);
            }
        }
    }
    sync_plane();
    let values = comptime!(geo.value_depth());
    let mut own_p = Array::<f32>::new(comptime!(values.lane_codes() as usize));
    let read = (tile_base + g * stride + lane_position(t, values)) as usize;
    let words = position_words(tile, read, values);
    #[unroll]
    for i in 0..comptime!(values.lane_codes()) {
        let p = f32::reinterpret(words[i as usize]);
        own_p[i as usize] = select(column_head < comptime!(geo.group), p, 0.0);
    }
    sync_plane();
    StepNumerators { own_p, join: scored.join, rescale: scored.rescale }
}

/// The second half of a product step: quantizes the step's `numerators` and adds the outputs of
/// its blocks (their value rows and metadata lying `at` in `v_words` and `v_params`) to the lane's
/// running ones.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn attend_values<W: WordList>(
    v_words: &W,
    v_params: &W,
    at: &PairAt,
    numerators: &StepNumerators,
    state: &mut RunningSoftmax,
    side: u32,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let weights = block_weights::<W>(&numerators.own_p, v_params, at.value_params, &numerators.join, side, t, geo);
    block_outputs::<W>(v_words, &weights, &numerators.rescale, &mut state.acc, at, g, t, geo);
}

/// `1.5 · 2²³`: for `|x| < 2²²`, the bits of `x + ROUND_SIGNED` are those of `0x4B40_0000` plus
/// `x` rounded to the nearest integer (ties to even), so their low byte is the rounded `x` as a
/// two's complement byte, with no conversion.
const ROUND_SIGNED: f32 = 12_582_912.0;

/// The least max a query or weight scale is taken from: the kernel's approximate reciprocal of
/// the scale then stays finite, and an all-zero block's codes are 0 as in the reference.
const SCALE_FLOOR: f32 = 1e-30;

/// One block's query operand: head `g`'s codes as the products take them
/// ([`column_registers`]), and for the lane's heads `2t + e` the score factor `σ · scale / lift`
/// and the offset `q · m_b · scale`.
#[derive(CubeType)]
pub(super) struct BlockQuery {
    codes: Array<u32>,
    factor: Array<f32>,
    offset: Array<f32>,
}

/// The lane's column head's query `q ⊙ s_b` of its own block (whose key metadata starts at
/// `params_at` of `k_params`; the pair's `side`) quantized to symmetric 8-bit codes over its
/// channels (the lane's `head_dim / 4`, `own_q[i]` at the channel
/// [`position`](super::mma_operands::position) gives its key code `i`), the scale
/// `σ = max |q′| / 127` and `q · m_b` reduced over the quad. The codes are `q′ · (1/σ)` rounded to
/// the nearest, ties to even (the reference divides and rounds ties away from zero: the two differ
/// by one code where a quotient falls within an ulp of a half). `max |q′|` is floored at
/// [`SCALE_FLOOR`]: a `q′` below it codes smaller than the reference's (its scores are its
/// offsets to within the floor).
#[cube]
pub(super) fn block_query<P: WordList>(
    own_q: &Array<f32>,
    k_params: &P,
    params_at: u32,
    scale: f32,
    side: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> BlockQuery {
    let keys = comptime!(geo.key_depth());
    let mut scaled = Array::<f32>::new(comptime!(keys.lane_codes() as usize));
    let mut amax = chains(0.0);
    let mut offset = chains(0.0);
    let lane_params = (params_at + lane_position(t, keys)) as usize;
    #[unroll]
    for i in 0..comptime!(keys.lane_codes()) {
        let params = params_pair(k_params[lane_params + comptime!(keys.code_position(0, i) as usize)]);
        let x = own_q[i as usize] * params[1];
        scaled[i as usize] = x;
        let c = comptime!(chain(i));
        amax[c] = f32::max(amax[c], f32::abs(x));
        offset[c] += own_q[i as usize] * params[0];
    }
    let amax = quad_max(chains_max(&amax));
    let offset = quad_sum(chains_sum(&offset));
    let sigma = f32::max(amax, SCALE_FLOOR) * comptime!(1.0f32 / 127.0);
    let inverse = 1.0 / sigma;
    let mut codes = Array::<u32>::new(comptime!(keys.registers() as usize));
    #[unroll]
    for reg in 0..comptime!(keys.registers()) {
        let mut word = 0u32;
        #[unroll]
        for b in 0..4u32 {
            let rounded = u32::reinterpret(scaled[comptime!((4 * reg + b) as usize)] * inverse + ROUND_SIGNED);
            word |= (rounded & 0xFF) << comptime!(8 * b);
        }
        codes[reg as usize] = word;
    }
    BlockQuery {
        codes: column_registers(&codes, side, keys),
        factor: heads_of_lane(sigma * scale * comptime!(1.0 / keys.lift() as f32), t),
        offset: heads_of_lane(offset * scale, t),
    }
}

/// The closed blocks one product step of a warp takes: one, or (where the query heads fill at
/// most half the products' columns, [`ChannelMmaGeometry::paired`]) two side by side, columns
/// `4s .. 4s + 4` serving block `s` of the pair. Closed-block indices are of the stream's
/// buffers; a pair's second block past the warp's run is its first again, with its columns
/// masked (`live`).
#[derive(CubeType)]
pub(super) struct BlockPair {
    /// The pair's first block.
    pub first: u32,
    /// The pair's second block (the first where there is none, or not paired).
    pub second: u32,
    /// The block of the lane's operand column `g`, whose query and weights the lane quantizes.
    pub own: u32,
    /// The position of the first slot of the block whose scores and outputs the lane holds
    /// (columns `2t`, `2t + 1`).
    pub first_slot: u32,
    /// Whether the block of the lane's result columns exists.
    pub live: bool,
}

/// The pair of closed blocks from block `block` of a run ending at `end` (blocks of the stream,
/// whose first closed block is `base`, after `sinks` float slots): for lane `4g + t`, its operand
/// column's block is the pair's `side`-th and its result columns' the `result_side`-th.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_pair(
    base: u32,
    block: u32,
    end: u32,
    sinks: u32,
    side: u32,
    result_side: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> BlockPair {
    let second = select(block + 1u32 < end, block + 1u32, block);
    let second = select(comptime!(geo.paired()), second, block);
    BlockPair {
        first: base + block,
        second: base + second,
        own: base + select(side == 0u32, block, second),
        first_slot: sinks + (block + result_side) * geo.partition,
        live: block + result_side < end,
    }
}

/// The scores of `pair`'s blocks (their key rows in `k_words` `at`) for the lane's slots and
/// columns, scaled: `s[(2i + r) · 2 + e]`
/// for slot `16i + g + 8r` of its result block, column `2t + e`; [`masked_score`] at positions
/// before `visible_from` and where the block is not `live` (tested only where the lane's block is
/// not wholly visible, so that most steps skip it).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_scores<W: WordList>(
    k_words: &W,
    query: &BlockQuery,
    pair: &BlockPair,
    at: &PairAt,
    visible_from: u32,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> Array<f32> {
    let (pi, keys) = comptime!((geo.partition, geo.key_depth()));
    let tiles = comptime!(pi / PRODUCT_ROWS);
    let mut s = Array::<f32>::new(comptime!((4 * tiles) as usize));
    let lanes = lane_rows(at.key_rows[0], at.key_rows[1], g, t, keys);
    #[unroll]
    for i in 0..tiles {
        let rows = product_rows::<W>(k_words, &lanes, comptime!(PRODUCT_ROWS * i), keys);
        let dots = tile_products::<i8>(&rows, &query.codes, 0u32, keys);
        #[unroll]
        for r in 0..2u32 {
            #[unroll]
            for e in 0..2u32 {
                let dot = f32::cast_from(dots[r as usize][e as usize]);
                s[comptime!(((2 * i + r) * 2 + e) as usize)] =
                    query.factor[e as usize] * dot + query.offset[e as usize];
            }
        }
    }
    if !(pair.live && pair.first_slot >= visible_from) {
        #[unroll]
        for i in 0..tiles {
            #[unroll]
            for r in 0..2u32 {
                let seen = pair.live && pair.first_slot + PRODUCT_ROWS * i + g + 8 * r >= visible_from;
                #[unroll]
                for e in 0..2u32 {
                    let at = comptime!(((2 * i + r) * 2 + e) as usize);
                    s[at] = select(seen, s[at], masked_score());
                }
            }
        }
    }
    s
}

/// A block's softmax for the lane's heads: the max `top[e]` over the block's slots (at least
/// [`VISIBLE_FLOOR`]), and its scores turned into numerators `exp(s − top)` with their mass
/// `mass[e]`. A masked score is 0 with no test: `s − top` is about −2e38 at most, finite, whose
/// `exp` is 0; a wholly masked block's top is the floor, whose weight [`join_tops`] makes 0.
#[derive(CubeType)]
pub(super) struct BlockSoftmax {
    pub top: Array<f32>,
    pub mass: Array<f32>,
}

#[cube]
pub(super) fn block_softmax(s: &mut Array<f32>, #[comptime] geo: ChannelMmaGeometry) -> BlockSoftmax {
    let count = comptime!(4 * geo.partition / PRODUCT_ROWS);
    let mut top = Array::<f32>::new(2usize);
    let mut mass = Array::<f32>::new(2usize);
    #[unroll]
    for e in 0..2u32 {
        let mut m = chains(VISIBLE_FLOOR);
        #[unroll]
        for x in 0..comptime!(count / 2) {
            let c = comptime!(chain(x));
            m[c] = f32::max(m[c], s[comptime!((2 * x + e) as usize)]);
        }
        let m = column_max(chains_max(&m));
        let mut l = chains(0.0);
        #[unroll]
        for x in 0..comptime!(count / 2) {
            let at = comptime!((2 * x + e) as usize);
            let p = f32::exp(s[at] - m);
            s[at] = p;
            let c = comptime!(chain(x));
            l[c] += p;
        }
        top[e as usize] = m;
        mass[e as usize] = column_sum(chains_sum(&l));
    }
    BlockSoftmax { top, mass }
}

/// The weight operands of a block: per value group head `g`'s codes as the products take them
/// (from `codes[vg · column_registers]`, [`column_registers`]), and for the lane's heads `2t + e`
/// per group the output
/// factor `τ / lift` (`factor[vg · 2 + e]`) and offset `Σ_t p_t m_t` (`offset[vg · 2 + e]`),
/// both times `join`, the block's weight in the running output.
#[derive(CubeType)]
pub(super) struct BlockWeights {
    codes: Array<u32>,
    factor: Array<f32>,
    offset: Array<f32>,
}

/// Head `g`'s numerators at the lane's slots (`own_p[i]`, [`StepNumerators`]) scaled by
/// the slots' value scales per group (the own block's value metadata from `params_at` of
/// `v_params`; the pair's `side`) and quantized to 8-bit codes from
/// 0 (`τ = max p′ / 255` per group, reduced over the quad, `max p′` floored at [`SCALE_FLOOR`];
/// `p′ · (1/τ)` rounded to the nearest, ties to even, as for the query codes: no clamp, as
/// `p′ · (1/τ)` exceeds 255 by a few ulps at most, which rounds to 255).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_weights<P: WordList>(
    own_p: &Array<f32>,
    v_params: &P,
    params_at: u32,
    join: &Array<f32>,
    side: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> BlockWeights {
    let (groups, values) = comptime!((geo.value_groups(), geo.value_depth()));
    let (registers, columns) = comptime!((values.registers(), values.column_registers()));
    let mut weights = BlockWeights {
        codes: Array::<u32>::new(comptime!((groups * columns) as usize)),
        factor: Array::<f32>::new(comptime!((2 * groups) as usize)),
        offset: Array::<f32>::new(comptime!((2 * groups) as usize)),
    };
    // The lane's slots' metadata: slot `position(t, i)`'s group `vg` at `slot · groups + vg`.
    let lane_params = (params_at + lane_position(t, values) * groups) as usize;
    #[unroll]
    for vg in 0..groups {
        let mut scaled = Array::<f32>::new(comptime!(values.lane_codes() as usize));
        let mut max = chains(0.0);
        let mut offset = chains(0.0);
        #[unroll]
        for i in 0..comptime!(values.lane_codes()) {
            let at = comptime!((values.code_position(0, i) * groups + vg) as usize);
            let params = params_pair(v_params[lane_params + at]);
            let x = own_p[i as usize] * params[1];
            scaled[i as usize] = x;
            let c = comptime!(chain(i));
            max[c] = f32::max(max[c], x);
            offset[c] += own_p[i as usize] * params[0];
        }
        let max = quad_max(chains_max(&max));
        let offset = heads_of_lane(quad_sum(chains_sum(&offset)), t);
        let tau = f32::max(max, SCALE_FLOOR) * comptime!(1.0f32 / 255.0);
        let inverse = 1.0 / tau;
        let factor = heads_of_lane(tau / comptime!(values.lift() as f32), t);
        #[unroll]
        for e in 0..2u32 {
            weights.factor[comptime!((2 * vg + e) as usize)] = factor[e as usize] * join[e as usize];
            weights.offset[comptime!((2 * vg + e) as usize)] = offset[e as usize] * join[e as usize];
        }
        let mut codes = Array::<u32>::new(comptime!(registers as usize));
        #[unroll]
        for reg in 0..registers {
            let mut word = 0u32;
            #[unroll]
            for b in 0..4u32 {
                let x = scaled[comptime!((4 * reg + b) as usize)] * inverse;
                word |= (u32::reinterpret(x + ROUNDER) & 0xFF) << comptime!(8 * b);
            }
            codes[reg as usize] = word;
        }
        let columns_of_group = column_registers(&codes, side, values);
        #[unroll]
        for k in 0..columns {
            weights.codes[comptime!((vg * columns + k) as usize)] = columns_of_group[k as usize];
        }
    }
    weights
}

/// Adds the step's outputs (its value rows in `v_words` `at`) to the lane's running ones (already
/// rescaled): `acc[4c + 2r + e]` for
/// channel `16c + g + 8r`, column `2t + e`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_outputs<W: WordList>(
    v_words: &W,
    weights: &BlockWeights,
    rescale: &Array<f32>,
    acc: &mut Array<f32>,
    at: &PairAt,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let (d, values) = comptime!((geo.head_dim, geo.value_depth()));
    let lanes = lane_rows(at.value_rows[0], at.value_rows[1], g, t, values);
    #[unroll]
    for c in 0..comptime!(d / PRODUCT_ROWS) {
        let vg = comptime!(PRODUCT_ROWS * c / geo.value_group);
        let rows = product_rows::<W>(v_words, &lanes, comptime!(PRODUCT_ROWS * c), values);
        let dots = tile_products::<u8>(&rows, &weights.codes, comptime!(vg * values.column_registers()), values);
        #[unroll]
        for r in 0..2u32 {
            #[unroll]
            for e in 0..2u32 {
                let at = comptime!((4 * c + 2 * r + e) as usize);
                let meta = comptime!((2 * vg + e) as usize);
                let step = weights.factor[meta] * f32::cast_from(dots[r as usize][e as usize]) + weights.offset[meta];
                acc[at] = acc[at] * rescale[e as usize] + step;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ChannelMmaGeometry, StagePlan};
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Shared memory banks of 4 bytes.
    const BANKS: u32 = 32;

    /// The wavefronts of a warp's shared memory access of `width` words (1 or 4) at word `at(g, t)`
    /// for lane `4g + t`: lanes go `32 / width` at a time, and each time the most distinct
    /// addresses in one bank (lanes reading the same word share it).
    fn wavefronts(width: u32, at: impl Fn(u32, u32) -> u32) -> usize {
        let per_phase = 32 / width;
        (0..width)
            .map(|phase| {
                let mut banks: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
                for lane in phase * per_phase..(phase + 1) * per_phase {
                    let word = at(lane / 4, lane % 4);
                    for k in 0..width {
                        banks.entry((word + k) % BANKS).or_default().insert(word);
                    }
                }
                banks.values().map(BTreeSet::len).max().unwrap()
            })
            .sum()
    }

    #[test]
    fn the_numerators_tile_takes_one_wavefront_a_write_and_at_most_two_a_vector_read() {
        for (partition, value_bits) in [(32, 2), (64, 2), (128, 2), (64, 4), (128, 4)] {
            let geo = ChannelMmaGeometry {
                group: 4,
                head_dim: 128,
                partition,
                key_bits: 4,
                value_bits,
                value_group: partition.min(128),
                warps: 8,
                stage: StagePlan::Halves,
            };
            let (stride, values) = (geo.tile_stride(), geo.value_depth());
            // `exchange_numerators`: lane `4g + t` writes column `2t + e`, slot `16i + 8r + g`.
            for (i, r, e) in [(0, 0, 0), (1, 1, 1), (partition / PRODUCT_ROWS - 1, 0, 1)] {
                let written = |g: u32, t: u32| (2 * t + e) * stride + PRODUCT_ROWS * i + 8 * r + g;
                assert_eq!(wavefronts(1, written), 1, "Π = {partition}");
            }
            // It reads column `g`'s slots from `lane_position(t)` in runs of 4.
            let (least, most) = (4, if value_bits == 2 { 8 } else { 4 });
            for q in 0..values.lane_codes() / 4 {
                let read = |g: u32, t: u32| g * stride + values.code_position(t, 0) + values.quad_position(q);
                let taken = wavefronts(4, read);
                assert!((least..=most).contains(&taken), "Π = {partition}, {value_bits}-bit, run {q}: {taken}");
            }
        }
    }
}
