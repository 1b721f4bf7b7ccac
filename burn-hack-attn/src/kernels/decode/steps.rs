//! The decode kernel's steps after its scores: quantizing the softmax numerators per block with
//! shared-memory trees, and writing a chunk's partial results.
//!
//! Every step runs on all `chunk` units of the cube; unit `t` owns slot `t` of the chunk.

use burn_kvcompress::kernels::{masked_score as masked, min_max_runs, sum_runs, SplitOut};
use cubecl::prelude::*;

use super::kernel::DecodeGeometry;
use crate::kernels::eight_bit::{code8, numerator, scale8};

/// The softmax numerators of the calling unit's slot and their 8-bit codes per (head, block) =
/// run `g · chunk_blocks + b` of `g · chunk + t`, `b = t / Π`, from the unit's `score` per head:
/// min/max score trees give each head's max (into `head_max`) and each block's min/max of
/// `p = exp(s − m)`; the unit quantizes its own `p` (into `codes`, 0 outside closed blocks:
/// the block's min/max of the unnormalized `p` give the same codes as quantizing the normalized
/// P, up to float rounding) and writes it to `p`, the block's min and scale to `p_min` and
/// `p_scale`. Leaves `p` in `lo` and the codes in `hi` for [`numerator_block_sums`], which the
/// caller runs once it has stored the codes its own way.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn quantize_numerators(
    score: &Array<f32>,
    lo: &mut SharedMemory<f32>,
    hi: &mut SharedMemory<f32>,
    p: &mut SharedMemory<f32>,
    p_min: &mut SharedMemory<f32>,
    p_scale: &mut SharedMemory<f32>,
    head_max: &mut Array<f32>,
    codes: &mut Array<u32>,
    closed: bool,
    #[comptime] geo: DecodeGeometry,
) {
    let t = UNIT_POS;
    let (chunk, pi) = (geo.chunk, geo.partition);
    let chunk_blocks = comptime!(geo.chunk / geo.partition);
    #[unroll]
    for g in 0..geo.group {
        lo[(g * chunk + t) as usize] = score[g as usize];
        hi[(g * chunk + t) as usize] = score[g as usize];
    }
    sync_cube();
    min_max_runs(lo, hi, geo.group * chunk_blocks, pi);
    let own_block = t / pi;
    let mut e = Array::<f32>::new(comptime!(geo.group as usize));
    #[unroll]
    for g in 0..geo.group {
        let mut m = masked();
        for bb in 0..chunk_blocks {
            m = f32::max(m, hi[((g * chunk_blocks + bb) * pi) as usize]);
        }
        head_max[g as usize] = m;
        let root = ((g * chunk_blocks + own_block) * pi) as usize;
        let (s_min, s_max) = (lo[root], hi[root]);
        e[g as usize] = numerator(score[g as usize], m);
        codes[g as usize] = 0;
        if closed {
            let p_lo = numerator(s_min, m);
            let s = scale8(p_lo, numerator(s_max, m));
            codes[g as usize] = u32::cast_from(code8(e[g as usize], p_lo, s));
            if t == own_block * pi {
                p_min[(g * chunk_blocks + own_block) as usize] = p_lo;
                p_scale[(g * chunk_blocks + own_block) as usize] = s;
            }
        }
    }
    sync_cube();
    #[unroll]
    for g in 0..geo.group {
        p[(g * chunk + t) as usize] = e[g as usize];
        lo[(g * chunk + t) as usize] = e[g as usize];
        hi[(g * chunk + t) as usize] = f32::cast_from(codes[g as usize]);
    }
}

/// Each (head, block)'s mass `Σ p` into `block_mass` and P code sum into `p_sum`, from what
/// [`quantize_numerators`] left in `lo` and `hi`. Synchronizes the cube first and last.
#[cube]
pub fn numerator_block_sums(
    lo: &mut SharedMemory<f32>,
    hi: &mut SharedMemory<f32>,
    block_mass: &mut SharedMemory<f32>,
    p_sum: &mut SharedMemory<f32>,
    #[comptime] geo: DecodeGeometry,
) {
    let runs = comptime!(geo.group * geo.chunk / geo.partition);
    sync_cube();
    sum_runs(lo, hi, runs, geo.partition);
    let mut run = UNIT_POS;
    while run < runs {
        block_mass[run as usize] = lo[(run * geo.partition) as usize];
        p_sum[run as usize] = hi[(run * geo.partition) as usize];
        run += CUBE_DIM;
    }
    sync_cube();
}

/// Writes the chunk's unnormalized output per (head, channel), the sum of the `parts` partial
/// sums `lo[(part · group + g) · head_dim + c]`, and each head's max and mass (its blocks'
/// masses) as split `split` of `splits` for the group from query head `first_head`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn write_chunk(
    lo: &SharedMemory<f32>,
    block_mass: &SharedMemory<f32>,
    head_max: &Array<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    target: &SplitOut,
    #[comptime] parts: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let (group, d) = (geo.group, geo.head_dim);
    let chunk_blocks = comptime!(geo.chunk / geo.partition);
    let mut item = UNIT_POS;
    while item < group * d {
        let (g, c) = (item / d, item % d);
        let mut total = 0.0f32;
        #[unroll]
        for part in 0..parts {
            total += lo[((part * group + g) * d + c) as usize];
        }
        target.write_output(out, g, c, total, d);
        if c == 0 {
            let mut l = 0.0f32;
            for bb in 0..chunk_blocks {
                l += block_mass[(g * chunk_blocks + bb) as usize];
            }
            target.write_stats(out_max, out_sum, g, head_max[g as usize], l);
        }
        item += CUBE_DIM;
    }
}
