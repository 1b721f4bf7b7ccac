//! ZACK decode attention on tensor cores: the kernel a decode step runs where the backend has
//! warp matrix products of f16 `32 × 16` by `16 × 8` blocks into f32 (CUDA's `wmma`) and the
//! reduced cache is held as f16 ([`MmaGeometry`]), but no TMA (where it has, the
//! [`tma_decode_kernel`](super::tma_kernel::tma_decode_kernel) runs); elsewhere the portable kernel
//! ([`decode_kernel`](super::portable_kernel::decode_kernel)) runs.
//!
//! A cube works on whole cache rows: one range of slots (a split) of one sequence, for a group
//! of `heads` KV heads whose columns lie side by side in the rows (every KV head where the shared
//! memory allows), one warp per KV head. The cube's rows are thus read as contiguous runs of
//! `Σ rank` elements, and every cube does the same work whatever the heads' ranks: the step's
//! cubes are sized to fill the GPU once (`mma_launch`), and the load balance across uneven heads
//! comes from each cube holding all of them.
//!
//! Per round of 32 slots:
//! 1. staging: the cube's units copy the round's key and value rows (the group's columns) from
//!    global to shared memory with asynchronous copies (`cp.async`), consecutive units on
//!    consecutive vectors of a row, each vector into its head's tile (`32 × stride` f16, the
//!    stride padded past the rank so that the tiles' rows fall in distinct banks; slots past the
//!    split read its last slot). The next round's copies are issued before the wait for this
//!    one's, into the other of two buffers (each with its barrier);
//! 2. scores (each warp, its head): `S = K̃ Q̃ᵀ`, `[32 slots × 8 heads]`, as `⌈rank / 16⌉`
//!    products of the key tile's `32 × 16` column blocks with `16 × 8` blocks of the group's
//!    reduced queries (rounded to f16, zero past the rank and for heads past the group; loaded
//!    into the warp's registers once per split), stored to the warp's scratch; each lane takes its
//!    slot's scores;
//! 3. online softmax: the warp keeps per query head a reference `m` and its lanes' masses; a
//!    round whose max exceeds `m` by more than [`RESCALE_MARGIN`] moves `m` to it and rescales the
//!    masses and the value sums (through the scratch), so the weights `exp(s − m)` stay below
//!    `e^8` (f16 holds them) and `m` moves a few times per split;
//! 4. values: per block of 32 channels, `Oᵀ += Ṽᵀ Pᵀ`, `[32 channels × 8 heads]`, from the
//!    value tile and the round's weights rounded to f16, held in the warp's accumulators.
//!
//! The warp then writes its heads' unnormalized outputs (0 past the value rank), `m` and mass as
//! the split's partials, which the log-sum-exp merge combines (it only needs each split's output
//! and mass to share their reference `m`).
//!
//! Precision: the products are exact and accumulate in f32; the rounding of `q̃` to f16 moves a
//! score by at most `2^-11 · Σ_j |q̃_j k̃_j|`, and the rounding of `exp(s − m)` (the mass is summed
//! from the f32 values) moves the output by at most `2^-11 · max |ṽ|`; a rescale multiplies
//! f32 sums by `exp(m_old − m_new)`, one more rounding. The staged tiles hold zeros or cached
//! values (finite) past a head's rank, where the queries are zero and the output is discarded.

use burn_kvcompress::kernels::{
    decode_slot_visible,
    warp_mma::{
        accumulator, add_values, clear_weights, operand, value_sums, warp_softmax, weigh_round, write_warp_partials,
        WarpSoftmax, CHANNEL_BLOCK, MMA_DEPTH, MMA_HEADS, SCRATCH_LD, WARP, WARP_SHARED_BYTES,
    },
    SplitOut,
};
use cubecl::{
    cmma::{self, Matrix, MatrixIdent, MatrixLayout},
    prelude::{
        barrier::{copy_async, Barrier},
        *,
    },
};

use super::task::{split_slots, TaskSlots};

