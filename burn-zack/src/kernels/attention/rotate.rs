//! The reduced queries of a ZACK decode step: `q̃_g = scale · q_g R̃` per query head, computed
//! once per step (not once per split of the sequence) for the decode kernel to load.

use cubecl::prelude::*;

/// One cube per (sequence, KV head); its units compute the `group × k_qk` reduced coordinates of
/// the head's query heads, each a `head_dim`-long dot product with all its loads in flight.
///
/// - `q`: `[batch, kv_heads * group, head_dim]`; `basis`: `[head_dim, key_width]`;
/// - `layout`: per KV head `[key_offset, key_rank, value_offset, value_rank]`;
/// - `reduced`: `[batch, kv_heads * group, key_width]`, written in the head's own key columns only.
#[cube(launch)]
pub fn rotate_queries_kernel(
    q: &Array<f32>,
    basis: &Array<f32>,
    layout: &Array<u32>,
    reduced: &mut Array<f32>,
    scale: f32,
    #[comptime] group: u32,
    #[comptime] head_dim: u32,
) {
    let kv_head = CUBE_POS_X;
    let batch_row = CUBE_POS_Y;
    let kv_heads = CUBE_COUNT_X;
    let key_offset = layout[(kv_head * 4) as usize];
    let key_rank = layout[(kv_head * 4 + 1) as usize];
    let key_width = basis.len() as u32 / head_dim;
    let mut pair = UNIT_POS;
    while pair < group * key_rank {
        let g = pair / key_rank;
        let j = pair % key_rank;
        let head = (batch_row * kv_heads + kv_head) * group + g;
        let mut acc = 0.0f32;
        #[unroll]
        for c in 0..head_dim {
            acc += q[(head * head_dim + c) as usize] * basis[(c * key_width + key_offset + j) as usize];
        }
        reduced[(head * key_width + key_offset + j) as usize] = acc * scale;
        pair += CUBE_DIM;
    }
}
