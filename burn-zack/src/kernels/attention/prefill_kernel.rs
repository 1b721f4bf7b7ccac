//! The ZACK prefill attention kernel (many query slots) on reduced, uneven head dimensions,
//! flash-attention style.
//!
//! One cube per (task, sequence). A task is a tile of consecutive query slots of one KV head
//! (`[kv_head, first_query, queries]` in the task table); its rows are the tile's (query, head)
//! pairs of every query head of the KV head, query-major (`row = i · group + g`), at most
//! `ROWS`. The launch orders the tasks by their work, longest first (`prefill_tasks`), so the
//! uneven heads' short tasks fill the last wave.
//!
//! 1. The tile's reduced queries (already rotated and scaled) go to shared memory.
//! 2. For each block of `block` key slots that a row of the tile may see, in order:
//!    a. the block's reduced keys go to shared memory (f32, rows padded by one to spread banks);
//!    b. one unit per (row, slot) pair at a time scores `q̃ · k̃` over the head's key rank;
//!    invisible pairs masked;
//!    c. the block's values replace its keys in shared memory, while `lanes` units per row find
//!    the block's max, the running max `m` and the rescaling `α = exp(m_old − m)`, and turn the
//!    scores into numerators `p = exp(s − m)`; one unit per row keeps the running mass `l`;
//!    d. each unit, owning `output_rows` rows of one value coordinate, rescales its sums by `α`
//!    and adds `Σ p · ṽ` over the block.
//! 3. Each unit writes its rows' `o / l` in the head's value coordinates, zeros past them.

use burn_kvcompress::kernels::{first_visible_slot, masked_score as masked, slot_visible};
use cubecl::prelude::*;

/// Rows (query slots × heads of a KV head) per cube.
pub const ROWS: u32 = 16;

/// Shapes fixed at compile time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefillGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels of an uncompressed head (the widest rank).
    pub head_dim: u32,
    /// Key slots per block.
    pub block: u32,
    /// Rows each unit accumulates outputs for (a power of two dividing `ROWS`).
    pub output_rows: u32,
}

impl PrefillGeometry {
    /// The geometry for `group` query heads per KV head of `head_dim` channels and blocks of
    /// `block` slots: the fewest output rows per unit that keep a cube at 256 units or fewer.
    pub fn new(group: u32, head_dim: u32, block: u32) -> Self {
        let output_rows = [1, 2, 4, 8, 16].into_iter().find(|n| ROWS / n * head_dim <= 256).unwrap_or(ROWS);
        Self { group, head_dim, block, output_rows }
    }

    /// Query slots per task at most.
    pub fn queries(&self) -> u32 {
        ROWS / self.group
    }

    /// Units per cube: one per (output row group, channel).
    pub fn units(&self) -> u32 {
        ROWS / self.output_rows * self.head_dim
    }

    /// Units that share one row's statistics.
    pub fn lanes(&self) -> u32 {
        self.units() / ROWS
    }

    /// Bytes of shared memory: the queries, one block of keys or values, the scores and the
    /// rows' statistics.
    pub fn shared_bytes(&self) -> u32 {
        let floats = ROWS * self.head_dim
            + self.block * (self.head_dim + 1)
            + ROWS * self.block
            + 2 * ROWS
            + ROWS * self.lanes();
        4 * floats
    }
}

