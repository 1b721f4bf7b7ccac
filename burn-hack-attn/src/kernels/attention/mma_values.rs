//! The value side of the tensor-core decode kernel ([`mma_kernel`](super::mma_kernel)): the
//! calling lane's share of the outputs ([`OutputShare`]), a closed block's value product
//! `Oᵀ = V̂ᵀ · P̂ᵀ` with Eq. 4's corrections ([`closed_block_values`]) and the tail block in f32
//! ([`tail_values`]).

use burn_kvcompress::kernels::warp_mma::WARP;
use cubecl::{cmma::MmaDefinition, prelude::*};

use super::mma_geometry::{MmaGeometry, PRODUCT_COLUMNS, PRODUCT_ROWS};
use super::mma_operands::{Codes, Dots, LIFTED, ONE_CODES};
use super::mma_stage::{BlockStage, WarpBlocks};
use crate::kernels::{
    params_word::params_pair,
    warp_codes::{lane_lift, lifted_codes},
};

/// The calling lane's share of the output products' corrections ([`MmaGeometry::value_fold`]):
/// columns `2 pair, 2 pair + 1` (heads `8h + 2 pair + e` of head slot `h`) of tiles `fold · q +
/// offset`, whose lane rows start at channel `first_channel = 16 offset + g` (lane `4g + t`).
#[derive(CubeType)]
pub(super) struct OutputShare {
    pub(super) pair: u32,
    pub(super) offset: u32,
    pub(super) first_channel: u32,
}

/// The calling lane's [`OutputShare`].
#[cube]
pub(super) fn output_share(#[comptime] geo: MmaGeometry) -> OutputShare {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let offset = t / comptime!(geo.lane_columns());
    OutputShare { pair: t % comptime!(geo.lane_columns()), offset, first_channel: PRODUCT_ROWS * offset + g }
}

/// The channel of the share's row `row` (0, or 1 for 8 channels on) in its `q`-th tile.
#[cube]
pub(super) fn share_channel(share: &OutputShare, q: u32, row: u32, #[comptime] geo: MmaGeometry) -> u32 {
    share.first_channel + PRODUCT_ROWS * geo.value_fold() * q + 8 * row
}

/// The lane whose softmax holds the head of the share's column `2 pair + e`: lane `4 (2 pair +
/// e)`, whose `g` is that column.
#[cube]
pub(super) fn column_owner(share: &OutputShare, e: u32) -> u32 {
    4 * (2 * share.pair + e)
}

