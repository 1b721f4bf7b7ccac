//! ZACK decode attention on tensor cores: the kernel a decode step runs where the backend has
//! warp matrix products of f16 `32 × 16` by `16 × 8` blocks into f32 (CUDA's `wmma`) and the
//! reduced cache is held as f16 ([`MmaGeometry`]); elsewhere the scalar kernel
//! ([`decode_kernel`](super::kernel::decode_kernel)) runs.
//!
//! The cubes, their tasks, the split softmax and the partial outputs are those of the scalar
//! kernel. What differs is how the four warps of a cube turn the task's slots into scores and
//! value sums, 32 slots (a warp's round) at a time, the cube's warps taking 128 slots (a cube
//! round) in step:
//! 1. staging: each lane copies its part of the warp's 32 reduced rows of the task's KV head
//!    straight from global to shared memory with asynchronous copies (`cp.async`), consecutive
//!    lanes on consecutive vectors of a row (`rank / vector` copies per lane; slots past the task
//!    read its last slot), into the warp's `32 × stride` f16 tile of one of two buffers. The next
//!    cube round's copies are issued before the wait for the current one's (each buffer has its
//!    barrier), so two rounds are in flight while a warp waits and one while it computes; the
//!    first value round is issued before the softmax;
//! 2. scores: `S = K̃ Q̃ᵀ`, `[32 slots × 8 heads]`, as `⌈rank / 16⌉` products of the tile's
//!    `32 × 16` column blocks with `16 × 8` blocks of the group's reduced queries (rounded to
//!    f16, zero past the rank and for heads past the group), stored to the cube's score buffer;
//! 3. after the split softmax, values: per block of 32 channels, `Oᵀ += Ṽᵀ Pᵀ`, `[32 channels ×
//!    8 heads]`, from the staged value tile and the round's `exp(s − m)` rounded to f16, held in
//!    the warp's accumulators across its rounds;
//! 4. the warps' accumulators are added up in shared memory (the score buffer, in passes) and
//!    written as the task's split.
//!
//! Precision: the products are exact and accumulate in f32; the rounding of `q̃` to f16 moves a
//! score by at most `2^-11 · Σ_j |q̃_j k̃_j|`, and the rounding of `exp(s − m)` (the mass `l` is
//! summed from the f32 values) moves the output by at most `2^-11 · max |ṽ|`. The staged tiles
//! hold zeros or cached values (finite) past a head's rank, where the queries are zero and the
//! output is discarded.

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_masses, split_softmax, SplitOut};
use cubecl::{
    cmma::{self, Matrix, MatrixIdent, MatrixLayout},
    prelude::{
        barrier::{copy_async, Barrier},
        *,
    },
};

use super::task::{read_task, DecodeTaskView, HeadColumns, TaskSlots};

/// Lanes of a warp, and the slots of a round (the products' `m`).
pub const WARP: u32 = 32;
/// Warps per cube.
pub const WARPS: u32 = 4;
/// Units per cube.
pub const MMA_UNITS: u32 = WARP * WARPS;
/// Query heads per product (the products' `n`): a group of up to 8, padded with zero queries.
pub const MMA_HEADS: u32 = 8;
/// Reduced coordinates, or slots, per product (the products' `k`).
pub const MMA_DEPTH: u32 = 16;
/// Channels per value product (its `m`).
const CHANNEL_BLOCK: u32 = 32;
/// Staged tile buffers per warp: one round lands while the other is computed.
const STAGE_BUFFERS: u32 = 2;
/// Bytes of the even and odd rounds' barriers in shared memory.
const BARRIER_BYTES: u32 = STAGE_BUFFERS * 8;

/// Shapes fixed at compile time (one compiled kernel per model geometry and head layout width).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MmaGeometry {
    /// Query heads per KV head, at most 8.
    pub group: u32,
    /// Channels of an uncompressed head (the output width), at most 128.
    pub head_dim: u32,
    /// The longest task, in slots: a multiple of the 32-slot rounds, at least
    /// [`MmaGeometry::out_stride`].
    pub max_chunk: u32,
    /// Elements of one load: divides every head's column offset and rank, the rows' widths and 8;
    /// at least 2 (an asynchronous copy moves 4, 8 or 16 bytes).
    pub vector: u32,
    /// Loads of the widest head's row (its rank over `vector`).
    pub row_loads: u32,
    /// Elements between staged rows: the widest rank rounded up to 32, plus 8
    /// (16 bytes), so that the lanes' 16-byte stores of consecutive rows fall in distinct banks.
    pub stride: u32,
}

