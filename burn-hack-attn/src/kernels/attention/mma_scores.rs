//! The score product of the tensor-core decode kernel ([`mma_kernel`](super::mma_kernel)),
//! `Sᵀ = Q̂ · K̂ᵀ`: the lane's query operand and metadata ([`query_rows`], once per kernel) and a
//! block's scores with Eq. 4's corrections ([`block_scores`]).

use burn_kvcompress::kernels::{masked_score, warp_mma::WARP};
use cubecl::{cmma::MmaDefinition, prelude::*};

use super::mma_geometry::{MmaGeometry, PRODUCT_COLUMNS, PRODUCT_DEPTH, PRODUCT_ROWS};
use super::mma_operands::{Codes, Dots, LIFTED, ONE_CODES};
use super::mma_stage::{BlockStage, WarpBlocks};
use super::query_kernel::StreamQueries;
use crate::kernels::{
    params_word::params_pair,
    warp_codes::{lane_lift, lifted_codes},
};

/// The calling lane's query operand and its rows' metadata, fixed for the kernel: `operand[(tile ·
/// channel_steps + step) · 4 + r]`, and per lane row `i` (see [`MmaGeometry::lane_rows`]) its Q
/// run's scale, min, and `scale · code sum + key_group · min`, Eq. 4's factor of the key's min
/// (zero for padding rows), each times the attention's scale.
#[derive(CubeType)]
pub(super) struct QueryRows {
    operand: Array<Codes>,
    step: Array<f32>,
    lo: Array<f32>,
    fixed: Array<f32>,
}

/// The key group of score row `row` (that of the last group for padding rows past them).
#[cube]
fn key_part(row: u32, #[comptime] geo: MmaGeometry) -> u32 {
    u32::min(row / comptime!(geo.padded_group()), comptime!(geo.parts() - 1))
}

/// The head slot (see [`MmaGeometry::lane_heads`]) that lane row `i` adds to.
fn head_slot(i: u32, geo: MmaGeometry) -> u32 {
    if geo.padded_group() >= PRODUCT_COLUMNS {
        i % geo.lane_heads()
    } else {
        0
    }
}

/// Whether lane row `i` is the first whose scores go to its head slot.
fn first_row_of_slot(i: u32, geo: MmaGeometry) -> bool {
    (0..i).all(|earlier| head_slot(earlier, geo) != head_slot(i, geo))
}

/// The calling lane's [`QueryRows`] from its stream's quantized queries.
#[cube]
pub(super) fn query_rows(stream_codes: &StreamQueries, scale: f32, #[comptime] geo: MmaGeometry) -> QueryRows {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let d = geo.head_dim;
    let gp = comptime!(geo.padded_group());
    let runs = comptime!(geo.queries().runs());
    let rows = comptime!(geo.lane_rows() as usize);
    let mut queries = QueryRows {
        operand: Array::<Codes>::new(comptime!((geo.score_tiles() * geo.channel_steps() * 4) as usize)),
        step: Array::<f32>::new(rows),
        lo: Array::<f32>::new(rows),
        fixed: Array::<f32>::new(rows),
    };
    #[unroll]
    for i in 0..geo.lane_rows() {
        let row = 8 * i + g;
        let (head, part) = (row % gp, row / gp);
        let valid = head < geo.group && part < geo.parts();
        let run = head * geo.parts() + part;
        let at = u32::min(run, runs - 1);
        let lo = select(valid, stream_codes.meta[at as usize], 0.0);
        let step = select(valid, stream_codes.meta[(at + runs) as usize], 0.0);
        let total = select(valid, stream_codes.meta[(at + 2 * runs) as usize], 0.0);
        // The dot products come lifted, and so do the key sums where the products give them.
        queries.step[i as usize] = step * scale * LIFTED;
        queries.lo[i as usize] = lo * scale * comptime!(if geo.key_sums_from_products() { LIFTED } else { 1.0 });
        queries.fixed[i as usize] = (step * total + f32::cast_from(geo.key_group) * lo) * scale;
    }
    #[unroll]
    for mt in 0..geo.score_tiles() {
        #[unroll]
        for step in 0..geo.channel_steps() {
            #[unroll]
            for r in 0..4u32 {
                // Register r: row `g + 8 (r mod 2)`, depth half `r / 2`; byte b is channel
                // `32 step + 16 (r / 2) + 4b + t`. Key groups are multiples of 16 channels
                // (`mma_geometry`), so the register's 16 channels lie in one, `register_part`.
                let register_part = comptime!((PRODUCT_DEPTH * step + 16 * (r / 2)) / geo.key_group);
                let mut word = 0u32;
                if comptime!(geo.key_sums_from_products() && PRODUCT_ROWS * mt + 8 * (r % 2) >= 8) {
                    // Padding row `8 + g`: ones on the key group of row `g`, whose code sums it
                    // takes.
                    word = select(key_part(g, geo) == register_part, ONE_CODES, 0);
                } else {
                    let row = PRODUCT_ROWS * mt + g + 8 * (r % 2);
                    let (head, part) = (row % gp, row / gp);
                    if head < geo.group && part == register_part {
                        #[unroll]
                        for b in 0..4u32 {
                            let channel = PRODUCT_DEPTH * step + 16 * (r / 2) + 4 * b + t;
                            let code =
                                (stream_codes.codes[((head / 2) * d + channel) as usize] >> (16 * (head % 2))) & 0xFF;
                            word |= code << (8 * b);
                        }
                    }
                }
                queries.operand[((mt * geo.channel_steps() + step) * 4 + r) as usize] = Codes::reinterpret(word);
            }
        }
    }
    queries
}

