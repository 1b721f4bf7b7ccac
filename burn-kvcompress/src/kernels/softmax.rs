//! The in-cube softmax numerators of a split decode kernel.

use cubecl::prelude::*;

use super::masked_score;

/// Turns the scores `p[g * chunk + t]` of `group` query heads × the first `count ≤ chunk` slots
/// (masked slots hold [`masked_score`]) into `exp(s − m_g)` in place (0 where masked), with each
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
    let unit = UNIT_POS;
    let max_lanes = 16u32;
    let mut lane_max = SharedMemory::<f32>::new((group * 16) as usize);
    if unit < group * max_lanes {
        let g = unit / max_lanes;
        let mut m = masked_score();
        let mut t = unit % max_lanes;
        while t < count {
            m = f32::max(m, p[(g * chunk + t) as usize]);
            t += max_lanes;
        }
        lane_max[unit as usize] = m;
    }
    sync_cube();
    if unit < group {
        let mut m = masked_score();
        for l in 0..max_lanes {
            m = f32::max(m, lane_max[(unit * max_lanes + l) as usize]);
        }
        head_max[unit as usize] = m;
    }
    sync_cube();
    let mut pair = unit;
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