impl MmaGeometry {
    /// Blocks of 32 channels of an output head.
    pub fn channel_blocks(&self) -> u32 {
        self.head_dim.div_ceil(CHANNEL_BLOCK)
    }

    /// Floats between heads of a warp's output block in shared memory.
    pub fn out_stride(&self) -> u32 {
        self.channel_blocks() * CHANNEL_BLOCK
    }

    /// Bytes of shared memory one cube uses: the warps' two buffers of staged tiles and their
    /// weights, the queries, the scores, the per-head max and mass, the softmax's reduction lanes
    /// and the copies' barriers.
    pub fn shared_bytes(&self) -> u32 {
        let halves = STAGE_BUFFERS * WARPS * WARP * self.stride + MMA_HEADS * self.stride + WARPS * MMA_HEADS * WARP;
        2 * halves + 4 * (MMA_HEADS * self.max_chunk + self.group * (2 + 16)) + BARRIER_BYTES
    }

    /// Vectors of one buffer of staged tiles (the four warps' `32 × stride` tiles).
    fn buffer_vectors(&self) -> u32 {
        WARPS * WARP * self.stride / self.vector
    }
}

/// One task of ZACK decode attention on tensor cores; see the module documentation. The
/// arguments are those of [`decode_kernel`](super::kernel::decode_kernel), with `E` f16.
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
    splits: u32,
    window: u32,
    key_width: u32,
    value_width: u32,
    #[comptime] geo: MmaGeometry,
) {
    let task = read_task(meta, kv_heads, len, splits, window, geo.group);
    let mut stage =
        SharedMemory::<Vector<E, N>>::new_aligned(comptime!((STAGE_BUFFERS * geo.buffer_vectors()) as usize), 32usize);
    let mut queries = SharedMemory::<E>::new_aligned(comptime!((MMA_HEADS * geo.stride) as usize), 32usize);
    let mut weights = SharedMemory::<E>::new_aligned(comptime!((WARPS * MMA_HEADS * WARP) as usize), 32usize);
    let mut p = SharedMemory::<f32>::new_aligned(comptime!((MMA_HEADS * geo.max_chunk) as usize), 32usize);
    let mut head_max = SharedMemory::<f32>::new(geo.group as usize);
    let mut head_sum = SharedMemory::<f32>::new(geo.group as usize);

    clear_stage(&mut stage, geo);
    stage_queries(reduced_q, &mut queries, &task, key_width, geo);
    // Barriers of the even and odd cube rounds' copies (initializing them synchronizes the cube:
    // the tiles are cleared before any copy lands in them).
    let even = Barrier::shared(MMA_UNITS, UNIT_POS == 0);
    let odd = Barrier::shared(MMA_UNITS, UNIT_POS == 0);
    let (columns, slots) = (&task.columns, &task.slots);
    let key_cells = lane_cells(columns.key_rank, geo);
    issue_round(keys, &mut stage, &key_cells, slots, 0, key_width, columns.key_offset, columns.key_rank, geo);
    even.commit_copy_async();
    round_scores(keys, &mut stage, &even, &odd, &key_cells, &queries, &mut p, columns, slots, key_width, geo);
    // The first value round is copied while the softmax runs (both buffers are free: the last
    // score round ended with the barrier's wait and a warp synchronization).
    let value_cells = lane_cells(columns.value_rank, geo);
    issue_round(values, &mut stage, &value_cells, slots, 0, value_width, columns.value_offset, columns.value_rank, geo);
    even.commit_copy_async();
    sync_cube();
    split_softmax(&mut p, &mut head_max, slots.count, geo.group, geo.max_chunk);
    split_masses(&p, &mut head_sum, slots.count, geo.group, geo.max_chunk);
    let sums = round_value_sums(
        values,
        &mut stage,
        &even,
        &odd,
        &value_cells,
        &p,
        &mut weights,
        columns,
        slots,
        value_width,
        geo,
    );
    sync_cube();
    write_warp_partials(
        &sums,
        &mut p,
        &head_max,
        &head_sum,
        out,
        out_max,
        out_sum,
        task.columns.value_rank,
        &task.target,
        geo,
    );
}

