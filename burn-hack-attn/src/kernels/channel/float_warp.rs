//! The float slots (sinks and tail) of a channel-layout decode step, one warp on a run of them,
//! in f32: the tensor-core kernel's last cube ([`channel_mma_decode_kernel`]) runs its warps on
//! them beside the other cubes' closed blocks.
//!
//! A round takes 32 slots, one per lane: the lane's dot products with every head's query (read
//! from shared memory, where all lanes read the same address), then an online softmax per head
//! (the round's max joins the running one, which rescales the running outputs and mass), then the
//! outputs: lane `l` keeps channels `l + 32k` of every head and adds each slot's value row times
//! its weight, which comes from the slot's lane by a shuffle.
//!
//! [`channel_mma_decode_kernel`]: super::mma_decode::channel_mma_decode_kernel

use burn_kvcompress::kernels::{masked_score, warp_mma::WARP, SplitOut};
use cubecl::prelude::*;

use crate::kernels::warp_codes::VISIBLE_FLOOR;

/// Where a stream's float slots are: `sinks` rows of `sinks_k`/`sinks_v` from row `stream ·
/// sinks`, then `tail` rows of `tail_k`/`tail_v` from row `stream · tail` (each of `head_dim`
/// f32), at positions `0 .. sinks` and `first_tail ..`.
#[derive(CubeType)]
pub struct FloatSlots {
    pub stream: u32,
    pub sinks: u32,
    pub tail: u32,
    pub first_tail: u32,
}

#[cube]
impl FloatSlots {
    /// The first element of float slot `i`'s row in its array (the sinks' or the tail's).
    fn row_start(&self, i: u32, #[comptime] head_dim: u32) -> u32 {
        let row = select(i < self.sinks, self.stream * self.sinks + i, self.stream * self.tail + i - self.sinks);
        row * head_dim
    }

    /// Element `at` of the row of float slot `i` (a sink or a tail slot) of `sinks` or `tail`.
    fn read(&self, sinks: &Array<f32>, tail: &Array<f32>, i: u32, at: u32) -> f32 {
        if i < self.sinks {
            sinks[at as usize]
        } else {
            tail[at as usize]
        }
    }

    /// Float slot `i`'s position in the sequence.
    fn position(&self, i: u32) -> u32 {
        select(i < self.sinks, i, self.first_tail + i - self.sinks)
    }
}

/// Attention of the calling warp over float slots `first .. end` of its stream for `group` heads
/// whose queries sit in `queries` (`[group · head_dim]`), slots at positions from `visible_from`
/// seen; writes the warp's split of `target` (unnormalized outputs, max and mass per head).
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn float_warp(
    queries: &SharedMemory<f32>,
    sinks_k: &Array<f32>,
    sinks_v: &Array<f32>,
    tail_k: &Array<f32>,
    tail_v: &Array<f32>,
    slots: &FloatSlots,
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
    let mut acc = Array::<f32>::new(comptime!((group * per_lane) as usize));
    let mut top = Array::<f32>::new(group as usize);
    let mut mass = Array::<f32>::new(group as usize);
    #[unroll]
    for g in 0..group {
        top[g as usize] = masked_score();
        mass[g as usize] = 0.0;
        #[unroll]
        for k in 0..per_lane {
            acc[comptime!((g * per_lane + k) as usize)] = 0.0;
        }
    }
    let mut round = first;
    while round < end {
        // The lane's slot: its scores (masked past `end` or before the window).
        let i = round + lane;
        let own = i < end;
        let slot = u32::min(i, end - 1);
        let base = slots.row_start(slot, head_dim);
        let seen = own && slots.position(i) >= visible_from;
        let mut s = Array::<f32>::new(group as usize);
        #[unroll]
        for g in 0..group {
            s[g as usize] = 0.0;
        }
        for j in 0..head_dim {
            let k = slots.read(sinks_k, tail_k, slot, base + j);
            #[unroll]
            for g in 0..group {
                s[g as usize] += queries[(g * head_dim + j) as usize] * k;
            }
        }
        // Per head: the round joins the running max; the weights of the round's slots.
        #[unroll]
        for g in 0..group {
            let score = select(seen, s[g as usize] * scale, masked_score());
            let m = f32::max(top[g as usize], plane_max(score));
            let keep = select(top[g as usize] > VISIBLE_FLOOR, f32::exp(top[g as usize] - m), 0.0);
            let p = select(score > VISIBLE_FLOOR, f32::exp(score - m), 0.0);
            mass[g as usize] = mass[g as usize] * keep + plane_sum(p);
            top[g as usize] = m;
            s[g as usize] = p;
            #[unroll]
            for k in 0..per_lane {
                acc[comptime!((g * per_lane + k) as usize)] *= keep;
            }
        }
        // The round's value rows, one slot at a time, each lane on its channels.
        let count = u32::min(WARP, end - round);
        for x in 0..count {
            let base = slots.row_start(round + x, head_dim);
            #[unroll]
            for k in 0..per_lane {
                let v = slots.read(sinks_v, tail_v, round + x, base + lane + WARP * k);
                #[unroll]
                for g in 0..group {
                    acc[comptime!((g * per_lane + k) as usize)] += plane_shuffle(s[g as usize], x) * v;
                }
            }
        }
        round += WARP;
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
