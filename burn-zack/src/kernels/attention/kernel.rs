//! The ZACK decode attention kernel (one query slot per sequence), flash-decoding style over a
//! load-balanced task list ([`DecodeSchedule`](crate::kernels::DecodeSchedule)).
//!
//! One cube of `units` units per (sequence, task); a task is `count` slots of one KV head, and
//! the cube serves all `group` query heads of that head:
//! 0. the reduced queries `q̃_g = scale · q_g R̃` (`k_qk` coordinates, computed once per step by
//!    [`rotate_queries_kernel`](super::rotate::rotate_queries_kernel)) go to shared memory;
//! 1. tile by tile (as many slots as fit `tile_floats`: narrower heads take longer tiles), the
//!    head's reduced keys are staged in shared memory ([`stage_rows`]) and one unit per (slot,
//!    head) scores `q̃ · k̃`; masked slots (padding, sliding window) are excluded;
//! 2. per head, the task's max score `m`, then `p = exp(s - m)`;
//! 3. tile by tile, the reduced values are staged and each unit accumulates `Σ p · ṽ_c` and
//!    `Σ p` for one channel `c < head_dim` and every head, over its share of the tile's slots
//!    (0 past the head's value rank: the folded `W_O` ignores those channels);
//! 4. the units' shares are summed, and the unnormalized output, `m` and `l = Σ p` go to the
//!    log-sum-exp merge as split `split` of the head (`burn_kvcompress::kernels::merge_partials`).
//!
//! Shared-memory rows are padded to an odd stride, so units reading one column of consecutive
//! rows hit distinct banks.

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_softmax};
use cubecl::prelude::*;

use super::tile::stage_rows;

/// Shapes fixed at compile time (one compiled kernel per model geometry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels of an uncompressed head (the output width), at most `units`.
    pub head_dim: u32,
    /// The longest task, in slots (sizes the shared score buffer).
    pub max_chunk: u32,
    /// Units per cube.
    pub units: u32,
    /// Floats of the shared tile buffer (a multiple of `units`, at least `units · group` and
    /// `head_dim + 1`): a tile holds as many padded rows as fit.
    pub tile_floats: u32,
}

impl DecodeGeometry {
    /// Bytes of shared memory one cube uses.
    pub fn shared_bytes(&self) -> u32 {
        let floats = self.group * self.head_dim + self.group * self.max_chunk + self.group * (1 + 16);
        4 * (floats + self.tile_floats)
    }
}

/// The smallest odd row stride holding `width` floats.
#[cube]
fn odd_stride(width: u32) -> u32 {
    width | 1
}

