//! The float slots (sinks and tail) of a channel-layout decode step, one warp on a run of them,
//! in f32 (read from f16 or f32 buffers): each warp of the tensor-core kernel
//! ([`channel_mma_decode_kernel`]) takes a share of its stream's float slots before its closed
//! blocks, and starts its running softmax from what it found there.
//!
//! The warp reads one slot's key and value rows together, lane `l` channels `l + 32k` of each
//! (coalesced). A round issues the loads of [`ROUND_SLOTS`] slots before it uses any of them (a
//! row walked one dependent load at a time made the float slots the step's longest chain at batch
//! 1, about 100 µs at 32K, `results/hack-decode-channel-h200.md`), takes every head's score of
//! each of its slots as a sum over the warp, then joins the round's slots to each head's running
//! softmax at once and adds the weighted value channels to the lane's running outputs.
//!
//! [`channel_mma_decode_kernel`]: super::mma_kernel::channel_mma_decode_kernel

use burn_kvcompress::kernels::{masked_score, warp_mma::WARP};
use cubecl::prelude::*;

use super::float_slots::FloatSlotRows;
use crate::kernels::warp_codes::VISIBLE_FLOOR;

/// Slots whose rows a warp loads before it uses the first of them.
const ROUND_SLOTS: u32 = 4;

/// What a warp found over its float slots, for every head `h < group` of its stream:
/// unnormalized outputs at the lane's channels `lane + 32k` (`acc[h · head_dim / 32 + k]`), and the
/// max score and mass (`top[h]`, `mass[h]`, the same in every lane).
#[derive(CubeType)]
pub struct FloatPartial {
    pub acc: Array<f32>,
    pub top: Array<f32>,
    pub mass: Array<f32>,
}

/// Attention of the calling warp over float slots `first .. end` of its stream for the `group`
/// heads whose queries start at `first_query` of `q` (`[group · head_dim]` there), slots at
/// positions from `visible_from` seen.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn float_warp<F: Float>(
    q: &Array<f32>,
    first_query: u32,
    sinks_k: &Array<F>,
    sinks_v: &Array<F>,
    tail_k: &Array<F>,
    tail_v: &Array<F>,
    slots: &FloatSlotRows,
    first: u32,
    end: u32,
    visible_from: u32,
    scale: f32,
    #[comptime] group: u32,
    #[comptime] head_dim: u32,
) -> FloatPartial {
    let lane = UNIT_POS % WARP;
    let per_lane = comptime!(head_dim / WARP);
    // Head g's query and running outputs at the lane's channels `lane + 32k`: index `g · per_lane + k`.
    let mut own_q = Array::<f32>::new(comptime!((group * per_lane) as usize));
    let mut partial = FloatPartial {
        acc: Array::<f32>::new(comptime!((group * per_lane) as usize)),
        top: Array::<f32>::new(group as usize),
        mass: Array::<f32>::new(group as usize),
    };
    #[unroll]
    for g in 0..group {
        partial.top[g as usize] = masked_score();
        partial.mass[g as usize] = 0.0;
        #[unroll]
        for k in 0..per_lane {
            own_q[comptime!((g * per_lane + k) as usize)] = q[(first_query + g * head_dim + lane + WARP * k) as usize];
            partial.acc[comptime!((g * per_lane + k) as usize)] = 0.0;
        }
    }
    let mut round = first;
    while round < end {
        // The round's rows (a slot past `end` rereads the last one, masked below).
        let mut keys = Array::<f32>::new(comptime!((ROUND_SLOTS * per_lane) as usize));
        let mut values = Array::<f32>::new(comptime!((ROUND_SLOTS * per_lane) as usize));
        #[unroll]
        for x in 0..ROUND_SLOTS {
            let slot = u32::min(round + x, end - 1);
            let base = slots.row_start(slot, head_dim) + lane;
            #[unroll]
            for k in 0..per_lane {
                keys[comptime!((x * per_lane + k) as usize)] = slots.read(sinks_k, tail_k, slot, base + WARP * k);
                values[comptime!((x * per_lane + k) as usize)] = slots.read(sinks_v, tail_v, slot, base + WARP * k);
            }
        }
        // Every slot's score for every head first: independent sums over the warp, so that their
        // shuffles overlap instead of each slot's join waiting on the last one's.
        let mut scores = Array::<f32>::new(comptime!((ROUND_SLOTS * group) as usize));
        #[unroll]
        for x in 0..ROUND_SLOTS {
            let i = round + x;
            let seen = i < end && slots.position(i) >= visible_from;
            #[unroll]
            for g in 0..group {
                let mut part = 0.0f32;
                #[unroll]
                for k in 0..per_lane {
                    part +=
                        own_q[comptime!((g * per_lane + k) as usize)] * keys[comptime!((x * per_lane + k) as usize)];
                }
                scores[comptime!((x * group + g) as usize)] = select(seen, warp_sum(part) * scale, masked_score());
            }
        }
        // Then each head joins the round's slots at once, under their max and its running one.
        #[unroll]
        for g in 0..group {
            let before = partial.top[g as usize];
            let mut top = before;
            #[unroll]
            for x in 0..ROUND_SLOTS {
                top = f32::max(top, scores[comptime!((x * group + g) as usize)]);
            }
            let keep = select(before > VISIBLE_FLOOR, f32::exp(before - top), 0.0);
            let mut mass = partial.mass[g as usize] * keep;
            #[unroll]
            for k in 0..per_lane {
                partial.acc[comptime!((g * per_lane + k) as usize)] *= keep;
            }
            #[unroll]
            for x in 0..ROUND_SLOTS {
                let score = scores[comptime!((x * group + g) as usize)];
                let p = select(score > VISIBLE_FLOOR, f32::exp(score - top), 0.0);
                mass += p;
                #[unroll]
                for k in 0..per_lane {
                    let at = comptime!((g * per_lane + k) as usize);
                    partial.acc[at] += p * values[comptime!((x * per_lane + k) as usize)];
                }
            }
            partial.mass[g as usize] = mass;
            partial.top[g as usize] = top;
        }
        round += ROUND_SLOTS;
    }
    partial
}

/// Sums `v` over the warp's 32 lanes in five exchanges written out: CubeCL's `plane_sum` compiles to
/// a loop over the warp size read at run time, a branch and a dependent shuffle an iteration,
/// which the compiler cannot interleave with other sums (on an H200 the float slots' sums were
/// loops of `SHFL.BFLY` and `BRA` between the rounds' loads and the softmax).
#[cube]
fn warp_sum(v: f32) -> f32 {
    let v = v + plane_shuffle_xor(v, 16);
    let v = v + plane_shuffle_xor(v, 8);
    let v = v + plane_shuffle_xor(v, 4);
    let v = v + plane_shuffle_xor(v, 2);
    v + plane_shuffle_xor(v, 1)
}
