//! One closed block of the tensor-core channel kernel, step by step: the block's query operand,
//! its scores, their softmax, the weight operands and the outputs. See [`super::mma_kernel`].

use burn_kvcompress::kernels::masked_score;
use cubecl::{cmma::MmaDefinition, prelude::*};

use super::{
    mma_kernel::ChannelMmaGeometry,
    mma_operands::{
        column_max, column_sum, heads_of_lane, lift, position, row_pair_operand, row_words, Codes, Dots, QueryCodes,
        Words, HALF, PRODUCT_DEPTH, PRODUCT_ROWS,
    },
};
use crate::kernels::{
    params_word::params_pair,
    warp_codes::{quad_max, quad_sum, ROUNDER, VISIBLE_FLOOR},
};

/// `1.5 · 2²³`: for `|x| < 2²²`, the bits of `x + ROUND_SIGNED` are those of `0x4B40_0000` plus
/// `x` rounded to the nearest integer (ties to even), so their low byte is the rounded `x` as a
/// two's complement byte, with no conversion.
const ROUND_SIGNED: f32 = 12_582_912.0;

/// One block's query operand: per half of the channels a register of head `g`'s codes
/// (`codes[H]`), and for the lane's heads `2t + e` the score factor `σ · scale / lift` and the
/// offset `q · m_b · scale`.
#[derive(CubeType)]
pub(super) struct BlockQuery {
    codes: Array<u32>,
    factor: Array<f32>,
    offset: Array<f32>,
}