/// One task of ZACK decode attention; see the module documentation.
///
/// - `reduced_q`: `[batch, kv_heads * group, key_width]`, scaled reduced queries in each head's
///   key columns;
/// - `keys`: `[batch, len, key_width]`; `values`: `[batch, len, value_width]`, elements `E`
///   (f32 or f16; staged as f32);
/// - `meta`, uploaded once per step: per KV head `[key_offset, key_rank, value_offset,
///   value_rank]` (`4 · kv_heads` words), then `key_start` (`batch` words), then per task
///   `[kv_head, split, first, count]`;
/// - outputs per (query head, split): `out` (`head_dim` each), `out_max`, `out_sum`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn decode_kernel<E: Float>(
    reduced_q: &Array<f32>,
    keys: &Array<E>,
    values: &Array<E>,
    meta: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    kv_heads: u32,
    len: u32,
    splits: u32,
    window: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let task = CUBE_POS_X;
    let batch_row = CUBE_POS_Y;
    let tasks = 4 * kv_heads + CUBE_COUNT_Y;
    let unit = UNIT_POS;
    let group = geo.group;
    let d = geo.head_dim;
    let chunk = geo.max_chunk;
    let kv_head = meta[(tasks + task * 4) as usize];
    let split = meta[(tasks + task * 4 + 1) as usize];
    let first = meta[(tasks + task * 4 + 2) as usize];
    let count = meta[(tasks + task * 4 + 3) as usize];
    let key_offset = meta[(kv_head * 4) as usize];
    let key_rank = meta[(kv_head * 4 + 1) as usize];
    let value_offset = meta[(kv_head * 4 + 2) as usize];
    let value_rank = meta[(kv_head * 4 + 3) as usize];
    let key_width = keys.len() as u32 / (len * CUBE_COUNT_Y);
    let value_width = values.len() as u32 / (len * CUBE_COUNT_Y);
    let start = meta[(4 * kv_heads + batch_row) as usize];
    let first_head = (batch_row * kv_heads + kv_head) * group;

    let mut q_tilde = SharedMemory::<f32>::new((geo.group * geo.head_dim) as usize);
    let mut p = SharedMemory::<f32>::new((geo.group * geo.max_chunk) as usize);
    let mut head_max = SharedMemory::<f32>::new(geo.group as usize);
    let mut tile = SharedMemory::<f32>::new(geo.tile_floats as usize);

    // 0. The group's reduced queries.
    let mut pair = unit;
    while pair < group * key_rank {
        let g = pair / key_rank;
        let j = pair % key_rank;
        q_tilde[(g * d + j) as usize] = reduced_q[((first_head + g) * key_width + key_offset + j) as usize];
        pair += geo.units;
    }

    // 1. Scores, one unit per (slot of the tile, head).
    let key_stride = odd_stride(key_rank);
    let key_tile = geo.tile_floats / key_stride;
    let mut tile_start = 0u32;
    while tile_start < count {
        let rows = u32::min(key_tile, count - tile_start);
        let row0 = (batch_row * len + first + tile_start) * key_width + key_offset;
        stage_rows(keys, row0, key_width, rows, key_rank, &mut tile, key_stride, geo);
        sync_cube();
        let mut pair = unit;
        while pair < rows * group {
            let g = pair / rows;
            let t = pair % rows;
            let mut score = masked_score();
            if decode_slot_visible(first + tile_start + t, len, start, window) {
                let mut acc = 0.0f32;
                for j in 0..key_rank {
                    acc += q_tilde[(g * d + j) as usize] * tile[(t * key_stride + j) as usize];
                }
                score = acc;
            }
            p[(g * chunk + tile_start + t) as usize] = score;
            pair += geo.units;
        }
        sync_cube();
        tile_start += rows;
    }

    // 2. Per head: the task's max score, then p = exp(s - m) (0 where masked).
    split_softmax(&mut p, &mut head_max, count, geo.group, geo.max_chunk);

    // 3. One unit per (channel, part): Σ p · ṽ_c and Σ p for every head over the part's slots.
    let parts = comptime!(geo.units / geo.head_dim);
    let c = unit % d;
    let part = unit / d;
    let mut acc = Array::<f32>::new(geo.group as usize);
    let mut mass = Array::<f32>::new(geo.group as usize);
    #[unroll]
    for g in 0..geo.group {
        acc[g as usize] = 0.0;
        mass[g as usize] = 0.0;
    }
    let value_stride = odd_stride(value_rank);
    let value_tile = geo.tile_floats / value_stride;
    let mut tile_start = 0u32;
    while tile_start < count {
        let rows = u32::min(value_tile, count - tile_start);
        let row0 = (batch_row * len + first + tile_start) * value_width + value_offset;
        stage_rows(values, row0, value_width, rows, value_rank, &mut tile, value_stride, geo);
        sync_cube();
        if part < parts {
            let mut row = part;
            while row < rows {
                let mut v = 0.0f32;
                if c < value_rank {
                    v = tile[(row * value_stride + c) as usize];
                }
                #[unroll]
                for g in 0..geo.group {
                    let weight = p[(g * chunk + tile_start + row) as usize];
                    acc[g as usize] += weight * v;
                    mass[g as usize] += weight;
                }
                row += parts;
            }
        }
        sync_cube();
        tile_start += rows;
    }

    // 4. Sum the parts' shares (in the tile buffer, free again) and write the split's partials.
    if part < parts {
        #[unroll]
        for g in 0..geo.group {
            tile[((part * group + g) * d + c) as usize] = acc[g as usize];
        }
    }
    sync_cube();
    let mut pair = unit;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let mut o = 0.0f32;
        #[unroll]
        for q in 0..parts {
            o += tile[((q * group + g) * d + c) as usize];
        }
        let index = (first_head + g) * splits + split;
        out[(index * d + c) as usize] = o;
        pair += geo.units;
    }
    sync_cube();
    if part < parts && c == 0 {
        #[unroll]
        for g in 0..geo.group {
            tile[(part * group + g) as usize] = mass[g as usize];
        }
    }
    sync_cube();
    if unit < group {
        let mut l = 0.0f32;
        #[unroll]
        for q in 0..parts {
            l += tile[(q * group + unit) as usize];
        }
        let index = (first_head + unit) * splits + split;
        out_max[index as usize] = head_max[unit as usize];
        out_sum[index as usize] = l;
    }
}
