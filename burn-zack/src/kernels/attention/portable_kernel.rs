//! The ZACK decode attention kernel (one query slot per sequence), flash-decoding style over a
//! load-balanced task list ([`DecodeSchedule`](crate::kernels::DecodeSchedule)).
//!
//! One cube of `units` units per (sequence, task); a task is `count` slots of one KV head, and
//! the cube serves all `group` query heads of that head. A head's cached row (its `rank` reduced
//! coordinates) is cut into `blocks` column blocks of `block` coordinates, one unit each: a row's
//! units are consecutive, so the units of a warp read whole consecutive rows (coalesced, `vector`
//! elements per load), `rows` rows per unit in flight at once, and each row is read once for all
//! heads. Unit `u` takes block `u % blocks` of the rows `u / blocks`, `u / blocks + lanes`, …
//! (`lanes = units / blocks`), except where plane shuffles add up the scores: there a row's units
//! must lie in one plane, so each plane takes `plane / blocks` rows ([`RowUnits`]):
//! 1. scores, in rounds of `rows · lanes` slots: each unit holds its block of the reduced queries
//!    `q̃_g = scale · q_g R̃` (computed once per step by
//!    [`rotate_queries_kernel`](super::rotate_kernel::rotate_queries_kernel)) in registers and computes
//!    the block's partial dot products `q̃_g · k̃` for every head; the row's units add them up by
//!    plane shuffles where the backend has them (CUDA), or through shared memory, one unit per
//!    (slot, head) summing the blocks' partials (wgpu). Masked slots (padding, sliding window)
//!    score [`masked_score`];
//! 2. per head, the task's max score `m`, `p = exp(s - m)` and the mass `l = Σ p`;
//! 3. values: each unit accumulates `Σ p_g · ṽ` over its rows for its block of channels and every
//!    head, in registers;
//! 4. per head, the lanes' sums are added up in shared memory, and the unnormalized output (0 past
//!    the head's value rank: the folded `W_O` ignores those channels), `m` and `l` go to the
//!    log-sum-exp merge as split `split` of the head (`burn_kvcompress::kernels::merge_partials`).
//!
//! Loads are never predicated: slots past the task and columns past the rank are clamped into the
//! task's rows and the head's columns, and get no weight (zero queries, discarded scores and
//! sums). Partial sums are stored at a row stride of `blocks + 1` (or `block + 1`) floats, so units
//! reading one column of consecutive rows hit distinct banks.

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_masses, split_softmax, SplitOut};
use cubecl::prelude::*;

use super::task::{read_task, HeadColumns, TaskSlots};

/// Shapes fixed at compile time (one compiled kernel per model geometry and vector width).
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
    /// Reduced coordinates of a row one unit covers: a power of two, a multiple of `vector`,
    /// with `group · block` floats of queries or sums held per unit.
    pub block: u32,
    /// Elements of one load: divides every head's column offset and rank and the rows' widths.
    pub vector: u32,
    /// Rows a unit scores per round (their loads are in flight together).
    pub rows: u32,
    /// Floats of the shared scratch buffer: a round's partial scores or one head's value sums.
    pub scratch_floats: u32,
    /// Lanes of a plane where a row's partial scores are added up by plane shuffles (with no
    /// cube synchronization per round; every row's blocks fit in one plane), 0 where they are
    /// added up through `scratch`.
    pub plane: u32,
}

impl DecodeGeometry {
    /// Bytes of shared memory one cube uses: scores, scratch, and per head its max, its mass and
    /// the reductions' 16 lanes.
    pub fn shared_bytes(&self) -> u32 {
        4 * (self.group * self.max_chunk + self.scratch_floats + self.group * (2 + 16))
    }

    /// Whether the scratch buffer holds a round's partial scores on at least one lane for rows of
    /// up to `head_dim` coordinates, and one head's value sums of every unit.
    pub fn scratch_fits(&self) -> bool {
        self.scratch_floats >= self.group * self.rows * (self.widest_blocks() + 1)
            && self.scratch_floats >= self.units * (self.block + 1)
    }

    /// Column blocks of the widest row (a full-rank head's `head_dim` coordinates).
    pub fn widest_blocks(&self) -> u32 {
        self.head_dim.div_ceil(self.block)
    }
}

/// Halving steps of a tree over the widest row's blocks (`⌈log2(head_dim / block)⌉`).
fn tree_steps(geo: DecodeGeometry) -> u32 {
    geo.widest_blocks().next_power_of_two().trailing_zeros()
}

/// Column blocks of a row of `rank` coordinates (at least one).
#[cube]
fn row_blocks(rank: u32, #[comptime] block: u32) -> u32 {
    (u32::max(rank, 1) - 1) / block + 1
}