/// Head `g`'s query `q ⊙ s_b` of block `closed` quantized to symmetric 8-bit codes over its
/// channels (the lane's `head_dim / 4`, `own_q[4H + b]` at channel `16H +` [`position`]), the
/// scale `σ = max |q′| / 127` and `q · m_b` reduced over the quad. The codes are `q′ · (1/σ)`
/// rounded to the nearest, ties to even (the reference divides and rounds ties away from zero:
/// the two differ by one code where a quotient falls within an ulp of a half).
#[cube]
pub(super) fn block_query(
    own_q: &Array<f32>,
    k_params: &Array<u32>,
    closed: u32,
    scale: f32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> BlockQuery {
    let d = geo.head_dim;
    let halves = comptime!(d / HALF);
    let mut scaled = Array::<f32>::new(comptime!((d / 4) as usize));
    let mut amax = 0.0f32;
    let mut offset = 0.0f32;
    #[unroll]
    for h in 0..halves {
        #[unroll]
        for b in 0..4u32 {
            let i = comptime!((4 * h + b) as usize);
            let channel = HALF * h + position(t, b, geo.key_bits);
            let params = params_pair(k_params[(closed * d + channel) as usize]);
            let x = own_q[i] * params[1];
            scaled[i] = x;
            amax = f32::max(amax, f32::abs(x));
            offset += own_q[i] * params[0];
        }
    }
    let amax = quad_max(amax);
    let offset = quad_sum(offset);
    let sigma = select(amax > 0.0, amax / 127.0, 1.0);
    let inverse = 1.0 / sigma;
    let mut codes = Array::<u32>::new(halves as usize);
    #[unroll]
    for h in 0..halves {
        let mut word = 0u32;
        #[unroll]
        for b in 0..4u32 {
            let rounded = u32::reinterpret(scaled[comptime!((4 * h + b) as usize)] * inverse + ROUND_SIGNED);
            word |= (rounded & 0xFF) << comptime!(8 * b);
        }
        codes[h as usize] = word;
    }
    BlockQuery {
        codes,
        factor: heads_of_lane(sigma * scale * comptime!(1.0 / lift(geo.key_bits) as f32), t),
        offset: heads_of_lane(offset * scale, t),
    }
}

/// The scores of block `closed` (its slots at positions from `first_slot`) for the lane's slots
/// and heads, scaled: `s[(2i + r) · 2 + e]` for slot `16i + g + 8r`, head `2t + e`;
/// [`masked_score`] at positions before `visible_from`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_scores(
    k_words: &Array<Words>,
    query: &BlockQuery,
    closed: u32,
    first_slot: u32,
    visible_from: u32,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> Array<f32> {
    let (pi, kv) = comptime!((geo.partition, geo.key_vectors()));
    let tiles = comptime!(pi / PRODUCT_ROWS);
    let steps = comptime!(geo.head_dim / PRODUCT_DEPTH);
    let product = MmaDefinition::<u8, i8, i32>::new(16usize, 8usize, 32usize);
    let mut s = Array::<f32>::new(comptime!((4 * tiles) as usize));
    #[unroll]
    for i in 0..tiles {
        let upper = row_words(k_words, closed * pi + PRODUCT_ROWS * i + g, kv);
        let lower = row_words(k_words, closed * pi + PRODUCT_ROWS * i + g + 8, kv);
        let mut dots = Array::<Dots>::new(2usize);
        dots[0] = Dots::new(0i32);
        dots[1] = Dots::new(0i32);
        #[unroll]
        for step in 0..steps {
            let a = row_pair_operand(&upper, &lower, step, t, geo.key_bits);
            let mut b = Array::<QueryCodes>::new(2usize);
            b[0] = QueryCodes::reinterpret(query.codes[comptime!(2 * step) as usize]);
            b[1] = QueryCodes::reinterpret(query.codes[comptime!(2 * step + 1) as usize]);
            product.execute_inplace(&a, &b, &mut dots);
        }
        #[unroll]
        for r in 0..2u32 {
            let seen = first_slot + PRODUCT_ROWS * i + g + 8 * r >= visible_from;
            #[unroll]
            for e in 0..2u32 {
                let dot = f32::cast_from(dots[r as usize][e as usize]);
                let score = query.factor[e as usize] * dot + query.offset[e as usize];
                s[comptime!(((2 * i + r) * 2 + e) as usize)] = select(seen, score, masked_score());
            }
        }
    }
    s
}

/// A block's softmax for the lane's heads: the max `top[e]` over the block's slots, and its
/// scores turned into numerators `exp(s − top)` (0 where masked) with their mass `mass[e]`.
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
        let mut m = masked_score();
        #[unroll]
        for x in 0..comptime!(count / 2) {
            m = f32::max(m, s[comptime!((2 * x + e) as usize)]);
        }
        let m = column_max(m);
        let mut l = 0.0f32;
        #[unroll]
        for x in 0..comptime!(count / 2) {
            let at = comptime!((2 * x + e) as usize);
            let p = select(s[at] > VISIBLE_FLOOR, f32::exp(s[at] - m), 0.0);
            s[at] = p;
            l += p;
        }
        top[e as usize] = m;
        mass[e as usize] = column_sum(l);
    }
    BlockSoftmax { top, mass }
}

/// The weight operands of a block: per value group and k-step two registers of head `g`'s codes
/// (`codes[(vg · steps + s) · 2 + h]`), and for the lane's heads `2t + e` per group the output
/// factor `τ / lift` (`factor[vg · 2 + e]`) and offset `Σ_t p_t m_t` (`offset[vg · 2 + e]`),
/// both times `join`, the block's weight in the running output.
#[derive(CubeType)]
pub(super) struct BlockWeights {
    codes: Array<u32>,
    factor: Array<f32>,
    offset: Array<f32>,
}