/// Buffers of staged rows: one round lands while the other is computed.
pub const STAGE_BUFFERS: u32 = 2;
/// Bytes of the two buffers' barriers in shared memory.
const BARRIER_BYTES: u32 = STAGE_BUFFERS * 8;
/// Copy cells of a unit that copy nothing.
const NO_CELL: u32 = u32::MAX;
/// Where a copy cell's vector within the row starts: the 16 bits below it hold the vector in
/// the shared buffer.
const CELL_VECTOR_SHIFT: u32 = 16;
/// Where a copy cell's row of the round starts (the 10 bits below it: the vector in the row).
const CELL_ROW_SHIFT: u32 = 26;
/// The most vectors a copy cell addresses in a buffer.
pub const CELL_BUFFER_VECTORS: u32 = 1 << CELL_VECTOR_SHIFT;
/// The most vectors a copy cell addresses in a row.
pub const CELL_ROW_VECTORS: u32 = 1 << (CELL_ROW_SHIFT - CELL_VECTOR_SHIFT);
/// Words per KV head of the step metadata's tile table: `[key_tile, key_stride, value_tile,
/// value_stride]`, in elements from the start of a buffer (value tiles follow the key tiles).
pub const TILE_WORDS: u32 = 4;

/// Shapes fixed at compile time (one compiled kernel per model geometry and head layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MmaGeometry {
    /// Query heads per KV head, at most 8.
    pub group: u32,
    /// Channels of an uncompressed head (the output width).
    pub head_dim: u32,
    /// KV heads per cube (one warp each); their columns lie side by side.
    pub heads: u32,
    /// Elements of one copy: divides every head's column offset and rank and the rows' widths;
    /// at least 2 (an asynchronous copy moves 4, 8 or 16 bytes).
    pub vector: u32,
    /// Elements of one buffer's key tiles (the widest group's).
    pub key_tiles: u32,
    /// Elements of one buffer's value tiles (the widest group's), after the key tiles.
    pub value_tiles: u32,
    /// Elements between one head's reduced queries in shared memory (the widest key tile's
    /// stride).
    pub query_stride: u32,
    /// Key products per round of the widest head: its rank over 16, rounded up.
    pub key_depth: u32,
    /// Copies per unit per round, for keys and for values (the widest group's).
    pub cells: u32,
}

impl MmaGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        WARP * self.heads
    }

    /// Elements of one buffer of staged rows.
    pub fn buffer_elements(&self) -> u32 {
        self.key_tiles + self.value_tiles
    }

    /// The most vectors of a row's run of one cache the plan allows: `cells` copies per unit
    /// cover 32 rows.
    pub fn row_vectors(&self) -> u32 {
        self.cells * self.units() / WARP
    }

    /// Bytes of shared memory one cube uses: the two buffers of staged rows, the reduced
    /// queries, the warps' weights and scratch, the copies' targets (a word and a stride per
    /// vector of a row, keys and values) and barriers.
    pub fn shared_bytes(&self) -> u32 {
        let halves = STAGE_BUFFERS * self.buffer_elements() + self.heads * MMA_HEADS * self.query_stride;
        2 * halves + self.heads * WARP_SHARED_BYTES + 16 * self.row_vectors() + BARRIER_BYTES
    }
}

/// A KV head's key columns and ranks in the cache rows, and its tiles in a staging buffer.
#[derive(CubeType)]
struct StagedHead {
    key_offset: u32,
    key_rank: u32,
    value_rank: u32,
    key_tile: u32,
    key_stride: u32,
    value_tile: u32,
    value_stride: u32,
}

/// How the calling unit copies a round of one cache's rows: `cells[m]` packs the vector of the
/// round's rows it copies (row, vector within the row's `first_column..` run) and where it goes
/// in a buffer, or [`NO_CELL`].
#[derive(CubeType)]
struct CopyPlan {
    cells: Array<u32>,
    first_column: u32,
    width: u32,
}

