//! The float slots (sinks and tail) of a channel-layout decode step, one warp on a run of them,
//! in f32 (read from f16 or f32 buffers): the tensor-core kernel's last cube
//! ([`channel_mma_decode_kernel`]) runs its warps on them beside the other cubes' closed blocks.
//!
//! The warp reads one slot's key and value rows together, lane `l` channels `l + 32k` of each
//! (coalesced), takes every head's score as a sum over the warp, joins it to the head's running
//! softmax and adds the weighted value channels to the lane's running outputs. A round issues the
//! loads of [`ROUND_SLOTS`] slots before it uses any of them: at batch 1 the float cubes are the
//! step's longest chain, and a row walked one dependent load at a time kept them busy for about
//! 100 µs at 32K (`results/hack-decode-channel-h200.md`).
//!
//! [`channel_mma_decode_kernel`]: super::mma_kernel::channel_mma_decode_kernel

use burn_kvcompress::kernels::{masked_score, warp_mma::WARP, SplitOut};
use cubecl::prelude::*;

use super::float_slots::FloatSlotRows;
use crate::kernels::warp_codes::join_tops;

/// Slots whose rows a warp loads before it uses the first of them.
const ROUND_SLOTS: u32 = 4;

/// Attention of the calling warp over float slots `first .. end` of its stream for `group` heads
/// whose queries sit in `queries` (`[group · head_dim]`), slots at positions from `visible_from`
/// seen; writes the warp's split of `target` (unnormalized outputs, max and mass per head).
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn float_warp<F: Float>(
    queries: &SharedMemory<f32>,
    sinks_k: &Array<F>,
    sinks_v: &Array<F>,
    tail_k: &Array<F>,
    tail_v: &Array<F>,
    slots: &FloatSlotRows,
    first: u32,
    end: u32,
    visible_from: u32,
    scale: f32,
    target: &SplitOut,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    #[comptime] group: u32,
    #[comptime] head_dim: u32,
) {
    let lane = UNIT_POS % WARP;
    let per_lane = comptime!(head_dim / WARP);
    // Head g's query and running outputs at the lane's channels `lane + 32k`: index `g · per_lane + k`.
    let mut own_q = Array::<f32>::new(comptime!((group * per_lane) as usize));
    let mut acc = Array::<f32>::new(comptime!((group * per_lane) as usize));
    let mut top = Array::<f32>::new(group as usize);
    let mut mass = Array::<f32>::new(group as usize);
    #[unroll]
    for g in 0..group {
        top[g as usize] = masked_score();
        mass[g as usize] = 0.0;
        #[unroll]
        for k in 0..per_lane {
            own_q[comptime!((g * per_lane + k) as usize)] = queries[(g * head_dim + lane + WARP * k) as usize];
            acc[comptime!((g * per_lane + k) as usize)] = 0.0;
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
                let score = select(seen, plane_sum(part) * scale, masked_score());
                // The slot joins the head's running max; `keep` rescales what came before.
                let join = join_tops(top[g as usize], score);
                let (keep, p) = (join.first, join.second);
                mass[g as usize] = mass[g as usize] * keep + p;
                top[g as usize] = join.max;
                #[unroll]
                for k in 0..per_lane {
                    let at = comptime!((g * per_lane + k) as usize);
                    acc[at] = acc[at] * keep + p * values[comptime!((x * per_lane + k) as usize)];
                }
            }
        }
        round += ROUND_SLOTS;
    }
    #[unroll]
    for g in 0..group {
        #[unroll]
        for k in 0..per_lane {
            target.write_output(out, g, lane + WARP * k, acc[comptime!((g * per_lane + k) as usize)], head_dim);
        }
        if lane == 0 {
            target.write_stats(out_max, out_sum, g, top[g as usize], mass[g as usize]);
        }
    }
}