/// The closed block staged in the calling warp's `stage`: per tile of 16 channels, the value
/// products with the P codes (`codes`, as [`block_softmax`](super::mma_softmax::block_softmax) wrote them) and Eq. 4's corrections,
/// joined to `total` with the heads' `p_meta` (lo, step, code sum, keep, join per head slot).
/// Each lane corrects the values of its pair of columns in the tiles it takes
/// ([`MmaGeometry::value_fold`]), fetched from the lane whose accumulator holds them.
#[cube]
pub(super) fn closed_block_values(
    stage: &BlockStage,
    region: u32,
    codes: &Array<u32>,
    p_meta: &Array<f32>,
    total: &mut Array<f32>,
    #[comptime] geo: MmaGeometry,
) {
    let g = (UNIT_POS % WARP) / 4;
    let d = geo.head_dim;
    let product = MmaDefinition::<u8, u8, i32>::new(16usize, 8usize, 32usize);
    let fold = comptime!(geo.value_fold());
    let share = output_share(geo);
    // The lane holding this lane's columns `2 pair, 2 pair + 1` in its accumulator.
    let holder = 4 * g + share.pair;
    // The rows of the lane's products start at channel `g`, those of its corrections at the
    // share's first channel: slices from its first element of each buffer.
    let pairs_end = (region + 1) * comptime!(geo.warp_value_pairs());
    let pairs_at = pairs_end - comptime!(geo.warp_value_pairs()) + g * comptime!(geo.value_words() / 2);
    let lane_words = stage.value_words.slice(pairs_at as usize, pairs_end as usize);
    let lane_params =
        stage.value_params.slice((region * d + share.first_channel) as usize, ((region + 1) * d) as usize);
    let lift = lane_lift();
    // Lanes of the padding columns `padded_group ..` put ones there where those give the sums.
    let mut ones = false;
    if comptime!(geo.value_sums_from_products()) {
        ones = g >= comptime!(geo.padded_group());
    }
    #[unroll]
    for h in 0..geo.lane_heads() {
        // The P operand: depth half `r` of step `step` holds slots `32 step + 16 r + 4b + t`,
        // lane `4g + t`'s own codes of slot tiles `4 step + 2r` and `4 step + 2r + 1`.
        let mut weights = Array::<Codes>::new(comptime!((2 * geo.slot_steps()) as usize));
        #[unroll]
        for x in 0..comptime!(2 * geo.slot_steps()) {
            let own = codes[(h * comptime!(geo.slot_tiles() / 2) + x) as usize];
            weights[x as usize] = Codes::reinterpret(select(ones, ONE_CODES, own));
        }
        // Each column's head metadata, from the lanes that own the head; the factors of the dot
        // products and (where the products give them) of the code sums undo the lift.
        let mut meta = Array::<f32>::new(8usize);
        #[unroll]
        for e in 0..2u32 {
            #[unroll]
            for k in 0..4u32 {
                let owned = plane_shuffle(p_meta[(4 * h + k) as usize], column_owner(&share, e));
                let factor = comptime!(if k == 0 || (k == 1 && geo.value_sums_from_products()) { LIFTED } else { 1.0 });
                meta[(4 * e + k) as usize] = owned * factor;
            }
        }
        #[unroll]
        for q in 0..comptime!(geo.channel_tiles() / fold) {
            // The lane's dot products `[2 half + e]` of tile `fold · q + offset`, and (where the
            // products give them) its rows' code sums `[half]`.
            let mut lane_dots = Array::<i32>::new(4usize);
            let mut lane_sums = Array::<i32>::new(2usize);
            #[unroll]
            for f in 0..fold {
                let mt = fold * q + f;
                let mut dots = Array::<Dots>::new(2usize);
                dots[0] = Dots::new(0i32);
                dots[1] = Dots::new(0i32);
                #[unroll]
                for step in 0..geo.slot_steps() {
                    let mut a = Array::<Codes>::new(4usize);
                    #[unroll]
                    for half in 0..2u32 {
                        // Channel `16 mt + 8 half + g`.
                        let words = lane_words
                            [comptime!(((PRODUCT_ROWS * mt + 8 * half) * (geo.value_words() / 2) + step) as usize)];
                        #[unroll]
                        for k in 0..2u32 {
                            a[(half + 2 * k) as usize] = lifted_codes(words[k as usize], lift);
                        }
                    }
                    let mut b = Array::<Codes>::new(2usize);
                    b[0] = weights[(2 * step) as usize];
                    b[1] = weights[(2 * step + 1) as usize];
                    product.execute_inplace(&a, &b, &mut dots);
                }
                #[unroll]
                for x in 0..4u32 {
                    let dot = dots[(x / 2) as usize][(x % 2) as usize];
                    if comptime!(f == 0) {
                        // Lanes with offset 0 hold their own columns (`pair = t`).
                        lane_dots[x as usize] = dot;
                    } else {
                        lane_dots[x as usize] =
                            select(share.offset == f, plane_shuffle(dot, holder), lane_dots[x as usize]);
                    }
                }
                if comptime!(geo.value_sums_from_products()) {
                    // Column 7 (lane `4g + 3`'s second) is a ones column; so is the own first
                    // column of every lane whose offset is not 0 (`2t ≥ padded_group`).
                    #[unroll]
                    for half in 0..2u32 {
                        if comptime!(f == 0) {
                            lane_sums[half as usize] = plane_shuffle(dots[half as usize][1], 4 * g + 3);
                        } else {
                            lane_sums[half as usize] =
                                select(share.offset == f, dots[half as usize][0], lane_sums[half as usize]);
                        }
                    }
                }
            }
            #[unroll]
            for half in 0..2u32 {
                // Channel `16 (fold · q + offset) + 8 half + g`.
                let channel = comptime!((PRODUCT_ROWS * fold * q + 8 * half) as usize);
                let v_params = params_pair(lane_params[channel]);
                let (v_lo, v_step) = (v_params[0], v_params[1]);
                let v_total = if comptime!(geo.value_sums_from_products()) {
                    f32::cast_from(lane_sums[half as usize])
                } else {
                    let sums_at = region * d + share.first_channel;
                    let staged = stage.value_sums.slice(sums_at as usize, ((region + 1) * d) as usize);
                    f32::cast_from(staged[channel])
                };
                #[unroll]
                for e in 0..2u32 {
                    let m = 4 * e;
                    let dot = f32::cast_from(lane_dots[(2 * half + e) as usize]);
                    let block = v_step * (meta[m as usize] * dot + meta[(m + 1) as usize] * v_total)
                        + v_lo * meta[(m + 2) as usize];
                    let at = ((q * geo.lane_heads() + h) * 4 + 2 * half + e) as usize;
                    total[at] = total[at] * meta[(m + 3) as usize] + block;
                }
            }
        }
    }
}