/// Decode attention of one split of one sequence for one group of KV heads; see the module
/// documentation.
///
/// - `reduced_q`: `[batch, kv_heads · group, key_width]` f32, the reduced, scaled queries;
/// - `keys`, `values`: `[batch, len, key_width]` and `[batch, len, value_width]` (f16), in
///   vectors of `geo.vector`;
/// - `meta`: per KV head `[key_offset, key_rank, value_offset, value_rank]`, then each sequence's
///   first real slot, then per KV head its [`TILE_WORDS`] tile words;
/// - `out`, `out_max`, `out_sum`: the partials, `[batch · kv_heads · group, splits, head_dim]`
///   and `[…, splits]`;
/// - cube `(split, group of KV heads, sequence)`: slots `split · chunk ..` (at most `chunk`).
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn mma_decode_kernel<E: Float, N: Size>(
    reduced_q: &Array<f32>,
    keys: &Array<Vector<E, N>>,
    values: &Array<Vector<E, N>>,
    meta: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    kv_heads: u32,
    len: u32,
    chunk: u32,
    window: u32,
    key_width: u32,
    value_width: u32,
    #[comptime] geo: MmaGeometry,
) {
    let batch_row = CUBE_POS_Z;
    let first_kv = CUBE_POS_Y * geo.heads;
    let tiles_at = 4 * kv_heads + CUBE_COUNT_Z;
    let slots = split_slots(meta, kv_heads, len, chunk, window);
    let kv_head = first_kv + UNIT_POS / WARP;
    let head = staged_head(meta, tiles_at, kv_head);
    let target =
        SplitOut { first_head: (batch_row * kv_heads + kv_head) * geo.group, split: CUBE_POS_X, splits: CUBE_COUNT_X };
    let mut stage = SharedMemory::<Vector<E, N>>::new_aligned(
        comptime!((STAGE_BUFFERS * geo.buffer_elements() / geo.vector) as usize),
        32usize,
    );
    let mut queries =
        SharedMemory::<E>::new_aligned(comptime!((geo.heads * MMA_HEADS * geo.query_stride) as usize), 32usize);
    let mut weights = SharedMemory::<E>::new_aligned(comptime!((geo.heads * MMA_HEADS * WARP) as usize), 32usize);
    let mut scratch =
        SharedMemory::<f32>::new_aligned(comptime!((geo.heads * MMA_HEADS * SCRATCH_LD) as usize), 32usize);

    clear_weights(&mut weights);
    let key_run = copy_run(meta, first_kv, 0u32, geo);
    let value_run = copy_run(meta, first_kv, 2u32, geo);
    let mut targets = SharedMemory::<u32>::new(comptime!((4 * geo.row_vectors()) as usize));
    // The value run's targets follow the key run's (a word and a stride per vector).
    let value_targets = 2 * key_run.per_row;
    write_targets(meta, tiles_at, first_kv, &key_run, &mut targets, 0u32, 0u32, geo);
    write_targets(meta, tiles_at, first_kv, &value_run, &mut targets, value_targets, 2u32, geo);
    sync_cube();
    let key_plan = plan_copies(&targets, 0u32, &key_run, key_width, geo);
    let value_plan = plan_copies(&targets, value_targets, &value_run, value_width, geo);
    // Barriers of the even and odd rounds' copies.
    let even = Barrier::shared(geo.units(), UNIT_POS == 0);
    let odd = Barrier::shared(geo.units(), UNIT_POS == 0);
    issue_round(keys, values, &mut stage, &key_plan, &value_plan, &slots, 0, geo);
    even.commit_copy_async();
    // The padding is cleared and the queries load while the first round's rows land.
    clear_padding(&mut stage, &head, geo);
    stage_queries(
        reduced_q,
        &mut queries,
        head.key_offset,
        head.key_rank,
        target.first_head,
        key_width,
        geo.group,
        geo.query_stride,
    );
    sync_plane();
    let query_ops = query_operands(&queries, geo);
    let mut softmax = warp_softmax(geo.group);
    let sums = value_sums(geo.head_dim);
    let rounds = slots.count.div_ceil(WARP);
    let mut round = 0u32;
    while round < rounds {
        if round + 1 < rounds {
            issue_round(keys, values, &mut stage, &key_plan, &value_plan, &slots, round + 1, geo);
            odd.commit_copy_async();
        }
        even.arrive_and_wait();
        attend_round(&stage, &query_ops, &mut weights, &mut scratch, &head, &slots, round, &mut softmax, &sums, geo);
        sync_cube();
        round += 1;
        if round < rounds {
            if round + 1 < rounds {
                issue_round(keys, values, &mut stage, &key_plan, &value_plan, &slots, round + 1, geo);
                even.commit_copy_async();
            }
            odd.arrive_and_wait();
            attend_round(
                &stage,
                &query_ops,
                &mut weights,
                &mut scratch,
                &head,
                &slots,
                round,
                &mut softmax,
                &sums,
                geo,
            );
            sync_cube();
            round += 1;
        }
    }
    write_warp_partials(
        &sums,
        &mut scratch,
        &softmax,
        head.value_rank,
        &target,
        out,
        out_max,
        out_sum,
        geo.group,
        geo.head_dim,
    );
}

