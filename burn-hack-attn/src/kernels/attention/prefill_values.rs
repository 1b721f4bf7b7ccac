//! The fused prefill kernel's ([`prefill_kernel`](super::prefill_kernel::prefill_kernel))
//! softmax and value steps for one key block: the block's score range per row
//! ([`score_ranges`], step 2c), the running max, α and the 8-bit P codes ([`block_weights`], step
//! 2d), and P·V ([`closed_block_values`], [`tail_values`], step 2e).

use burn_kvcompress::kernels::masked_score as masked;
use cubecl::prelude::*;

use super::prefill_kernel::PrefillGeometry;
use crate::kernels::{
    eight_bit::{code8, numerator, scale8},
    params_word::{params_min, params_scale},
};

/// The block's P (attention weights) in 8 bits, in shared memory: `pairs`, `[rows / 2, Π]` codes
/// of two rows per `u32` (16-bit lanes); `min`, `scale`, `sum`, `[rows]`.
#[derive(CubeType)]
pub(super) struct WeightTile {
    pub(super) pairs: SharedMemory<u32>,
    pub(super) min: SharedMemory<f32>,
    pub(super) scale: SharedMemory<f32>,
    pub(super) sum: SharedMemory<f32>,
}

/// The cube's [`WeightTile`].
#[cube]
pub(super) fn weight_tile(#[comptime] geo: PrefillGeometry) -> WeightTile {
    WeightTile {
        pairs: SharedMemory::<u32>::new(comptime!((geo.rows / 2 * geo.partition) as usize)),
        min: SharedMemory::<f32>::new(comptime!(geo.rows as usize)),
        scale: SharedMemory::<f32>::new(comptime!(geo.rows as usize)),
        sum: SharedMemory::<f32>::new(comptime!(geo.rows as usize)),
    }
}

/// Each statistics lane's partials per row, `[rows, stat_lanes]` in shared memory: the block's
/// max (`hi`) and min (`lo`) score over the lane's keys, its numerators' mass and code sum.
#[derive(CubeType)]
pub(super) struct RowPartials {
    pub(super) hi: SharedMemory<f32>,
    pub(super) lo: SharedMemory<f32>,
    pub(super) mass: SharedMemory<f32>,
    pub(super) codes: SharedMemory<f32>,
}

/// The cube's [`RowPartials`].
#[cube]
pub(super) fn row_partials(#[comptime] geo: PrefillGeometry) -> RowPartials {
    RowPartials {
        hi: SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize)),
        lo: SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize)),
        mass: SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize)),
        codes: SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize)),
    }
}

/// Step 2c (units `t < pairs · stat_lanes`): per row of `stat_pair`, the block's min and max
/// score in `s: [rows, Π]` over this `lane`'s keys, into `partials`.
#[cube]
pub(super) fn score_ranges(
    s: &SharedMemory<f32>,
    partials: &mut RowPartials,
    stat_pair: u32,
    lane: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let t = UNIT_POS;
    let pi = geo.partition;
    let pairs = comptime!(geo.rows / 2);
    let lanes = comptime!(geo.stat_lanes());
    if t < pairs * lanes {
        #[unroll]
        for half in 0..2u32 {
            let row = 2 * stat_pair + half;
            let mut lo = f32::new(3.0e38);
            let mut hi = masked();
            let mut key = lane;
            while key < pi {
                let v = s[(row * pi + key) as usize];
                lo = f32::min(lo, v);
                hi = f32::max(hi, v);
                key += lanes;
            }
            partials.lo[(row * lanes + lane) as usize] = lo;
            partials.hi[(row * lanes + lane) as usize] = hi;
        }
    }
}

/// Step 2d (units `t < pairs · stat_lanes`): per row of `stat_pair`, the running max (in
/// `run_max`), `alpha` (the rescaling of what came before) and P's 8-bit metadata (into
/// `weights`, by lane 0); then this `lane`'s keys' P codes into `weights` (a closed block) or
/// their f32 numerators into `s` (the tail), and their masses and code sums into `partials`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_weights(
    s: &mut SharedMemory<f32>,
    weights: &mut WeightTile,
    alpha: &mut SharedMemory<f32>,
    partials: &mut RowPartials,
    run_max: &mut Array<f32>,
    stat_pair: u32,
    lane: u32,
    closed: bool,
    #[comptime] geo: PrefillGeometry,
) {
    let t = UNIT_POS;
    let pi = geo.partition;
    let pairs = comptime!(geo.rows / 2);
    let lanes = comptime!(geo.stat_lanes());
    if t < pairs * lanes {
        let mut p_lo = Array::<f32>::new(2usize);
        let mut p_step = Array::<f32>::new(2usize);
        #[unroll]
        for half in 0..2u32 {
            let row = 2 * stat_pair + half;
            let mut lo = f32::new(3.0e38);
            let mut hi = masked();
            for l in 0..lanes {
                lo = f32::min(lo, partials.lo[(row * lanes + l) as usize]);
                hi = f32::max(hi, partials.hi[(row * lanes + l) as usize]);
            }
            let m = f32::max(run_max[half as usize], hi);
            let a = f32::exp(run_max[half as usize] - m);
            run_max[half as usize] = m;
            p_lo[half as usize] = numerator(lo, m);
            p_step[half as usize] = scale8(p_lo[half as usize], numerator(hi, m));
            if lane == 0 {
                alpha[row as usize] = a;
                weights.min[row as usize] = p_lo[half as usize];
                weights.scale[row as usize] = p_step[half as usize];
            }
        }
        let mut masses = Array::<f32>::new(2usize);
        let mut code_sums = Array::<f32>::new(2usize);
        masses[0] = 0.0;
        masses[1] = 0.0;
        code_sums[0] = 0.0;
        code_sums[1] = 0.0;
        let mut key = lane;
        while key < pi {
            let mut packed = 0u32;
            #[unroll]
            for half in 0..2u32 {
                let at = ((2 * stat_pair + half) * pi + key) as usize;
                let e = numerator(s[at], run_max[half as usize]);
                masses[half as usize] += e;
                if closed {
                    let code = code8(e, p_lo[half as usize], p_step[half as usize]);
                    code_sums[half as usize] += code;
                    packed |= u32::cast_from(code) << (16 * half);
                } else {
                    s[at] = e;
                }
            }
            weights.pairs[(stat_pair * pi + key) as usize] = packed;
            key += lanes;
        }
        #[unroll]
        for half in 0..2u32 {
            let at = ((2 * stat_pair + half) * lanes + lane) as usize;
            partials.mass[at] = masses[half as usize];
            partials.codes[at] = code_sums[half as usize];
        }
    }
}