/// A zero `[m × 8]` f32 accumulator of products with depth 16.
#[cube]
fn accumulator(#[comptime] m: u32) -> Matrix<f32> {
    Matrix::<f32>::from_value(
        MatrixIdent::Accumulator,
        m as usize,
        MMA_HEADS as usize,
        MMA_DEPTH as usize,
        MatrixLayout::Undefined,
        0.0,
    )
}

/// An operand (`ident` A: `[m × 16]`, B: `[16 × 8]`) of products of shape `m × 8 × 16`, laid out
/// in memory as `layout`, to be loaded before use.
#[allow(unsafe_code)]
#[cube]
fn operand<E: Float>(
    #[comptime] ident: MatrixIdent,
    #[comptime] m: u32,
    #[comptime] layout: MatrixLayout,
) -> Matrix<E> {
    // SAFETY: every caller loads the operand before the product that reads it.
    unsafe { Matrix::<E>::uninitialized(ident, m as usize, MMA_HEADS as usize, MMA_DEPTH as usize, layout) }
}

/// Zeros every staged tile, so that columns past a head's rank hold finite values (zeros, or
/// another head's cached values once a round has written them).
#[cube]
fn clear_stage<E: Float, N: Size>(stage: &mut SharedMemory<Vector<E, N>>, #[comptime] geo: MmaGeometry) {
    let mut i = UNIT_POS;
    while i < comptime!(STAGE_BUFFERS * geo.buffer_vectors()) {
        stage[i as usize] = Vector::<E, N>::new(E::cast_from(0.0f32));
        i += MMA_UNITS;
    }
}

/// `queries[h * stride + j]` = the group's reduced query `h` at the head's coordinate `j`,
/// rounded to f16, for `h < 8` and `j < stride`: zero past the rank and for `h ≥ group`.
#[cube]
fn stage_queries<E: Float>(
    reduced_q: &Array<f32>,
    queries: &mut SharedMemory<E>,
    task: &DecodeTaskView,
    key_width: u32,
    #[comptime] geo: MmaGeometry,
) {
    let mut i = UNIT_POS;
    while i < comptime!(MMA_HEADS * geo.stride) {
        let (h, j) = (i / geo.stride, i % geo.stride);
        let mut x = 0.0f32;
        if h < geo.group && j < task.columns.key_rank {
            x = reduced_q[((task.target.first_head + h) * key_width + task.columns.key_offset + j) as usize];
        }
        queries[i as usize] = E::cast_from(x);
        i += MMA_UNITS;
    }
}

/// Where the calling lane's loads of a round fall for rows of `rank` elements (`loads = rank /
/// vector` vectors): load `m` is vector `(lane + 32 m) % loads` of the round's row `(lane + 32 m)
/// / loads`, packed as `row << 16 | vector`, so that consecutive lanes read consecutive vectors of
/// a row (whole sectors) and a warp's 32 rows take `loads` loads per lane. The same for every
/// round of a phase: the divisions run once.
#[cube]
fn lane_cells(rank: u32, #[comptime] geo: MmaGeometry) -> Array<u32> {
    let loads = rank / geo.vector;
    let lane = UNIT_POS % WARP;
    let mut cells = Array::<u32>::new(geo.row_loads as usize);
    #[unroll]
    for m in 0..geo.row_loads {
        let e = lane + m * WARP;
        cells[m as usize] = ((e / loads) << 16) | (e % loads);
    }
    cells
}

/// The first vector of the calling warp's tile for cube round `cube_round` (buffer
/// `cube_round % 2`).
#[cube]
fn warp_tile(cube_round: u32, #[comptime] geo: MmaGeometry) -> u32 {
    (cube_round % STAGE_BUFFERS) * geo.buffer_vectors() + (UNIT_POS / WARP) * WARP * geo.stride / geo.vector
}