/// Which rows and column block of a head's rows of `rank` coordinates a unit covers.
#[derive(CubeType)]
struct RowUnits {
    /// Column blocks of a row.
    blocks: u32,
    /// The unit's column block.
    column: u32,
    /// The unit's first row (of a round), among `lanes` rows a round.
    lane: u32,
    lanes: u32,
    /// Whether the unit covers a row (`lane < lanes`, and within its plane's rows).
    active: bool,
}

#[cube]
impl RowUnits {
    /// Rows of `blocks` consecutive units: `units / blocks` of them, or, when `by_plane`, as
    /// many as whole rows fit in each plane of `geo.plane` lanes.
    fn new(rank: u32, #[comptime] by_plane: bool, #[comptime] geo: DecodeGeometry) -> RowUnits {
        let blocks = row_blocks(rank, geo.block);
        let mut units = RowUnits {
            blocks,
            column: UNIT_POS % blocks,
            lane: UNIT_POS / blocks,
            lanes: geo.units / blocks,
            active: true,
        };
        if by_plane {
            let per_plane = geo.plane / blocks;
            let index = UNIT_POS % geo.plane;
            units.column = index % blocks;
            units.lane = (UNIT_POS / geo.plane) * per_plane + index / blocks;
            units.lanes = (geo.units / geo.plane) * per_plane;
            units.active = index < per_plane * blocks;
        }
        units
    }

    /// The scoring rows: by plane where planes add up the scores, otherwise as many lanes as a
    /// round's partial scores fit in the scratch buffer.
    fn scoring(rank: u32, #[comptime] geo: DecodeGeometry) -> RowUnits {
        let mut units = RowUnits::new(rank, comptime!(geo.plane > 0), geo);
        if geo.plane == 0 {
            units.lanes = u32::min(units.lanes, geo.scratch_floats / (geo.group * geo.rows * (units.blocks + 1)));
            units.active = units.lane < units.lanes;
        }
        units
    }
}

/// One task of ZACK decode attention; see the module documentation.
///
/// - `reduced_q`: `[batch, kv_heads * group, key_width]`, scaled reduced queries in each head's
///   key columns;
/// - `keys`: `[batch, len, key_width]`; `values`: `[batch, len, value_width]`, elements `E`
///   (f32 or f16) in vectors of `N = geo.vector`;
/// - `meta`, uploaded once per step: per KV head `[key_offset, key_rank, value_offset,
///   value_rank]` (`4 · kv_heads` words), then `key_start` (`batch` words), then per task
///   `[kv_head, split, first, count]`;
/// - outputs per (query head, split): `out` (`head_dim` each), `out_max`, `out_sum`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn decode_kernel<E: Float, N: Size>(
    reduced_q: &Array<f32>,
    keys: &Array<Vector<E, N>>,
    values: &Array<Vector<E, N>>,
    meta: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    kv_heads: u32,
    len: u32,
    splits: u32,
    window: u32,
    key_width: u32,
    value_width: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let task = read_task(meta, kv_heads, len, splits, window, geo.group);
    let first_head = task.target.first_head;

    let mut p = SharedMemory::<f32>::new((geo.group * geo.max_chunk) as usize);
    let mut scratch = SharedMemory::<f32>::new(geo.scratch_floats as usize);
    let mut head_max = SharedMemory::<f32>::new(geo.group as usize);
    let mut head_sum = SharedMemory::<f32>::new(geo.group as usize);

    task_scores(reduced_q, keys, &mut p, &mut scratch, &task.columns, &task.slots, first_head, key_width, geo);
    split_softmax(&mut p, &mut head_max, task.slots.count, geo.group, geo.max_chunk);
    split_masses(&p, &mut head_sum, task.slots.count, geo.group, geo.max_chunk);
    let sums = value_sums(values, &p, &task.columns, &task.slots, value_width, geo);
    write_partials(&sums, &mut scratch, &head_max, &head_sum, out, out_max, out_sum, &task.columns, &task.target, geo);
}

