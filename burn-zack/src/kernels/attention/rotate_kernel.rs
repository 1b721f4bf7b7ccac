//! The reduced queries of a ZACK decode step: `q̃_g = scale · q_g R̃` per query head, computed
//! once per step (not once per split of the sequence) for the decode kernel to load.

use cubecl::prelude::*;

/// Rows of the basis one unit loads at once (all in flight before the first product).
const LOADS: u32 = 32;

/// Kept coordinates one cube forms per query head.
pub const ROTATE_COLUMNS: u32 = 16;

/// One cube per (KV head, sequence, tile of [`ROTATE_COLUMNS`] kept coordinates); the group's
/// queries go to shared memory, then unit `(part, g, j)` sums `q_c R̃[c, j]` over its part of the
/// channels, reading the basis column in blocks of [`LOADS`] rows (consecutive units read
/// consecutive columns: coalesced), and the parts' sums are added in shared memory:
/// `q̃_g[j] = scale · Σ_c q_c R̃[c, j]`. Spreading a head's columns over cubes and its channels
/// over units keeps a batch-1 step from waiting on a few cubes' long loops.
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
    #[comptime] units: u32,
) {
    let kv_head = CUBE_POS_X;
    let batch_row = CUBE_POS_Y;
    let kv_heads = CUBE_COUNT_X;
    let key_offset = layout[(kv_head * 4) as usize];
    let key_rank = layout[(kv_head * 4 + 1) as usize];
    let key_width = basis.len() as u32 / head_dim;
    let first_head = (batch_row * kv_heads + kv_head) * group;
    let mut queries = SharedMemory::<f32>::new(comptime!((group * head_dim) as usize));
    let mut sums = SharedMemory::<f32>::new(comptime!(units as usize));
    let parts = comptime!(units / (ROTATE_COLUMNS * group));
    let span = comptime!(head_dim.div_ceil(parts));
    let block = comptime!(LOADS.min(span));
    let blocks = comptime!(span.div_ceil(block));
    let lane = UNIT_POS % ROTATE_COLUMNS;
    let g = (UNIT_POS / ROTATE_COLUMNS) % group;
    let part = UNIT_POS / (ROTATE_COLUMNS * group);
    let j = CUBE_POS_Z * ROTATE_COLUMNS + lane;
    let active = part < parts && j < key_rank;
    let (column, first) = (key_offset + j, part * span);
    // The first block of the basis is requested before the queries, so both loads overlap.
    let mut held = Array::<f32>::new(block as usize);
    load_basis_block(&mut held, basis, key_width, column, first, span, block, 0u32, active, head_dim);
    let mut i = UNIT_POS;
    while i < group * head_dim {
        queries[i as usize] = q[(first_head * head_dim + i) as usize];
        i += CUBE_DIM;
    }
    sync_cube();
    let mut acc = 0.0f32;
    #[unroll]
    for b in 0..blocks {
        #[unroll]
        for i in 0..block {
            let c = first + b * block + i;
            if active && c < head_dim && b * block + i < span {
                acc += queries[(g * head_dim + c) as usize] * held[i as usize];
            }
        }
        if comptime!(b + 1 < blocks) {
            load_basis_block(&mut held, basis, key_width, column, first, span, block, b + 1, active, head_dim);
        }
    }
    sums[UNIT_POS as usize] = acc;
    sync_cube();
    if part == 0 && j < key_rank {
        let mut total = 0.0f32;
        #[unroll]
        for p in 0..parts {
            total += sums[(UNIT_POS + p * ROTATE_COLUMNS * group) as usize];
        }
        reduced[((first_head + g) * key_width + key_offset + j) as usize] = total * scale;
    }
}

/// Loads into `held` block `b` of `block` rows of column `column` of the basis within a part of
/// `span` rows from `first` (0 past the part, past `head_dim` or where the unit is not `active`).
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_basis_block(
    held: &mut Array<f32>,
    basis: &Array<f32>,
    key_width: u32,
    column: u32,
    first: u32,
    #[comptime] span: u32,
    #[comptime] block: u32,
    #[comptime] b: u32,
    active: bool,
    #[comptime] head_dim: u32,
) {
    #[unroll]
    for i in 0..block {
        let c = first + b * block + i;
        let mut x = 0.0f32;
        if active && c < head_dim && b * block + i < span {
            x = basis[(c * key_width + column) as usize];
        }
        held[i as usize] = x;
    }
}