/// Issues the calling lane's asynchronous copies of cube round `cube_round` into the warp's tile:
/// row `i` of the tile is slot `cube_round · 128 + warp · 32 + i` of the task (its last slot past
/// it), `rank` elements from column `offset` of rows of `width`, placed as [`lane_cells`] says.
/// A warp whose round starts past the task copies nothing. The caller commits the copies to the
/// barrier it then waits on.
#[allow(clippy::too_many_arguments)]
#[cube]
fn issue_round<E: Float, N: Size>(
    src: &Array<Vector<E, N>>,
    stage: &mut SharedMemory<Vector<E, N>>,
    cells: &Array<u32>,
    slots: &TaskSlots,
    cube_round: u32,
    width: u32,
    offset: u32,
    rank: u32,
    #[comptime] geo: MmaGeometry,
) {
    let loads = rank / geo.vector;
    let round = cube_round * WARPS * WARP + (UNIT_POS / WARP) * WARP;
    let tile = warp_tile(cube_round, geo);
    let row_vectors = geo.stride / geo.vector;
    if round < slots.count {
        #[unroll]
        for m in 0..geo.row_loads {
            if m < loads {
                let cell = cells[m as usize];
                let row = u32::min(round + (cell >> 16), slots.count - 1);
                let from = (((slots.row0 + row) * width + offset) / geo.vector + (cell & 0xFFFF)) as usize;
                let to = (tile + (cell >> 16) * row_vectors + (cell & 0xFFFF)) as usize;
                copy_async(&src.slice(from, from + 1), &mut stage.slice_mut(to, to + 1), geo.vector);
            }
        }
    }
}

/// Issues and commits to `next` the copies of the round after `cube_round`, if the task has one,
/// then waits on `this` for cube round `cube_round`'s: a warp has two rounds in flight while it
/// waits, and the next lands while this one is computed. Rounds alternate between the two
/// barriers (and the two buffers), so a wait never waits for the newer round's copies.
#[allow(clippy::too_many_arguments)]
#[cube]
fn next_round<E: Float, N: Size>(
    src: &Array<Vector<E, N>>,
    stage: &mut SharedMemory<Vector<E, N>>,
    this: &Shared<Barrier>,
    next: &Shared<Barrier>,
    cells: &Array<u32>,
    slots: &TaskSlots,
    cube_round: u32,
    width: u32,
    offset: u32,
    rank: u32,
    #[comptime] geo: MmaGeometry,
) {
    if (cube_round + 1) * WARPS * WARP < slots.count {
        issue_round(src, stage, cells, slots, cube_round + 1, width, offset, rank, geo);
        next.commit_copy_async();
    }
    this.arrive_and_wait();
}

/// Phase 2: each warp's rounds' scores into `p[h * max_chunk + t]` (rows `h < 8`; rows past the
/// group are products with zero queries), [`masked_score`] where the query does not see slot `t`.
/// The first round's copies are issued and committed to `even` by the caller; even cube rounds
/// wait on `even`, odd ones on `odd`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn round_scores<E: Float, N: Size>(
    keys: &Array<Vector<E, N>>,
    stage: &mut SharedMemory<Vector<E, N>>,
    even: &Shared<Barrier>,
    odd: &Shared<Barrier>,
    cells: &Array<u32>,
    queries: &SharedMemory<E>,
    p: &mut SharedMemory<f32>,
    columns: &HeadColumns,
    slots: &TaskSlots,
    key_width: u32,
    #[comptime] geo: MmaGeometry,
) {
    let (offset, rank) = (columns.key_offset, columns.key_rank);
    let depth = rank.div_ceil(MMA_DEPTH);
    let mut cube_round = 0u32;
    while cube_round * WARPS * WARP < slots.count {
        next_round(keys, stage, even, odd, cells, slots, cube_round, key_width, offset, rank, geo);
        score_round(stage, queries, p, slots, cube_round, depth, geo);
        cube_round += 1;
        if cube_round * WARPS * WARP < slots.count {
            next_round(keys, stage, odd, even, cells, slots, cube_round, key_width, offset, rank, geo);
            score_round(stage, queries, p, slots, cube_round, depth, geo);
            cube_round += 1;
        }
    }
}

/// The scores of the calling warp's 32 slots of cube round `cube_round` (none past the task),
/// from its staged tile and the queries' first `16 · depth` coordinates. Ends with a warp
/// synchronization, after which the tile may be overwritten.
#[cube]
fn score_round<E: Float, N: Size>(
    stage: &SharedMemory<Vector<E, N>>,
    queries: &SharedMemory<E>,
    p: &mut SharedMemory<f32>,
    slots: &TaskSlots,
    cube_round: u32,
    depth: u32,
    #[comptime] geo: MmaGeometry,
) {
    let round = cube_round * WARPS * WARP + (UNIT_POS / WARP) * WARP;
    if round < slots.count {
        score_tile(stage, queries, p, slots, round, warp_tile(cube_round, geo) * geo.vector, depth, geo);
    }
    sync_plane();
}