/// KV head `kv_head`'s columns (the metadata's first words) and tiles (its tile table at
/// `tiles_at`).
#[cube]
fn staged_head(meta: &Array<u32>, tiles_at: u32, kv_head: u32) -> StagedHead {
    let (at, tile) = (kv_head * 4, tiles_at + kv_head * TILE_WORDS);
    StagedHead {
        key_offset: meta[at as usize],
        key_rank: meta[(at + 1) as usize],
        value_rank: meta[(at + 3) as usize],
        key_tile: meta[tile as usize],
        key_stride: meta[(tile + 1) as usize],
        value_tile: meta[(tile + 2) as usize],
        value_stride: meta[(tile + 3) as usize],
    }
}

/// Zeros the columns of the calling warp's head's tiles past its ranks, up to the tiles' strides,
/// in both buffers: no copy writes them and the products read them (keys up to the rank rounded
/// to 16, values to 32), so they must hold finite values, and zeros keep them out of the scores.
/// Lane `r` clears row `r` of each tile; the copies write other columns, so this may run while
/// they land.
#[cube]
fn clear_padding<E: Float, N: Size>(
    stage: &mut SharedMemory<Vector<E, N>>,
    head: &StagedHead,
    #[comptime] geo: MmaGeometry,
) {
    let row = UNIT_POS % WARP;
    let zero = Vector::<E, N>::new(E::cast_from(0.0f32));
    #[unroll]
    for buffer in 0..STAGE_BUFFERS {
        let at = buffer * geo.buffer_elements();
        let key_row = at + head.key_tile + row * head.key_stride;
        let mut column = head.key_rank;
        while column < head.key_stride {
            stage[((key_row + column) / geo.vector) as usize] = zero;
            column += geo.vector;
        }
        let value_row = at + head.value_tile + row * head.value_stride;
        let mut column = head.value_rank;
        while column < head.value_stride {
            stage[((value_row + column) / geo.vector) as usize] = zero;
            column += geo.vector;
        }
    }
}

/// The calling warp's reduced queries, `queries[w · 8 · stride + h · stride + j]` = query head
/// `h` of its KV head (whose key columns start at `key_offset`) at coordinate `j`, rounded to
/// f16 (zero past `key_rank` and for `h ≥ group`), `stride` = `query_stride`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn stage_queries<E: Float>(
    reduced_q: &Array<f32>,
    queries: &mut SharedMemory<E>,
    key_offset: u32,
    key_rank: u32,
    first_head: u32,
    key_width: u32,
    #[comptime] group: u32,
    #[comptime] query_stride: u32,
) {
    let warp = UNIT_POS / WARP;
    let count = comptime!(MMA_HEADS * query_stride);
    // Unrolled, so that every load of the lane is in flight at once.
    #[unroll]
    for r in 0..comptime!(count.div_ceil(WARP)) {
        let i = r * WARP + UNIT_POS % WARP;
        if i < count {
            let (h, j) = (i / query_stride, i % query_stride);
            let mut x = 0.0f32;
            if h < group && j < key_rank {
                x = reduced_q[((first_head + h) * key_width + key_offset + j) as usize];
            }
            queries[(warp * count + i) as usize] = E::cast_from(x);
        }
    }
}

/// The calling warp's reduced queries as the score products' `B` operands, one per block of 16
/// coordinates of the widest head, loaded once per split.
#[cube]
fn query_operands<E: Float>(queries: &SharedMemory<E>, #[comptime] geo: MmaGeometry) -> Sequence<Matrix<E>> {
    let warp = UNIT_POS / WARP;
    let mut operands = Sequence::<Matrix<E>>::new();
    #[unroll]
    for d in 0..geo.key_depth {
        let q = operand::<E>(MatrixIdent::B, MatrixLayout::ColMajor);
        let q_at = warp * MMA_HEADS * geo.query_stride + d * MMA_DEPTH;
        cmma::load(&q, &queries.slice(q_at as usize, queries.len()), geo.query_stride);
        operands.push(q);
    }
    operands
}