/// The tail block from slot `block_first`: `Σ p · v` in f32 over its slots before the split's
/// end, the numerators `p` (in `s`) fetched from the lanes that hold them, joined to `total` with
/// `p_meta`'s keep and join.
#[cube]
pub(super) fn tail_values(
    tail: &Array<f32>,
    slots: &WarpBlocks,
    block_first: u32,
    s: &Array<f32>,
    p_meta: &Array<f32>,
    total: &mut Array<f32>,
    #[comptime] geo: MmaGeometry,
) {
    let share = output_share(geo);
    let d = geo.head_dim;
    let stream_row0 = slots.stream * (slots.len - slots.quantized);
    // The lane's rows `x`: row `x mod 2` of the share's tile `x / 2`.
    let rows = comptime!(2 * geo.channel_tiles() / geo.value_fold());
    #[unroll]
    for h in 0..geo.lane_heads() {
        let mut join = Array::<f32>::new(2usize);
        #[unroll]
        for e in 0..2u32 {
            let owner = column_owner(&share, e);
            join[e as usize] = plane_shuffle(p_meta[(4 * h) as usize], owner);
            let keep = plane_shuffle(p_meta[(4 * h + 3) as usize], owner);
            #[unroll]
            for x in 0..rows {
                let at = (((x / 2) * geo.lane_heads() + h) * 4 + 2 * (x % 2) + e) as usize;
                total[at] *= keep;
            }
        }
        #[unroll]
        for j in 0..geo.slot_tiles() {
            #[unroll]
            for o in 0..PRODUCT_COLUMNS {
                // Slot `8j + o` of the block: held by lanes `4g' + o mod 4` at `c = o / 4`.
                let slot = block_first + PRODUCT_COLUMNS * j + o;
                let held = s[((h * geo.slot_tiles() + j) * 2 + o / 4) as usize];
                let mut p = Array::<f32>::new(2usize);
                #[unroll]
                for e in 0..2u32 {
                    p[e as usize] = join[e as usize] * plane_shuffle(held, column_owner(&share, e) + o % 4);
                }
                if slot < slots.end {
                    let row = stream_row0 + slot - slots.quantized;
                    #[unroll]
                    for x in 0..rows {
                        let channel = share_channel(&share, x / 2, x % 2, geo);
                        let v = tail[(row * d + channel) as usize];
                        #[unroll]
                        for e in 0..2u32 {
                            let at = (((x / 2) * geo.lane_heads() + h) * 4 + 2 * (x % 2) + e) as usize;
                            total[at] += p[e as usize] * v;
                        }
                    }
                }
            }
        }
    }
}