/// The scores of 32 slots from slot `round`, staged at element `tile`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn score_tile<E: Float, N: Size>(
    stage: &SharedMemory<Vector<E, N>>,
    queries: &SharedMemory<E>,
    p: &mut SharedMemory<f32>,
    slots: &TaskSlots,
    round: u32,
    tile: u32,
    depth: u32,
    #[comptime] geo: MmaGeometry,
) {
    let scores = accumulator(WARP);
    let mut d = 0u32;
    while d < depth {
        let k = operand::<E>(MatrixIdent::A, WARP, MatrixLayout::RowMajor);
        cmma::load(&k, &stage.slice(((tile + d * MMA_DEPTH) / geo.vector) as usize, stage.len()), geo.stride);
        let q = operand::<E>(MatrixIdent::B, WARP, MatrixLayout::ColMajor);
        cmma::load(&q, &queries.slice((d * MMA_DEPTH) as usize, queries.len()), geo.stride);
        cmma::execute::<E, E, f32, f32>(&k, &q, &scores, &scores);
        d += 1;
    }
    cmma::store(&mut p.slice_mut(round as usize, p.len()), &scores, geo.max_chunk, MatrixLayout::ColMajor);
    sync_plane();
    let t = round + UNIT_POS % WARP;
    if t < slots.count && !decode_slot_visible(slots.first + t, slots.len, slots.start, slots.window) {
        #[unroll]
        for h in 0..geo.group {
            p[(h * geo.max_chunk + t) as usize] = masked_score();
        }
    }
}

/// Phase 3: the calling warp's `Σ_t exp(s_t − m) · ṽ_t` over its rounds, per block of 32
/// channels, as `[32 channels × 8 heads]` accumulators (zero where the block starts past the
/// value rank). The first round's copies are issued and committed to `even` by the caller; even
/// cube rounds wait on `even`, odd ones on `odd`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn round_value_sums<E: Float, N: Size>(
    values: &Array<Vector<E, N>>,
    stage: &mut SharedMemory<Vector<E, N>>,
    even: &Shared<Barrier>,
    odd: &Shared<Barrier>,
    cells: &Array<u32>,
    p: &SharedMemory<f32>,
    weights: &mut SharedMemory<E>,
    columns: &HeadColumns,
    slots: &TaskSlots,
    value_width: u32,
    #[comptime] geo: MmaGeometry,
) -> Sequence<Matrix<f32>> {
    let (offset, rank) = (columns.value_offset, columns.value_rank);
    let mut sums = Sequence::<Matrix<f32>>::new();
    #[unroll]
    for _ in 0..geo.channel_blocks() {
        sums.push(accumulator(CHANNEL_BLOCK));
    }
    let mut cube_round = 0u32;
    while cube_round * WARPS * WARP < slots.count {
        next_round(values, stage, even, odd, cells, slots, cube_round, value_width, offset, rank, geo);
        value_round(stage, p, weights, &sums, slots, cube_round, rank, geo);
        cube_round += 1;
        if cube_round * WARPS * WARP < slots.count {
            next_round(values, stage, odd, even, cells, slots, cube_round, value_width, offset, rank, geo);
            value_round(stage, p, weights, &sums, slots, cube_round, rank, geo);
            cube_round += 1;
        }
    }
    sums
}

