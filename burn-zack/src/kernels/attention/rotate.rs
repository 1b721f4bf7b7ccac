//! The reduced queries of a ZACK decode step: `q̃_g = scale · q_g R̃` per query head, computed
//! once per step (not once per split of the sequence) for the decode kernel to load.

use cubecl::prelude::*;

/// Rows of the basis one unit loads at once (all in flight before the first product).
const LOADS: u32 = 32;

/// One cube per (KV head, sequence); the group's queries go to shared memory, then one unit per
/// (query head, kept coordinate `j`) forms `scale · Σ_c q_c R̃[c, j]`, reading the basis column
/// in blocks of [`LOADS`] rows (consecutive units read consecutive columns: coalesced).
///
/// - `q`: `[batch, kv_heads * group, head_dim]`; `basis`: `[head_dim, key_width]`;
/// - `layout`: per KV head `[key_offset, key_rank, value_offset, value_rank]` (more words may
///   follow: the decode kernel's step metadata);
/// - `reduced`: `[batch, kv_heads * group, key_width]`, written in the head's own key columns only.
#[cube(launch_unchecked)]
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
    let first_head = (batch_row * kv_heads + kv_head) * group;
    let mut queries = SharedMemory::<f32>::new(comptime!((group * head_dim) as usize));
    let mut i = UNIT_POS;
    while i < group * head_dim {
        queries[i as usize] = q[(first_head * head_dim + i) as usize];
        i += CUBE_DIM;
    }
    sync_cube();
    let block = comptime!(LOADS.min(head_dim));
    let blocks = comptime!(head_dim.div_ceil(block));
    let mut pair = UNIT_POS;
    while pair < group * key_rank {
        let g = pair / key_rank;
        let j = pair % key_rank;
        let mut acc = 0.0f32;
        #[unroll]
        for b in 0..blocks {
            let mut held = Array::<f32>::new(comptime!(block as usize));
            #[unroll]
            for i in 0..block {
                let c = b * block + i;
                let mut x = 0.0f32;
                if c < head_dim {
                    x = basis[(c * key_width + key_offset + j) as usize];
                }
                held[i as usize] = x;
            }
            #[unroll]
            for i in 0..block {
                let c = b * block + i;
                if c < head_dim {
                    acc += queries[(g * head_dim + c) as usize] * held[i as usize];
                }
            }
        }
        reduced[((first_head + g) * key_width + key_offset + j) as usize] = acc * scale;
        pair += CUBE_DIM;
    }
}