/// Step 2e for closed block `kb`: adds Eq. 4 over the block (P codes, unpacked V codes, the
/// cached V sums) to `acc`, the outputs of rows `out_row0 ..` of channel `out_c`, in passes of
/// `pass_rows` rows.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn closed_block_values(
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    weights: &WeightTile,
    acc: &mut Array<f32>,
    stream: u32,
    blocks: u32,
    kb: u32,
    out_row0: u32,
    out_c: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let d = geo.head_dim;
    let pi = geo.partition;
    let per_word = comptime!(32 / geo.bits);
    let mask = (1u32 << geo.bits) - 1;
    let words_per_value = comptime!(geo.partition * geo.bits / 32);
    let pass_rows = comptime!(geo.pass_rows());
    let row = (stream * blocks + kb) * d + out_c;
    let params = v_params[row as usize];
    let (vs, vm, v_sum) = (params_scale(params), params_min(params), f32::cast_from(v_sums[row as usize]));
    // In passes of `pass_rows` rows, so that only one pass's integer sums are live.
    #[unroll]
    for pass in 0..comptime!(geo.output_rows / geo.pass_rows()) {
        let r0 = pass * pass_rows;
        let mut dot = Array::<u32>::new(comptime!(geo.pass_rows() as usize));
        #[unroll]
        for r in 0..pass_rows {
            dot[r as usize] = 0;
        }
        for w in 0..words_per_value {
            let word = v_words[(row * words_per_value + w) as usize];
            let mut sums = Array::<u32>::new(comptime!((geo.pass_rows() / 2) as usize));
            #[unroll]
            for pp in 0..comptime!(geo.pass_rows() / 2) {
                sums[pp as usize] = 0;
            }
            #[unroll]
            for j in 0..per_word {
                let code = (word >> (j * geo.bits)) & mask;
                #[unroll]
                for pp in 0..comptime!(geo.pass_rows() / 2) {
                    sums[pp as usize] +=
                        weights.pairs[(((out_row0 + r0) / 2 + pp) * pi + w * per_word + j) as usize] * code;
                }
            }
            #[unroll]
            for pp in 0..comptime!(geo.pass_rows() / 2) {
                dot[(2 * pp) as usize] += sums[pp as usize] & 0xFFFF;
                dot[(2 * pp + 1) as usize] += sums[pp as usize] >> 16;
            }
        }
        #[unroll]
        for r in 0..pass_rows {
            let pr = (out_row0 + r0 + r) as usize;
            acc[(r0 + r) as usize] += weights.scale[pr] * vs * f32::cast_from(dot[r as usize])
                + weights.scale[pr] * weights.sum[pr] * vm
                + weights.min[pr] * vs * v_sum
                + f32::cast_from(pi) * weights.min[pr] * vm;
        }
    }
}

/// Step 2e for the tail block from slot `block_first`: adds `p · v` in f32 over its slots (the
/// numerators `p` in `s: [rows, Π]`, the values in `tail: [streams · tail_len, head_dim]`) to
/// `acc`, the outputs of rows `out_row0 ..` of channel `out_c`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn tail_values(
    tail: &Array<f32>,
    s: &SharedMemory<f32>,
    acc: &mut Array<f32>,
    stream: u32,
    len: u32,
    block_first: u32,
    quantized_len: u32,
    tail_len: u32,
    out_row0: u32,
    out_c: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let d = geo.head_dim;
    let pi = geo.partition;
    let output_rows = comptime!(geo.output_rows);
    for key in 0..pi {
        let slot = block_first + key;
        if slot < len {
            let v = tail[((stream * tail_len + slot - quantized_len) * d + out_c) as usize];
            #[unroll]
            for r in 0..output_rows {
                acc[r as usize] += s[((out_row0 + r) * pi + key) as usize] * v;
            }
        }
    }
}
