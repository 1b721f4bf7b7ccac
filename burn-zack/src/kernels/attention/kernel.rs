//! The ZACK decode attention kernel (one query slot per sequence), flash-decoding style over a
//! load-balanced task list ([`DecodeSchedule`](crate::kernels::DecodeSchedule)).
//!
//! One cube of `units` units per (sequence, task); a task is `count` slots of one KV head, and
//! the cube serves all `group` query heads of that head:
//! 0. the reduced queries `q̃_g = scale · q_g R̃` (`k_qk` coordinates) go to shared memory;
//! 1. per (head, slot), the score `q̃ · k̃` over the head's `k_qk` key columns; masked slots
//!    (padding, sliding window) are excluded;
//! 2. per head, the task's max score `m`, `p = exp(s - m)` and `l = Σ p`;
//! 3. per (head, channel `c < head_dim`): `Σ p · ṽ_c` for `c < k_vo`, 0 past it (the folded
//!    `W_O` ignores those channels);
//! 4. the unnormalized output, `m` and `l` go to the log-sum-exp merge as split `split` of the
//!    head (`burn_kvcompress::kernels::merge_partials`).

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_softmax};
use cubecl::prelude::*;

/// Shapes fixed at compile time (one compiled kernel per model geometry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels of an uncompressed head (the output width).
    pub head_dim: u32,
    /// The longest task, in slots (sizes the shared score buffer).
    pub max_chunk: u32,
}

/// One task of ZACK decode attention; see the module documentation.
///
/// - `q`: `[batch, kv_heads * group, head_dim]`; `basis`: `[head_dim, key_width]`;
/// - `keys`: `[batch, len, key_width]`; `values`: `[batch, len, value_width]`;
/// - `layout`: per KV head `[key_offset, key_rank, value_offset, value_rank]`;
/// - `tasks`: per task `[kv_head, split, first, count]`; `key_start`: `[batch]`;
/// - outputs per (query head, split): `out` (`head_dim` each), `out_max`, `out_sum`.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn decode_kernel(
    q: &Array<f32>,
    basis: &Array<f32>,
    keys: &Array<f32>,
    values: &Array<f32>,
    layout: &Array<u32>,
    tasks: &Array<u32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    splits: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: DecodeGeometry,
) {
    let task = CUBE_POS_X;
    let batch_row = CUBE_POS_Y;
    let kv_heads = layout.len() as u32 / 4;
    let unit = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let d = geo.head_dim;
    let chunk = geo.max_chunk;
    let kv_head = tasks[(task * 4) as usize];
    let split = tasks[(task * 4 + 1) as usize];
    let first = tasks[(task * 4 + 2) as usize];
    let count = tasks[(task * 4 + 3) as usize];
    let key_offset = layout[(kv_head * 4) as usize];
    let key_rank = layout[(kv_head * 4 + 1) as usize];
    let value_offset = layout[(kv_head * 4 + 2) as usize];
    let value_rank = layout[(kv_head * 4 + 3) as usize];
    let key_width = basis.len() as u32 / d;
    let value_width = values.len() as u32 / (len * CUBE_COUNT_Y);
    let start = key_start[batch_row as usize];

    let mut reduced = SharedMemory::<f32>::new((geo.group * geo.head_dim) as usize);
    let mut p = SharedMemory::<f32>::new((geo.group * geo.max_chunk) as usize);
    let mut head_max = SharedMemory::<f32>::new(geo.group as usize);

    // 0. q̃ = scale · q R̃ for the group's heads.
    let mut pair = unit;
    while pair < group * key_rank {
        let g = pair / key_rank;
        let j = pair % key_rank;
        let q_base = ((batch_row * kv_heads + kv_head) * group + g) * d;
        let mut acc = 0.0f32;
        for c in 0..d {
            acc += q[(q_base + c) as usize] * basis[(c * key_width + key_offset + j) as usize];
        }
        reduced[(g * d + j) as usize] = acc * scale;
        pair += units;
    }
    sync_cube();

    // 1. Scores per (head, slot).
    let mut pair = unit;
    while pair < group * chunk {
        let g = pair / chunk;
        let t = pair % chunk;
        let mut score = masked_score();
        if t < count {
            let slot = first + t;
            if decode_slot_visible(slot, len, start, window) {
                let row = (batch_row * len + slot) * key_width + key_offset;
                let mut acc = 0.0f32;
                for j in 0..key_rank {
                    acc += reduced[(g * d + j) as usize] * keys[(row + j) as usize];
                }
                score = acc;
            }
        }
        p[pair as usize] = score;
        pair += units;
    }
    sync_cube();

    // 2. Per head: the task's max score (16 lanes per head, then one), then p = exp(s - m).
    split_softmax(&mut p, &mut head_max, geo.group, geo.max_chunk);

    // 3. Per (head, channel): Σ p · ṽ, zero past the head's value rank.
    let mut pair = unit;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let mut acc = 0.0f32;
        let mut l = 0.0f32;
        for t in 0..count {
            let weight = p[(g * chunk + t) as usize];
            l += weight;
            if weight > 0.0 && c < value_rank {
                acc += weight * values[((batch_row * len + first + t) * value_width + value_offset + c) as usize];
            }
        }
        let head = (batch_row * kv_heads + kv_head) * group + g;
        out[((head * splits + split) * d + c) as usize] = acc;
        if c == 0 {
            out_max[(head * splits + split) as usize] = head_max[g as usize];
            out_sum[(head * splits + split) as usize] = l;
        }
        pair += units;
    }
}