/// The vectors of a round's rows of one cache (`part` 0: keys, 2: values, the words of the head
/// records and of their tiles): the run of the group's columns from `first_column`, `per_row`
/// vectors long.
#[derive(CubeType)]
struct CopyRun {
    first_column: u32,
    per_row: u32,
}

/// The run of `part`'s columns of the cube's heads.
#[cube]
fn copy_run(meta: &Array<u32>, first_kv: u32, #[comptime] part: u32, #[comptime] geo: MmaGeometry) -> CopyRun {
    let last = first_kv + geo.heads - 1;
    let first_column = meta[(first_kv * 4 + part) as usize];
    let end = meta[(last * 4 + part) as usize] + meta[(last * 4 + part + 1) as usize];
    CopyRun { first_column, per_row: (end - first_column) / geo.vector }
}

/// Writes where each vector of `run` goes, into `targets` from `at`: entry `v` is the element of
/// a buffer where vector `v` of a round's row 0 lands (its head's tile plus its column within the
/// head), entry `per_row + v` that head's tile stride (a row's step). The cube's units take one
/// vector each in turn, so the search for a vector's head runs once per vector, not once per copy.
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_targets(
    meta: &Array<u32>,
    tiles_at: u32,
    first_kv: u32,
    run: &CopyRun,
    targets: &mut SharedMemory<u32>,
    at: u32,
    #[comptime] part: u32,
    #[comptime] geo: MmaGeometry,
) {
    // Per head of the cube: its first column in the rows, its tile less that column, its stride;
    // read at once (no load waits on another).
    let mut starts = Array::<u32>::new(geo.heads as usize);
    let mut bases = Array::<u32>::new(geo.heads as usize);
    let mut strides = Array::<u32>::new(geo.heads as usize);
    #[unroll]
    for i in 0..geo.heads {
        let start = meta[((first_kv + i) * 4 + part) as usize];
        starts[i as usize] = start;
        bases[i as usize] = meta[(tiles_at + (first_kv + i) * TILE_WORDS + part) as usize] - start;
        strides[i as usize] = meta[(tiles_at + (first_kv + i) * TILE_WORDS + part + 1) as usize];
    }
    let mut v = UNIT_POS;
    while v < run.per_row {
        let column = run.first_column + v * geo.vector;
        let (mut base, mut stride) = (bases[0], strides[0]);
        #[unroll]
        for i in 1..geo.heads {
            if column >= starts[i as usize] {
                base = bases[i as usize];
                stride = strides[i as usize];
            }
        }
        targets[(at + v) as usize] = base + column;
        targets[(at + run.per_row + v) as usize] = stride;
        v += geo.units();
    }
}

/// The calling unit's copies of `run` (its targets in `targets` from `at`, as [`write_targets`]
/// wrote them, the cube synchronized since): vector `e = unit + m · units` of the round's `32 ·
/// per_row` vectors is vector `e % per_row` of row `e / per_row`, copied into the tile of the
/// head whose columns hold it. `(row, vector)` steps by `units` from the unit's own, with no
/// division per copy.
#[cube]
fn plan_copies(
    targets: &SharedMemory<u32>,
    at: u32,
    run: &CopyRun,
    width: u32,
    #[comptime] geo: MmaGeometry,
) -> CopyPlan {
    let per_row = run.per_row;
    let (row_step, vector_step) = (geo.units() / per_row, geo.units() % per_row);
    let mut row = UNIT_POS / per_row;
    let mut v = UNIT_POS % per_row;
    let mut cells = Array::<u32>::new(geo.cells as usize);
    #[unroll]
    for m in 0..geo.cells {
        if m > 0 {
            row += row_step;
            v += vector_step;
            if v >= per_row {
                v -= per_row;
                row += 1;
            }
        }
        // `NO_CELL`, written as a literal: a runtime variable (a constant's name is comptime).
        let mut cell = 0xFFFF_FFFFu32;
        if row < WARP {
            let to = targets[(at + v) as usize] + row * targets[(at + per_row + v) as usize];
            cell = (row << CELL_ROW_SHIFT) | (v << CELL_VECTOR_SHIFT) | (to / geo.vector);
        }
        cells[m as usize] = cell;
    }
    CopyPlan { cells, first_column: run.first_column, width }
}