/// Writes to `s` the scores of the block from slot `block_first`, staged in the calling warp's
/// `stage`: `s[(h · slot_tiles + j) · 2 + c]` for head slot `h` and slot `8j + 4c + t` of the
/// block (lane `4g + t`), scaled, or [`masked_score`] for a slot the lane's sequence does not see.
///
/// The lane reads the stage through slices that start at its own first element, so that every
/// read's offset from them is a compile-time constant.
#[cube]
pub(super) fn block_scores(
    s: &mut Array<f32>,
    stage: &BlockStage,
    region: u32,
    queries: &QueryRows,
    slots: &WarpBlocks,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    let gp = comptime!(geo.padded_group());
    let product = MmaDefinition::<u8, u8, i32>::new(16usize, 8usize, 32usize);
    let count = comptime!((geo.lane_heads() * geo.slot_tiles() * 2) as usize);
    // This lane's column of the key operand in slot tile `j`: slot `8j + 4 (g mod 2) + g / 2`.
    let words_end = (region + 1) * comptime!(geo.warp_key_vectors());
    let words_at = words_end - comptime!(geo.warp_key_vectors()) + (4 * (g % 2) + g / 2) * comptime!(geo.key_stride());
    let lane_words = stage.key_words.slice(words_at as usize, words_end as usize);
    let meta_at = region * comptime!(geo.key_meta());
    let lift = lane_lift();
    #[unroll]
    for j in 0..geo.slot_tiles() {
        let mut key = Array::<Codes>::new(comptime!(geo.key_words() as usize));
        #[unroll]
        for w4 in 0..comptime!(geo.key_words() / 4) {
            let four = lane_words[comptime!((PRODUCT_COLUMNS * j * geo.key_stride() + w4) as usize)];
            #[unroll]
            for w in 0..4u32 {
                key[(4 * w4 + w) as usize] = lifted_codes(four[w as usize], lift);
            }
        }
        #[unroll]
        for mt in 0..geo.score_tiles() {
            let mut dots = Array::<Dots>::new(2usize);
            dots[0] = Dots::new(0i32);
            dots[1] = Dots::new(0i32);
            #[unroll]
            for step in 0..geo.channel_steps() {
                let mut a = Array::<Codes>::new(4usize);
                #[unroll]
                for r in 0..4u32 {
                    a[r as usize] = queries.operand[((mt * geo.channel_steps() + step) * 4 + r) as usize];
                }
                let mut b = Array::<Codes>::new(2usize);
                b[0] = key[(2 * step) as usize];
                b[1] = key[(2 * step + 1) as usize];
                product.execute_inplace(&a, &b, &mut dots);
            }
            // Eq. 4's corrections of the lane's rows `8i + g`, `i = 2 mt + half`, for its slots
            // `8j + 4c + t`.
            #[unroll]
            for half in 0..2u32 {
                let i = 2 * mt + half;
                if comptime!(8 * i < geo.score_rows()) {
                    let part = key_part(8 * i + g, geo);
                    let h = comptime!(head_slot(i, geo));
                    // The metadata of the lane's slot `t` of the block from its key group.
                    let meta = t * comptime!(geo.parts()) + part;
                    let params_end = meta_at + comptime!(geo.key_meta());
                    let lane_params = stage.key_params.slice((meta_at + meta) as usize, params_end as usize);
                    #[unroll]
                    for c in 0..2u32 {
                        // Slot `8j + 4c + t`.
                        let own = comptime!(((PRODUCT_COLUMNS * j + 4 * c) * geo.parts()) as usize);
                        let k_params = params_pair(lane_params[own]);
                        let (k_lo, k_step) = (k_params[0], k_params[1]);
                        // The key group's code sum: from the padding row `8 + g`, or staged.
                        let k_total = if comptime!(geo.key_sums_from_products()) {
                            f32::cast_from(dots[1][c as usize])
                        } else {
                            let sums_end = meta_at + comptime!(geo.key_meta());
                            let lane_sums = stage.key_sums.slice((meta_at + meta) as usize, sums_end as usize);
                            f32::cast_from(lane_sums[own])
                        };
                        let dot = f32::cast_from(dots[half as usize][c as usize]);
                        let q = i as usize;
                        let at = ((h * geo.slot_tiles() + j) * 2 + c) as usize;
                        let term = k_step * (queries.step[q] * dot + queries.lo[q] * k_total) + k_lo * queries.fixed[q];
                        // The head slot's first row sets its score (an add to 0 would cost an
                        // instruction: `0 + x` is not `x` for `x = −0`).
                        if comptime!(first_row_of_slot(i, geo)) {
                            s[at] = term;
                        } else {
                            s[at] += term;
                        }
                    }
                }
            }
        }
    }
    // Key groups of a head held by other lanes (groups below 8).
    #[unroll]
    for x in 0..count {
        #[unroll]
        for k in 0..comptime!(geo.lane_group_shuffles()) {
            s[x] += plane_shuffle_xor(s[x], (4 * gp) << k);
        }
    }
    // The mask, in the blocks that hold the window's edge or the split's end.
    if block_first < slots.visible_from || block_first + geo.partition > slots.end {
        #[unroll]
        for x in 0..count {
            let x32 = x as u32;
            let j = (x32 / 2) % comptime!(geo.slot_tiles());
            let own = block_first + PRODUCT_COLUMNS * j + 4 * (x32 % 2) + t;
            let visible = own >= slots.visible_from && own < slots.end;
            s[x] = select(visible, s[x], masked_score());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_head_slot_has_one_first_score_row() {
        for group in [1, 2, 3, 4, 6, 8, 12, 16] {
            for (head_dim, key_group) in [(64, 32), (128, 64), (128, 128), (128, 32)] {
                let geo = MmaGeometry { group, head_dim, key_group, partition: 64, warps: 4, meta_vector: 1 };
                let rows: Vec<u32> = (0..geo.lane_rows()).filter(|i| 8 * i < geo.score_rows()).collect();
                for h in 0..geo.lane_heads() {
                    let firsts = rows.iter().filter(|&&i| head_slot(i, geo) == h && first_row_of_slot(i, geo)).count();
                    assert_eq!(firsts, 1, "group {group}, {head_dim} channels, key group {key_group}, slot {h}");
                }
            }
        }
    }

    #[test]
    fn slot_columns_give_each_lane_its_value_operand() {
        // Column n of a slot tile is slot 4 (n mod 2) + n / 2; the accumulator gives lane t
        // columns 2t and 2t + 1: slots t and 4 + t, the value product's depth 4t + b pairs.
        for t in 0..4u32 {
            let slots: Vec<u32> = (0..2)
                .map(|c| {
                    let n = 2 * t + c;
                    4 * (n % 2) + n / 2
                })
                .collect();
            assert_eq!(slots, [t, 4 + t]);
        }
    }
}