/// One task of ZACK prefill attention; see the module documentation.
///
/// - `reduced`: `[batch, q_len, heads, key_width]`, scaled reduced queries in each head's key
///   columns;
/// - `keys`: `[batch, len, key_width]`, `values`: `[batch, len, value_width]`;
/// - `meta`: per KV head `[key_offset, key_rank, value_offset, value_rank]`, then each batch row's
///   first real slot, then the task table from word `tasks_at`;
/// - `out`: `[batch, heads, q_len, head_dim]`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn prefill_kernel<E: Float>(
    reduced: &Array<f32>,
    keys: &Array<E>,
    values: &Array<E>,
    meta: &Array<u32>,
    out: &mut Array<f32>,
    kv_heads: u32,
    tasks_at: u32,
    len: u32,
    q_len: u32,
    window: u32,
    key_width: u32,
    value_width: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let batch_row = CUBE_POS_Y;
    let t = UNIT_POS;
    let group = geo.group;
    let d = geo.head_dim;
    let stride = comptime!(geo.head_dim + 1);
    let bc = geo.block;
    let lanes = comptime!(geo.lanes());
    let output_rows = comptime!(geo.output_rows);
    let task = tasks_at + 3 * CUBE_POS_X;
    let kv_head = meta[task as usize];
    let first_query = meta[(task + 1) as usize];
    let live_rows = meta[(task + 2) as usize] * group;
    let key_offset = meta[(kv_head * 4) as usize];
    let key_rank = meta[(kv_head * 4 + 1) as usize];
    let value_offset = meta[(kv_head * 4 + 2) as usize];
    let value_rank = meta[(kv_head * 4 + 3) as usize];
    let start = meta[(kv_heads * 4 + batch_row) as usize];
    let heads = kv_heads * group;
    let first_pos = len - q_len;

    let mut q = SharedMemory::<f32>::new(comptime!((ROWS * geo.head_dim) as usize));
    let mut block = SharedMemory::<f32>::new(comptime!((geo.block * (geo.head_dim + 1)) as usize));
    let mut s = SharedMemory::<f32>::new(comptime!((ROWS * geo.block) as usize));
    let mut alpha = SharedMemory::<f32>::new(comptime!(ROWS as usize));
    let mut row_mass = SharedMemory::<f32>::new(comptime!(ROWS as usize));
    let mut partial = SharedMemory::<f32>::new(comptime!((ROWS * geo.lanes()) as usize));

    // 1. The tile's reduced queries; dead rows are zero.
    let tile = PrefillTile { kv_head, first_query, live_rows, key_offset, key_rank };
    load_queries(reduced, &mut q, &tile, batch_row, q_len, heads, key_width, geo);

    let last_query = first_query + live_rows / group - 1;
    let first_block = first_visible_slot(first_pos + first_query, start, window) / bc;
    let last_block = (first_pos + last_query) / bc;
    // Row statistics: units `t < ROWS · lanes` serve row `t / lanes`; unit `t < ROWS` keeps the
    // mass of row `t`.
    let stat_row = t / lanes;
    let lane = t % lanes;
    let mut run_max = masked();
    let mut mass = 0.0f32;
    // Outputs: rows `out_row0 ..` of value coordinate `out_c`.
    let out_row0 = (t / d) * output_rows;
    let out_c = t % d;
    let mut acc = Array::<f32>::new(comptime!(geo.output_rows as usize));
    #[unroll]
    for r in 0..output_rows {
        acc[r as usize] = 0.0;
    }

    for kb in first_block..last_block + 1 {
        let block_first = kb * bc;
        // a. The block's keys.
        sync_cube();
        load_block(keys, &mut block, batch_row, block_first, len, key_width, key_offset, key_rank, geo);
        sync_cube();

        // b. Scores.
        block_scores(&q, &block, &mut s, &tile, block_first, first_pos, start, window, geo);
        sync_cube();

        // c. The block's values, and each row's block max.
        load_block(values, &mut block, batch_row, block_first, len, value_width, value_offset, value_rank, geo);
        if t < ROWS * lanes {
            let mut hi = masked();
            let mut j = lane;
            while j < bc {
                hi = f32::max(hi, s[(stat_row * bc + j) as usize]);
                j += lanes;
            }
            partial[t as usize] = hi;
        }
        sync_cube();
        let mut m = run_max;
        if t < ROWS * lanes {
            for l in 0..lanes {
                m = f32::max(m, partial[(stat_row * lanes + l) as usize]);
            }
        }
        sync_cube();
        if t < ROWS * lanes {
            let mut block_mass = 0.0f32;
            let mut j = lane;
            while j < bc {
                let at = (stat_row * bc + j) as usize;
                let mut e = 0.0f32;
                if s[at] > masked() {
                    e = f32::exp(s[at] - m);
                }
                s[at] = e;
                block_mass += e;
                j += lanes;
            }
            partial[t as usize] = block_mass;
            if lane == 0 {
                alpha[stat_row as usize] = f32::exp(run_max - m);
            }
            run_max = m;
        }
        sync_cube();
        if t < ROWS {
            let mut block_mass = 0.0f32;
            for l in 0..lanes {
                block_mass += partial[(t * lanes + l) as usize];
            }
            mass = mass * alpha[t as usize] + block_mass;
        }

        // d. Σ p · ṽ for rows `out_row0 ..` of coordinate `out_c`.
        #[unroll]
        for r in 0..output_rows {
            acc[r as usize] *= alpha[(out_row0 + r) as usize];
        }
        if out_c < value_rank {
            for j in 0..bc {
                let v = block[(j * stride + out_c) as usize];
                #[unroll]
                for r in 0..output_rows {
                    acc[r as usize] += s[((out_row0 + r) * bc + j) as usize] * v;
                }
            }
        }
    }

    // 3. Normalize and write the live rows, zeros past the head's value rank.
    sync_cube();
    if t < ROWS {
        row_mass[t as usize] = mass;
    }
    sync_cube();
    let output = OutputRows { first: out_row0, channel: out_c, value_rank };
    write_rows(out, &acc, &row_mass, &tile, &output, batch_row, heads, q_len, geo);
}