/// Issues the calling unit's asynchronous copies of round `round` (slots `32 · round ..` of the
/// split, its last slot past it) of `src` into buffer `round % 2`, as `plan` says.
#[cube]
fn issue_copies<E: Float, N: Size>(
    src: &Array<Vector<E, N>>,
    stage: &mut SharedMemory<Vector<E, N>>,
    plan: &CopyPlan,
    slots: &TaskSlots,
    round: u32,
    #[comptime] geo: MmaGeometry,
) {
    let buffer = (round % STAGE_BUFFERS) * comptime!(geo.buffer_elements() / geo.vector);
    let row_mask = comptime!(CELL_ROW_VECTORS - 1);
    let to_mask = comptime!(CELL_BUFFER_VECTORS - 1);
    #[unroll]
    for m in 0..geo.cells {
        let cell = plan.cells[m as usize];
        if cell != NO_CELL {
            let slot = u32::min(round * WARP + (cell >> CELL_ROW_SHIFT), slots.count - 1);
            let row_start = ((slots.row0 + slot) * plan.width + plan.first_column) / geo.vector;
            let from = (row_start + ((cell >> CELL_VECTOR_SHIFT) & row_mask)) as usize;
            let to = (buffer + (cell & to_mask)) as usize;
            copy_async(&src.slice(from, from + 1), &mut stage.slice_mut(to, to + 1), geo.vector);
        }
    }
}

/// Issues round `round`'s key and value copies; the caller commits them to the round's barrier.
#[allow(clippy::too_many_arguments)]
#[cube]
fn issue_round<E: Float, N: Size>(
    keys: &Array<Vector<E, N>>,
    values: &Array<Vector<E, N>>,
    stage: &mut SharedMemory<Vector<E, N>>,
    key_plan: &CopyPlan,
    value_plan: &CopyPlan,
    slots: &TaskSlots,
    round: u32,
    #[comptime] geo: MmaGeometry,
) {
    issue_copies(keys, stage, key_plan, slots, round, geo);
    issue_copies(values, stage, value_plan, slots, round, geo);
}

/// Steps 2 to 4 of the module documentation for the calling warp's head over round `round`,
/// staged in buffer `round % 2`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn attend_round<E: Float, N: Size>(
    stage: &SharedMemory<Vector<E, N>>,
    query_ops: &Sequence<Matrix<E>>,
    weights: &mut SharedMemory<E>,
    scratch: &mut SharedMemory<f32>,
    head: &StagedHead,
    slots: &TaskSlots,
    round: u32,
    softmax: &mut WarpSoftmax,
    sums: &Sequence<Matrix<f32>>,
    #[comptime] geo: MmaGeometry,
) {
    let warp = UNIT_POS / WARP;
    let lane = UNIT_POS % WARP;
    let buffer = (round % STAGE_BUFFERS) * geo.buffer_elements();
    let own = warp * MMA_HEADS * SCRATCH_LD;
    let scores = accumulator();
    #[unroll]
    for d in 0..geo.key_depth {
        if d * MMA_DEPTH < head.key_rank {
            let k = operand::<E>(MatrixIdent::A, MatrixLayout::RowMajor);
            let at = (buffer + head.key_tile + d * MMA_DEPTH) / geo.vector;
            cmma::load(&k, &stage.slice(at as usize, stage.len()), head.key_stride);
            cmma::execute::<E, E, f32, f32>(&k, query_ops.index(d as usize), &scores, &scores);
        }
    }
    cmma::store(&mut scratch.slice_mut(own as usize, scratch.len()), &scores, SCRATCH_LD, MatrixLayout::ColMajor);
    sync_plane();
    let t = round * WARP + lane;
    let visible = t < slots.count && decode_slot_visible(slots.first + t, slots.len, slots.start, slots.window);
    let mut s = Array::<f32>::new(geo.group as usize);
    #[unroll]
    for g in 0..geo.group {
        s[g as usize] = scratch[(own + g * SCRATCH_LD + lane) as usize];
    }
    weigh_round(&s, visible, softmax, sums, scratch, weights, head.value_rank, geo.group, geo.head_dim, false);
    let tile = buffer + head.value_tile;
    add_values(
        stage,
        tile,
        head.value_stride,
        weights,
        0,
        sums,
        head.value_rank,
        geo.vector,
        WARP / MMA_DEPTH,
        0u32,
        geo.head_dim.div_ceil(CHANNEL_BLOCK),
    );
}
