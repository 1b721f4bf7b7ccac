//! The in-cube softmax numerators of a split decode kernel, and their per-head masses.

use cubecl::prelude::*;

use super::masked_score;

/// Units per head of a per-head reduction: each folds every 16th slot, then one folds the 16.
const LANES: u32 = 16;

/// Turns the scores `p[g * chunk + t]` of `group` query heads × the first `count ≤ chunk` slots
/// (masked slots hold [`masked_score()`]) into `exp(s − m_g)` in place (0 where masked), with each
/// head's max score `m_g` written to `head_max[g]`; slots from `count` on are neither read nor
/// written. The max runs on 16 units per head, then one. Every unit of the
/// cube must call it (it synchronizes the cube), and the cube needs at least `16 · group` units.
#[cube]
pub fn split_softmax(
    p: &mut SharedMemory<f32>,
    head_max: &mut SharedMemory<f32>,
    count: u32,
    #[comptime] group: u32,
    #[comptime] chunk: u32,
) {
    head_reduce(p, head_max, count, group, chunk, true);
    let mut pair = UNIT_POS;
    while pair < group * count {
        let g = pair / count;
        let index = g * chunk + pair % count;
        let s = p[index as usize];
        let mut e = 0.0f32;
        if s > masked_score() {
            e = f32::exp(s - head_max[g as usize]);
        }
        p[index as usize] = e;
        pair += CUBE_DIM;
    }
    sync_cube();
}

/// Each head's mass `l_g = Σ_t p[g * chunk + t]` over the first `count` slots (the numerators
/// [`split_softmax()`] left) into `head_sum[g]`. Every unit of the cube must call it (it
/// synchronizes the cube), and the cube needs at least `16 · group` units.
#[cube]
pub fn split_masses(
    p: &SharedMemory<f32>,
    head_sum: &mut SharedMemory<f32>,
    count: u32,
    #[comptime] group: u32,
    #[comptime] chunk: u32,
) {
    head_reduce(p, head_sum, count, group, chunk, false);
}

/// `out[g]` = the max (`max`) or the sum (otherwise) of `p[g * chunk + t]` over `t < count`, on
/// [`LANES`] units per head, then one; the max of no slots is [`masked_score`], their sum 0.
/// The caller synchronizes the cube after writing `p`; this synchronizes it before returning.
#[cube]
fn head_reduce(
    p: &SharedMemory<f32>,
    out: &mut SharedMemory<f32>,
    count: u32,
    #[comptime] group: u32,
    #[comptime] chunk: u32,
    #[comptime] max: bool,
) {
    let unit = UNIT_POS;
    let mut lanes = SharedMemory::<f32>::new(comptime!((group * LANES) as usize));
    let mut empty = 0.0f32;
    if comptime!(max) {
        empty = masked_score();
    }
    if unit < group * LANES {
        let g = unit / LANES;
        let mut acc = empty;
        let mut t = unit % LANES;
        while t < count {
            acc = fold(acc, p[(g * chunk + t) as usize], max);
            t += LANES;
        }
        lanes[unit as usize] = acc;
    }
    sync_cube();
    if unit < group {
        let mut acc = empty;
        for l in 0..LANES {
            acc = fold(acc, lanes[(unit * LANES + l) as usize], max);
        }
        out[unit as usize] = acc;
    }
    sync_cube();
}

#[cube]
fn fold(acc: f32, x: f32, #[comptime] max: bool) -> f32 {
    if comptime!(max) {
        f32::max(acc, x)
    } else {
        acc + x
    }
}