/// Phase 1: `p[g * max_chunk + t]` = the score of the task's slot `t` for query head `g`
/// ([`masked_score`] where the query does not see it). Synchronizes the cube before returning.
#[allow(clippy::too_many_arguments)]
#[cube]
fn task_scores<E: Float, N: Size>(
    reduced_q: &Array<f32>,
    keys: &Array<Vector<E, N>>,
    p: &mut SharedMemory<f32>,
    scratch: &mut SharedMemory<f32>,
    columns: &HeadColumns,
    slots: &TaskSlots,
    first_head: u32,
    key_width: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let group = geo.group;
    let block = geo.block;
    let per_block = comptime!(geo.block / geo.vector);
    let rank = columns.key_rank;
    let units = RowUnits::scoring(rank, geo);
    let (column, lane, lanes) = (units.column, units.lane, units.lanes);

    // This unit's block of every head's reduced query (zero past the rank: the loads there are
    // clamped into the head's columns, and contribute nothing).
    let mut q = Array::<f32>::new(comptime!((geo.group * geo.block) as usize));
    #[unroll]
    for g in 0..group {
        #[unroll]
        for i in 0..block {
            let j = column * block + i;
            let mut x = 0.0f32;
            if units.active && j < rank {
                x = reduced_q[((first_head + g) * key_width + columns.key_offset + j) as usize];
            }
            q[(g * block + i) as usize] = x;
        }
    }

    let rows = RowSpan::new(key_width, columns.key_offset, rank, column, lanes, geo);
    let mut held = Array::<Vector<E, N>>::new(comptime!((geo.rows * per_block) as usize));
    let mut round = 0u32;
    while round < slots.count {
        load_rows(keys, &mut held, &rows, slots, round + lane, geo);
        #[unroll]
        for r in 0..geo.rows {
            let mut acc = Array::<f32>::new(comptime!(geo.group as usize));
            #[unroll]
            for g in 0..group {
                acc[g as usize] = 0.0;
            }
            #[unroll]
            for l in 0..per_block {
                let x = held[(r * per_block + l) as usize];
                #[unroll]
                for e in 0..geo.vector {
                    let k = f32::cast_from(x[e as usize]);
                    #[unroll]
                    for g in 0..group {
                        acc[g as usize] += q[(g * block + l * geo.vector + e) as usize] * k;
                    }
                }
            }
            if geo.plane > 0 {
                // A tree over the row's consecutive lanes, halving offsets from the widest row's:
                // the first lane ends with the sum (steps as wide as the row are skipped).
                #[unroll]
                for step in 0..comptime!(tree_steps(geo)) {
                    let offset = comptime!(1u32 << (tree_steps(geo) - 1 - step));
                    if offset < units.blocks {
                        let inside = column + offset < units.blocks;
                        #[unroll]
                        for g in 0..group {
                            acc[g as usize] += select(inside, plane_shuffle_down(acc[g as usize], offset), 0.0);
                        }
                    }
                }
                let t = round + lane + r * lanes;
                if units.active && column == 0 && t < slots.count {
                    let visible = decode_slot_visible(slots.first + t, slots.len, slots.start, slots.window);
                    #[unroll]
                    for g in 0..group {
                        p[(g * geo.max_chunk + t) as usize] = select(visible, acc[g as usize], masked_score());
                    }
                }
            } else if units.active {
                let stride = units.blocks + 1;
                #[unroll]
                for g in 0..group {
                    scratch[((r * group + g) * lanes * stride + lane * stride + column) as usize] = acc[g as usize];
                }
            }
        }
        if geo.plane == 0 {
            sync_cube();
            add_block_partials(scratch, p, slots, round, units.blocks, lanes, geo);
            sync_cube();
        }
        round += geo.rows * lanes;
    }
    sync_cube();
}

/// The shared-memory way of phase 1's sums (where planes cannot add up a row): one unit per
/// (round row, head, lane) adds up the `blocks` partial scores that the round's units left in
/// `scratch` at a row stride of `blocks + 1`, and writes the score of slot
/// `round + row · lanes + lane` to `p`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn add_block_partials(
    scratch: &SharedMemory<f32>,
    p: &mut SharedMemory<f32>,
    slots: &TaskSlots,
    round: u32,
    blocks: u32,
    lanes: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let group = geo.group;
    let mut pair = UNIT_POS;
    while pair < geo.rows * group * lanes {
        let s = pair % lanes;
        let rg = pair / lanes;
        let g = rg % group;
        let t = round + (rg / group) * lanes + s;
        if t < slots.count {
            let mut score = masked_score();
            if decode_slot_visible(slots.first + t, slots.len, slots.start, slots.window) {
                let mut sum = 0.0f32;
                let at = (rg * lanes + s) * (blocks + 1);
                for c in 0..blocks {
                    sum += scratch[(at + c) as usize];
                }
                score = sum;
            }
            p[(g * geo.max_chunk + t) as usize] = score;
        }
        pair += geo.units;
    }
}