/// Head `g`'s numerators at the lane's slots (`own_p[4H + b]` at slot `16H +` [`position`], from
/// the warp's tile) scaled by the slots' value scales per group and quantized to 8-bit codes from
/// 0 (`τ = max p′ / 255` per group, reduced over the quad; `p′ · (1/τ)` rounded to the nearest,
/// ties to even, as for the query codes).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_weights(
    own_p: &Array<f32>,
    v_params: &Array<u32>,
    closed: u32,
    join: &Array<f32>,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) -> BlockWeights {
    let (pi, groups) = comptime!((geo.partition, geo.value_groups()));
    let halves = comptime!(pi / HALF);
    let mut weights = BlockWeights {
        codes: Array::<u32>::new(comptime!((groups * halves) as usize)),
        factor: Array::<f32>::new(comptime!((2 * groups) as usize)),
        offset: Array::<f32>::new(comptime!((2 * groups) as usize)),
    };
    #[unroll]
    for vg in 0..groups {
        let mut scaled = Array::<f32>::new(comptime!((pi / 4) as usize));
        let mut max = 0.0f32;
        let mut offset = 0.0f32;
        #[unroll]
        for h in 0..halves {
            #[unroll]
            for b in 0..4u32 {
                let i = comptime!((4 * h + b) as usize);
                let slot = HALF * h + position(t, b, geo.value_bits);
                let params = params_pair(v_params[((closed * pi + slot) * groups + vg) as usize]);
                let x = own_p[i] * params[1];
                scaled[i] = x;
                max = f32::max(max, x);
                offset += own_p[i] * params[0];
            }
        }
        let max = quad_max(max);
        let offset = heads_of_lane(quad_sum(offset), t);
        let tau = select(max > 0.0, max / 255.0, 1.0);
        let inverse = 1.0 / tau;
        let factor = heads_of_lane(tau / comptime!(lift(geo.value_bits) as f32), t);
        #[unroll]
        for e in 0..2u32 {
            weights.factor[comptime!((2 * vg + e) as usize)] = factor[e as usize] * join[e as usize];
            weights.offset[comptime!((2 * vg + e) as usize)] = offset[e as usize] * join[e as usize];
        }
        #[unroll]
        for h in 0..halves {
            let mut word = 0u32;
            #[unroll]
            for b in 0..4u32 {
                let x = f32::min(scaled[comptime!((4 * h + b) as usize)] * inverse, 255.0);
                word |= (u32::reinterpret(x + ROUNDER) & 0xFF) << comptime!(8 * b);
            }
            weights.codes[comptime!((vg * halves + h) as usize)] = word;
        }
    }
    weights
}

/// Adds block `closed`'s outputs to the lane's running ones (already rescaled): `acc[4c + 2r +
/// e]` for channel `16c + g + 8r`, head `2t + e`.
#[cube]
pub(super) fn block_outputs(
    v_words: &Array<Words>,
    weights: &BlockWeights,
    acc: &mut Array<f32>,
    closed: u32,
    g: u32,
    t: u32,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let (d, vv) = comptime!((geo.head_dim, geo.value_vectors()));
    let steps = comptime!(geo.partition / PRODUCT_DEPTH);
    let halves = comptime!(geo.partition / HALF);
    let product = MmaDefinition::<u8, u8, i32>::new(16usize, 8usize, 32usize);
    #[unroll]
    for c in 0..comptime!(d / PRODUCT_ROWS) {
        let vg = comptime!(PRODUCT_ROWS * c / geo.value_group);
        let upper = row_words(v_words, closed * d + PRODUCT_ROWS * c + g, vv);
        let lower = row_words(v_words, closed * d + PRODUCT_ROWS * c + g + 8, vv);
        let mut dots = Array::<Dots>::new(2usize);
        dots[0] = Dots::new(0i32);
        dots[1] = Dots::new(0i32);
        #[unroll]
        for step in 0..steps {
            let a = row_pair_operand(&upper, &lower, step, t, geo.value_bits);
            let mut b = Array::<Codes>::new(2usize);
            b[0] = Codes::reinterpret(weights.codes[comptime!((vg * halves + 2 * step) as usize)]);
            b[1] = Codes::reinterpret(weights.codes[comptime!((vg * halves + 2 * step + 1) as usize)]);
            product.execute_inplace(&a, &b, &mut dots);
        }
        #[unroll]
        for r in 0..2u32 {
            #[unroll]
            for e in 0..2u32 {
                let at = comptime!((4 * c + 2 * r + e) as usize);
                let meta = comptime!((2 * vg + e) as usize);
                acc[at] += weights.factor[meta] * f32::cast_from(dots[r as usize][e as usize]) + weights.offset[meta];
            }
        }
    }
}