/// Adds the calling warp's 32 slots of cube round `cube_round` (none past the task) to its value
/// sums `sums`, from its staged tile of rows of `rank` elements and the slots' `exp(s − m)` in
/// `p`. Ends with a warp synchronization, after which the tile may be overwritten.
#[allow(clippy::too_many_arguments)]
#[cube]
fn value_round<E: Float, N: Size>(
    stage: &SharedMemory<Vector<E, N>>,
    p: &SharedMemory<f32>,
    weights: &mut SharedMemory<E>,
    sums: &Sequence<Matrix<f32>>,
    slots: &TaskSlots,
    cube_round: u32,
    rank: u32,
    #[comptime] geo: MmaGeometry,
) {
    let warp = UNIT_POS / WARP;
    let lane = UNIT_POS % WARP;
    let own = warp * MMA_HEADS * WARP;
    let round = cube_round * WARPS * WARP + warp * WARP;
    if round < slots.count {
        let tile = warp_tile(cube_round, geo) * geo.vector;
        // This round's weights, `[8 heads × 32 slots]`: zero past the task and the group.
        let t = round + lane;
        #[unroll]
        for h in 0..MMA_HEADS {
            let mut w = 0.0f32;
            if h < geo.group && t < slots.count {
                w = p[(h * geo.max_chunk + t) as usize];
            }
            weights[(own + h * WARP + lane) as usize] = E::cast_from(w);
        }
        sync_plane();
        #[unroll]
        for d in 0..comptime!(WARP / MMA_DEPTH) {
            let w = operand::<E>(MatrixIdent::B, CHANNEL_BLOCK, MatrixLayout::ColMajor);
            cmma::load(&w, &weights.slice((own + d * MMA_DEPTH) as usize, weights.len()), WARP);
            #[unroll]
            for c in 0..geo.channel_blocks() {
                if c * CHANNEL_BLOCK < rank {
                    let v = operand::<E>(MatrixIdent::A, CHANNEL_BLOCK, MatrixLayout::ColMajor);
                    let at = (tile + d * MMA_DEPTH * geo.stride + c * CHANNEL_BLOCK) / geo.vector;
                    cmma::load(&v, &stage.slice(at as usize, stage.len()), geo.stride);
                    let acc = sums.index(c as usize);
                    cmma::execute::<E, E, f32, f32>(&v, &w, acc, acc);
                }
            }
        }
    }
    sync_plane();
}

/// Phase 4: adds up the warps' value sums (stored to `p`, as many warps a pass as fit) and
/// writes each head's unnormalized output (0 past the value rank), max and mass as the task's
/// split. The caller synchronizes the cube first (`p` is overwritten).
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_warp_partials(
    sums: &Sequence<Matrix<f32>>,
    p: &mut SharedMemory<f32>,
    head_max: &SharedMemory<f32>,
    head_sum: &SharedMemory<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    value_rank: u32,
    target: &SplitOut,
    #[comptime] geo: MmaGeometry,
) {
    let warp = UNIT_POS / WARP;
    let stride = geo.out_stride();
    let per_pass = comptime!(geo.max_chunk / geo.out_stride());
    let per_unit = comptime!((geo.group * geo.head_dim).div_ceil(MMA_UNITS));
    let mut o = Array::<f32>::new(per_unit as usize);
    #[unroll]
    for i in 0..per_unit {
        o[i as usize] = 0.0;
    }
    #[unroll]
    for pass in 0..comptime!(WARPS.div_ceil(per_pass)) {
        if warp / per_pass == pass {
            let at = (warp % per_pass) * MMA_HEADS * stride;
            #[unroll]
            for c in 0..geo.channel_blocks() {
                let slice = &mut p.slice_mut((at + c * CHANNEL_BLOCK) as usize, p.len());
                cmma::store(slice, sums.index(c as usize), stride, MatrixLayout::ColMajor);
            }
        }
        sync_cube();
        #[unroll]
        for i in 0..per_unit {
            let e = UNIT_POS + i * MMA_UNITS;
            if e < geo.group * geo.head_dim {
                let (h, c) = (e / geo.head_dim, e % geo.head_dim);
                #[unroll]
                for w in 0..per_pass {
                    if pass * per_pass + w < WARPS {
                        o[i as usize] += p[(w * MMA_HEADS * stride + h * stride + c) as usize];
                    }
                }
            }
        }
        sync_cube();
    }
    #[unroll]
    for i in 0..per_unit {
        let e = UNIT_POS + i * MMA_UNITS;
        if e < geo.group * geo.head_dim {
            let (h, c) = (e / geo.head_dim, e % geo.head_dim);
            target.write_output(out, h, c, select(c < value_rank, o[i as usize], 0.0), geo.head_dim);
        }
    }
    if UNIT_POS < geo.group {
        target.write_stats(out_max, out_sum, UNIT_POS, head_max[UNIT_POS as usize], head_sum[UNIT_POS as usize]);
    }
}