/// Phase 3: this unit's `Σ_t p[g, t] · ṽ_t[c]` over its rows, for its block of channels `c` and
/// every head `g`, as `sums[g * block + i]` (channel `column · block + i`; past the value rank
/// they hold sums of clamped loads, which the output ignores).
#[cube]
fn value_sums<E: Float, N: Size>(
    values: &Array<Vector<E, N>>,
    p: &SharedMemory<f32>,
    columns: &HeadColumns,
    slots: &TaskSlots,
    value_width: u32,
    #[comptime] geo: DecodeGeometry,
) -> Array<f32> {
    let group = geo.group;
    let block = geo.block;
    let per_block = comptime!(geo.block / geo.vector);
    let rank = columns.value_rank;
    let units = RowUnits::new(rank, false, geo);
    let (column, lane, lanes) = (units.column, units.lane, units.lanes);
    let mut sums = Array::<f32>::new(comptime!((geo.group * geo.block) as usize));
    #[unroll]
    for i in 0..comptime!(geo.group * geo.block) {
        sums[i as usize] = 0.0;
    }
    let rows = RowSpan::new(value_width, columns.value_offset, rank, column, lanes, geo);
    let mut held = Array::<Vector<E, N>>::new(comptime!((geo.rows * per_block) as usize));
    let mut round = 0u32;
    while round < slots.count {
        load_rows(values, &mut held, &rows, slots, round + lane, geo);
        #[unroll]
        for r in 0..geo.rows {
            let row = round + lane + r * lanes;
            let at = u32::min(row, slots.count - 1);
            #[unroll]
            for g in 0..group {
                let weight = select(row < slots.count, p[(g * geo.max_chunk + at) as usize], 0.0);
                #[unroll]
                for l in 0..per_block {
                    let x = held[(r * per_block + l) as usize];
                    #[unroll]
                    for e in 0..geo.vector {
                        let at = (g * block + l * geo.vector + e) as usize;
                        sums[at] += weight * f32::cast_from(x[e as usize]);
                    }
                }
            }
        }
        round += geo.rows * lanes;
    }
    sums
}

/// Where a unit's loads fall in cached rows of `width` elements: its block `column` of the
/// `rank` coordinates from column `offset`, on rows `lanes` apart.
#[derive(CubeType)]
struct RowSpan {
    width: u32,
    offset: u32,
    column: u32,
    lanes: u32,
    /// The last vector's column within the head (`rank - vector`): loads past the rank are
    /// clamped to it, so every load stays in the head's columns.
    last_column: u32,
}

#[cube]
impl RowSpan {
    /// The span of a head whose `rank` coordinates start at column `offset` of rows of `width`.
    fn new(width: u32, offset: u32, rank: u32, column: u32, lanes: u32, #[comptime] geo: DecodeGeometry) -> RowSpan {
        RowSpan { width, offset, column, lanes, last_column: rank - geo.vector }
    }
}

/// Loads into `held[r * per_block + l]` vector `l` of the unit's block of the task's slot
/// `t + r · lanes`, for `r < rows`: all the loads are issued before any is used. Slots past the
/// task read its last slot and columns past the rank the head's last vector (in bounds, without
/// selects): callers give those no weight.
#[cube]
fn load_rows<E: Float, N: Size>(
    src: &Array<Vector<E, N>>,
    held: &mut Array<Vector<E, N>>,
    span: &RowSpan,
    slots: &TaskSlots,
    t: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let per_block = comptime!(geo.block / geo.vector);
    #[unroll]
    for r in 0..geo.rows {
        let row = u32::min(t + r * span.lanes, slots.count - 1);
        let base = (slots.row0 + row) * span.width + span.offset;
        #[unroll]
        for l in 0..per_block {
            let column = u32::min(span.column * geo.block + l * geo.vector, span.last_column);
            held[(r * per_block + l) as usize] = src[((base + column) / geo.vector) as usize];
        }
    }
}

/// Phase 4: per head, adds up the lanes' value sums (in `scratch`) and writes the head's
/// unnormalized output (0 past the value rank), max and mass as split `target.split`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_partials(
    sums: &Array<f32>,
    scratch: &mut SharedMemory<f32>,
    head_max: &SharedMemory<f32>,
    head_sum: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    columns: &HeadColumns,
    target: &SplitOut,
    #[comptime] geo: DecodeGeometry,
) {
    let block = geo.block;
    let d = geo.head_dim;
    let rank = columns.value_rank;
    let units = RowUnits::new(rank, false, geo);
    #[unroll]
    for g in 0..geo.group {
        #[unroll]
        for i in 0..block {
            scratch[(UNIT_POS * (block + 1) + i) as usize] = sums[(g * block + i) as usize];
        }
        sync_cube();
        let c = UNIT_POS;
        if c < d {
            let mut o = 0.0f32;
            if c < rank {
                let at = (c / block) * (block + 1) + c % block;
                for s in 0..units.lanes {
                    o += scratch[(at + s * units.blocks * (block + 1)) as usize];
                }
            }
            target.write_output(out, g, c, o, d);
        }
        sync_cube();
    }
    if UNIT_POS < geo.group {
        target.write_stats(out_max, out_sum, UNIT_POS, head_max[UNIT_POS as usize], head_sum[UNIT_POS as usize]);
    }
}