/// A task's tile of one KV head: query slots `first_query ..` as `live_rows` rows of (query, head)
/// pairs (query-major), and the head's key columns `key_offset .. + key_rank`.
#[derive(CubeType)]
struct PrefillTile {
    kv_head: u32,
    first_query: u32,
    live_rows: u32,
    key_offset: u32,
    key_rank: u32,
}

/// Step 1: the tile's reduced queries from `reduced` (`[batch, q_len, heads, key_width]`) into
/// `q` (`ROWS × head_dim`, the head's key rank used), zero in the dead rows.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_queries(
    reduced: &Array<f32>,
    q: &mut SharedMemory<f32>,
    tile: &PrefillTile,
    batch_row: u32,
    q_len: u32,
    heads: u32,
    key_width: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let group = geo.group;
    let d = geo.head_dim;
    let key_rank = tile.key_rank;
    let mut item = UNIT_POS;
    while item < ROWS * key_rank {
        let (row, c) = (item / key_rank, item % key_rank);
        let mut x = 0.0f32;
        if row < tile.live_rows {
            let (i, g) = (row / group, row % group);
            let at = ((batch_row * q_len + tile.first_query + i) * heads + tile.kv_head * group + g) * key_width
                + tile.key_offset
                + c;
            x = reduced[at as usize];
        }
        q[(row * d + c) as usize] = x;
        item += CUBE_DIM;
    }
}

/// Steps a and c: the `block` slots from `block_first` of one head's `rank` columns from `offset`
/// of sequence `batch_row` of a cache `[batch, len, width]` into `block` as f32, rows
/// `head_dim + 1` apart to spread banks; zero past `len`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn load_block<E: Float>(
    cache: &Array<E>,
    block: &mut SharedMemory<f32>,
    batch_row: u32,
    block_first: u32,
    len: u32,
    width: u32,
    offset: u32,
    rank: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let stride = comptime!(geo.head_dim + 1);
    let mut item = UNIT_POS;
    let bc = geo.block;
    while item < bc * rank {
        let (j, c) = (item / rank, item % rank);
        let slot = block_first + j;
        let mut x = 0.0f32;
        if slot < len {
            x = f32::cast_from(cache[((batch_row * len + slot) * width + offset + c) as usize]);
        }
        block[(j * stride + c) as usize] = x;
        item += CUBE_DIM;
    }
}

/// Step b: the scores `s` (`ROWS × block`) of the tile's rows against the block's keys from slot
/// `block_first`, masked where a pair is dead or invisible (the queries sit at `first_pos ..`).
#[allow(clippy::too_many_arguments)]
#[cube]
fn block_scores(
    q: &SharedMemory<f32>,
    block: &SharedMemory<f32>,
    s: &mut SharedMemory<f32>,
    tile: &PrefillTile,
    block_first: u32,
    first_pos: u32,
    start: u32,
    window: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let group = geo.group;
    let bc = geo.block;
    let d = geo.head_dim;
    let stride = comptime!(geo.head_dim + 1);
    let mut item = UNIT_POS;
    while item < ROWS * bc {
        let (row, j) = (item / bc, item % bc);
        let slot = block_first + j;
        let query = tile.first_query + row / group;
        let mut score = masked();
        if row < tile.live_rows && slot_visible(slot, first_pos + query, start, window) {
            let mut dot = 0.0f32;
            for c in 0..tile.key_rank {
                dot += q[(row * d + c) as usize] * block[(j * stride + c) as usize];
            }
            score = dot;
        }
        s[item as usize] = score;
        item += CUBE_DIM;
    }
}

/// A unit's outputs: rows `first ..` (`output_rows` of them) of value coordinate `channel`, of a
/// head of `value_rank` value coordinates.
#[derive(CubeType)]
struct OutputRows {
    first: u32,
    channel: u32,
    value_rank: u32,
}

/// Step 3: the unit's live rows `acc / mass` of sequence `batch_row` into `out` (`[batch, heads,
/// q_len, head_dim]`), zeros past the head's value rank.
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_rows(
    out: &mut Array<f32>,
    acc: &Array<f32>,
    row_mass: &SharedMemory<f32>,
    tile: &PrefillTile,
    output: &OutputRows,
    batch_row: u32,
    heads: u32,
    q_len: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let group = geo.group;
    let d = geo.head_dim;
    let output_rows = comptime!(geo.output_rows);
    #[unroll]
    for r in 0..output_rows {
        let row = output.first + r;
        if row < tile.live_rows {
            let (i, g) = (row / group, row % group);
            let mut x = 0.0f32;
            if output.channel < output.value_rank {
                x = acc[r as usize] / row_mass[row as usize];
            }
            let at =
                (((batch_row * heads + tile.kv_head * group + g) * q_len + tile.first_query + i) * d) + output.channel;
            out[at as usize] = x;
        }
    }
}
