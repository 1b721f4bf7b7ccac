//! ZACK decode attention on rows landed whole by the tensor memory accelerator (TMA), with warp
//! products read straight from the landed rows: the kernel a decode step runs on CUDA devices
//! with TMA and f16 `m16n8k16` warp products (Hopper) when the reduced cache is held as f16
//! ([`TmaGeometry`]); other CUDA devices run [`mma_decode_kernel`](super::mma_kernel), other
//! backends the portable kernel.
//!
//! A cube works as the [`mma_decode_kernel`](super::mma_kernel)'s does (one split of one
//! sequence for a group of KV heads whose columns lie side by side, one warp per KV head, rounds
//! of 32 slots, an online softmax per warp), but its split's rounds are interleaved with the
//! other splits' ([`InterleavedRounds`]: split `s` of `S` takes rounds `s, s + S, …`) and its rows
//! arrive otherwise:
//! 1. landing: one unit asks the TMA for the round's rows of the group's key columns and of its
//!    value columns, in blocks of [`BLOCK_COLUMNS`] columns (128 bytes) by 32 rows, each landed
//!    with the 128-byte swizzle (the 16-byte chunk `c` of row `r` lands at chunk `c ⊕ (r mod 8)`),
//!    into one of two stages, on the stage's barrier (which counts the bytes). The next round is
//!    asked for before the wait for this one. Rows past the cache's end land as zeros; columns past
//!    the group's run are the next heads' (or zeros past the rows' end);
//! 2. scores (each warp, its head): `S = K̃ Q̃ᵀ` in `16 × 8 × 16` products, the key operands
//!    loaded from the landed blocks by `ldmatrix` (each lane gives the swizzled address of one
//!    16-byte row piece, so a head's columns may start at any multiple of 8 and the eight rows of
//!    a load fall in distinct banks), the query operands held in registers for the split;
//! 3. online softmax as in [`weigh_round`](burn_kvcompress::kernels::warp_mma::weigh_round), the
//!    value sums rescaled in registers;
//! 4. values: `Oᵀ += Ṽᵀ Pᵀ` in `16 × 8 × 16` products, the value operands loaded transposed from
//!    the landed blocks (`ldmatrix.trans`), the weights from the warp's weights tile.
//!
//! Precision as in [`mma_decode_kernel`](super::mma_kernel): exact f16 products accumulated in
//! f32, `q̃` and the weights rounded to f16. Columns a product reads past a head's rank hold
//! finite values (the next head's, or zeros): the queries are zero there and the outputs past the
//! value rank are discarded. A product may read up to 8 columns past its run's landed blocks:
//! past the keys that is the stage's values, past the values the other stage's keys, past the
//! last stage a zeroed guard block (stage 1's first block is zeroed too, for round 0).

use burn_kvcompress::kernels::{
    decode_slot_visible,
    warp_mma::{
        clear_weights, move_references, store_weights, warp_softmax, write_warp_stats, Halves, Pair, WarpSoftmax,
        MMA_HEADS, SCRATCH_LD, WARP, WARP_SHARED_BYTES,
    },
    SplitOut,
};
use cubecl::{
    cmma::{MatrixIdent, MmaDefinition},
    prelude::{barrier::Barrier, *},
};

use super::{
    mma_kernel::stage_queries,
    task::{interleaved_rounds, HeadColumns, InterleavedRounds, TaskSlots},
};

/// Columns of one landed block: 128 bytes of f16, the span of the TMA's 128-byte swizzle.
pub const BLOCK_COLUMNS: u32 = 64;
/// Elements of one landed block: a round's 32 rows of [`BLOCK_COLUMNS`].
pub const BLOCK_ELEMENTS: u32 = WARP * BLOCK_COLUMNS;
/// Elements of a 16-byte row piece (one row of an `ldmatrix` 8 × 8 matrix, one swizzled chunk).
const CHUNK: u32 = 8;
/// Rows of a product's `A` operand: slots of a score product, channels of a value product.
const PRODUCT_ROWS: u32 = 16;
/// Depth of a product: coordinates of a score product, slots of a value product.
const PRODUCT_DEPTH: u32 = 16;

/// Shapes fixed at compile time (one compiled kernel per model geometry and head layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TmaGeometry {
    /// Query heads per KV head, at most 8.
    pub group: u32,
    /// Channels of an uncompressed head (the output width), a multiple of 16 up to 128.
    pub head_dim: u32,
    /// KV heads per cube (one warp each); their columns lie side by side.
    pub heads: u32,
    /// Landed blocks per round of the keys of a cube's heads (the widest group's run).
    pub key_blocks: u32,
    /// Landed blocks per round of their values.
    pub value_blocks: u32,
    /// Score products per round of the widest head: its rank over 16, rounded up.
    pub key_depth: u32,
    /// Elements between one query head's staged reduced queries (`16 · key_depth + 8`).
    pub query_stride: u32,
}

impl TmaGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        WARP * self.heads
    }

    /// Elements of one stage: the round's key blocks, then its value blocks.
    pub fn stage_elements(&self) -> u32 {
        (self.key_blocks + self.value_blocks) * BLOCK_ELEMENTS
    }

    /// Bytes the TMA lands per round (f16).
    pub fn landed_bytes(&self) -> u32 {
        2 * self.stage_elements()
    }

    /// Bytes of shared memory one cube uses: two stages and the guard block (aligned to 1 KiB, as
    /// the swizzle needs), the reduced queries, the warps' weights and scratch, two barriers.
    pub fn shared_bytes(&self) -> u32 {
        let landed = 2 * (2 * self.stage_elements() + BLOCK_ELEMENTS);
        1024 + landed + 2 * self.heads * MMA_HEADS * self.query_stride + self.heads * WARP_SHARED_BYTES + 16
    }
}

/// Decode attention of one split of one sequence for one group of KV heads; see the module
/// documentation.
///
/// - `reduced_q`: `[batch, kv_heads · group, key_width]` f32, the reduced, scaled queries;
/// - `keys`, `values`: TMA maps of the caches as `[batch · len, width]` f16, boxes of 32 rows by
///   [`BLOCK_COLUMNS`] columns with the 128-byte swizzle;
/// - `meta`: per KV head `[key_offset, key_rank, value_offset, value_rank]`, then each sequence's
///   first real slot;
/// - `out`, `out_max`, `out_sum`: the partials, `[batch · kv_heads · group, splits, head_dim]`
///   and `[…, splits]`;
/// - cube `(split, group of KV heads, sequence)`: the split's interleaved rounds
///   ([`InterleavedRounds`]); `CUBE_COUNT_X` splits, at most `⌈len / 32⌉`, so that every split has
///   a round.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn tma_decode_kernel<E: Float>(
    reduced_q: &Array<f32>,
    keys: &TensorMap<E, Tiled>,
    values: &TensorMap<E, Tiled>,
    meta: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    kv_heads: u32,
    len: u32,
    window: u32,
    key_width: u32,
    #[comptime] geo: TmaGeometry,
) {
    let batch_row = CUBE_POS_Z;
    let first_kv = CUBE_POS_Y * geo.heads;
    let task = interleaved_rounds(meta, kv_heads, len, window);
    // The group's runs of key and value columns start at its first head's: the rows' first
    // columns where one group holds every KV head (the first round is then asked for before
    // any metadata arrives).
    let mut key_run = 0u32;
    let mut value_run = 0u32;
    if CUBE_COUNT_Y > 1 {
        key_run = meta[(first_kv * 4) as usize];
        value_run = meta[(first_kv * 4 + 2) as usize];
    }
    let mut stage =
        SharedMemory::<E>::new_aligned(comptime!((2 * geo.stage_elements() + BLOCK_ELEMENTS) as usize), 1024usize);
    let even = Barrier::shared(1, UNIT_POS == 0);
    let odd = Barrier::shared(1, UNIT_POS == 0);
    if UNIT_POS == 0 {
        land_round(keys, values, &mut stage, &even, key_run, value_run, &task, 0, geo);
    }
    let kv_head = first_kv + UNIT_POS / WARP;
    let at = kv_head * 4;
    let (key_offset, key_rank) = (meta[at as usize], meta[(at + 1) as usize]);
    let (value_offset, value_rank) = (meta[(at + 2) as usize], meta[(at + 3) as usize]);
    let target =
        SplitOut { first_head: (batch_row * kv_heads + kv_head) * geo.group, split: CUBE_POS_X, splits: CUBE_COUNT_X };
    // The head's columns from its group's runs.
    let columns =
        HeadColumns { key_offset: key_offset - key_run, key_rank, value_offset: value_offset - value_run, value_rank };
    let mut queries =
        SharedMemory::<E>::new_aligned(comptime!((geo.heads * MMA_HEADS * geo.query_stride) as usize), 16usize);
    let mut weights = SharedMemory::<E>::new_aligned(comptime!((geo.heads * MMA_HEADS * WARP) as usize), 16usize);
    let mut scratch =
        SharedMemory::<f32>::new_aligned(comptime!((geo.heads * MMA_HEADS * SCRATCH_LD) as usize), 16usize);
    // While round 0 lands: the blocks a product may read before anything lands there are
    // zeroed, the weights cleared and the queries staged.
    clear_guards(&mut stage, geo);
    clear_weights(&mut weights);
    stage_queries(
        reduced_q,
        &mut queries,
        key_offset,
        key_rank,
        target.first_head,
        key_width,
        geo.group,
        geo.query_stride,
    );
    sync_async_proxy_shared();
    sync_cube();
    let query_ops = query_operands(&queries, geo);
    let mut softmax = warp_softmax(geo.group);
    let mut sums = Array::<Pair>::new(comptime!((2 * geo.head_dim / PRODUCT_ROWS) as usize));
    #[unroll]
    for i in 0..comptime!(2 * geo.head_dim / PRODUCT_ROWS) {
        sums[i as usize] = Pair::new(0.0);
    }
    // Even rounds land on `even`, odd ones on `odd`; each round asks for the next before its wait.
    let mut round = 0u32;
    while round < task.rounds {
        let next = round + 1;
        if UNIT_POS == 0 && next < task.rounds {
            if next % 2 == 1 {
                land_round(keys, values, &mut stage, &odd, key_run, value_run, &task, next, geo);
            } else {
                land_round(keys, values, &mut stage, &even, key_run, value_run, &task, next, geo);
            }
        }
        if round % 2 == 1 {
            odd.wait_parity((round / 2) % 2);
        } else {
            even.wait_parity((round / 2) % 2);
        }
        attend_round(
            &stage,
            &query_ops,
            &mut weights,
            &mut scratch,
            &columns,
            &task.slots,
            round,
            task.position(round),
            &mut softmax,
            &mut sums,
            geo,
        );
        sync_cube();
        round = next;
    }
    write_outputs(&sums, value_rank, &target, out, geo);
    write_warp_stats(&softmax, &target, out_max, out_sum, geo.group);
}

/// Asks the TMA for the split's round `round`'s rows (slots `32 · position ..` of the sequence,
/// [`InterleavedRounds::position`]) of the key columns from `key_run` and the value columns from
/// `value_run`, into stage `round % 2`, on `barrier` (which then expects the stage's bytes).
/// Called by one unit.
#[allow(clippy::too_many_arguments)]
#[cube]
fn land_round<E: Float>(
    keys: &TensorMap<E, Tiled>,
    values: &TensorMap<E, Tiled>,
    stage: &mut SharedMemory<E>,
    barrier: &Barrier,
    key_run: u32,
    value_run: u32,
    task: &InterleavedRounds,
    round: u32,
    #[comptime] geo: TmaGeometry,
) {
    // The stage is rewritten by the TMA (the async proxy) after the units read it.
    sync_async_proxy_shared();
    barrier.arrive_and_expect_tx(1, comptime!(geo.landed_bytes()));
    let row = (task.slots.row0 + task.position(round) * WARP) as i32;
    let base = (round % 2) * comptime!(geo.stage_elements());
    #[unroll]
    for b in 0..geo.key_blocks {
        let at = (base + b * BLOCK_ELEMENTS) as usize;
        let column = (key_run + b * BLOCK_COLUMNS) as i32;
        barrier.tma_load_2d(keys, &mut stage.slice_mut(at, at + BLOCK_ELEMENTS as usize), row, column);
    }
    #[unroll]
    for b in 0..geo.value_blocks {
        let at = (base + (geo.key_blocks + b) * BLOCK_ELEMENTS) as usize;
        let column = (value_run + b * BLOCK_COLUMNS) as i32;
        barrier.tma_load_2d(values, &mut stage.slice_mut(at, at + BLOCK_ELEMENTS as usize), row, column);
    }
}

/// Zeros stage 1's first block and the guard block after the stages, which products may read
/// past a run's end before any round lands there (see the module documentation).
#[cube]
fn clear_guards<E: Float>(stage: &mut SharedMemory<E>, #[comptime] geo: TmaGeometry) {
    let zero = E::cast_from(0.0f32);
    #[unroll]
    for part in 0..2u32 {
        let at = comptime!(geo.stage_elements()) * (1 + part);
        let mut i = UNIT_POS;
        while i < BLOCK_ELEMENTS {
            stage[(at + i) as usize] = zero;
            i += comptime!(geo.units());
        }
    }
}

/// Where lane-row `row` (a round's slot) reads its 16-byte piece at `column` (a multiple of 8
/// from the run's first column) of the blocks from element `blocks` of the stage: the block, the
/// row within it, and the swizzled chunk.
#[cube]
fn landed_at(blocks: u32, row: u32, column: u32) -> u32 {
    let chunk = (column % BLOCK_COLUMNS) / CHUNK;
    blocks + (column / BLOCK_COLUMNS) * BLOCK_ELEMENTS + row * BLOCK_COLUMNS + ((chunk ^ (row % CHUNK)) * CHUNK)
}

/// The calling warp's reduced queries as the score products' `B` operands (`[16 coordinates × 8
/// heads]`, two registers per lane), one per block of 16 coordinates of the widest head, loaded
/// once per split: `ldmatrix` of the staged `[8 heads × stride]` rows, lane `l < 16` giving head
/// `l mod 8`'s piece `l / 8` of the block.
#[cube]
fn query_operands<E: Float>(queries: &SharedMemory<E>, #[comptime] geo: TmaGeometry) -> Array<Halves<E>> {
    let product = MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
    let lane = UNIT_POS % WARP;
    let mut operands = Array::<Halves<E>>::new(comptime!((2 * geo.key_depth) as usize));
    let row_at = (UNIT_POS / WARP) * MMA_HEADS * geo.query_stride + (lane % 8) * geo.query_stride;
    #[unroll]
    for d in 0..geo.key_depth {
        let at = row_at + d * PRODUCT_DEPTH + ((lane / 8) % 2) * CHUNK;
        let b = product.load_matrix::<E, Const<2>>(
            &queries.slice(at as usize, (at + CHUNK) as usize),
            MatrixIdent::B,
            2usize,
            false,
        );
        operands[(2 * d) as usize] = b[0];
        operands[(2 * d + 1) as usize] = b[1];
    }
    operands
}

/// Steps 2 to 4 of the module documentation for the calling warp's head (its `columns` counted
/// from its group's runs) over the split's round `round` (slots `32 · position ..` of the
/// sequence `slots`), landed in stage `round % 2`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn attend_round<E: Float>(
    stage: &SharedMemory<E>,
    query_ops: &Array<Halves<E>>,
    weights: &mut SharedMemory<E>,
    scratch: &mut SharedMemory<f32>,
    columns: &HeadColumns,
    slots: &TaskSlots,
    round: u32,
    position: u32,
    softmax: &mut WarpSoftmax,
    sums: &mut Array<Pair>,
    #[comptime] geo: TmaGeometry,
) {
    let lane = UNIT_POS % WARP;
    let base = (round % 2) * comptime!(geo.stage_elements());
    let own = (UNIT_POS / WARP) * MMA_HEADS * SCRATCH_LD;
    round_scores(stage, base, query_ops, scratch, own, columns.key_offset, columns.key_rank, geo);
    sync_plane();
    let t = position * WARP + lane;
    let visible = t < slots.count && decode_slot_visible(slots.first + t, slots.len, slots.start, slots.window);
    let mut s = Array::<f32>::new(geo.group as usize);
    #[unroll]
    for g in 0..geo.group {
        s[g as usize] = scratch[(own + g * SCRATCH_LD + lane) as usize];
    }
    let moves = move_references(&s, visible, softmax, geo.group, false);
    if moves.rescale {
        rescale_sums(sums, &moves.factor, geo);
    }
    store_weights(&s, visible, softmax, weights, geo.group);
    let values_at = base + comptime!(geo.key_blocks * BLOCK_ELEMENTS);
    add_values(stage, values_at, weights, sums, columns.value_offset, columns.value_rank, geo);
}

/// The round's scores `K̃ Q̃ᵀ` of the calling warp's head (`[32 slots × 8 heads]`, two products
/// of 16 slots per block of 16 coordinates below `key_rank`), stored to the warp's scratch at
/// `own`: head `h`'s score of slot `t` at `own + h · SCRATCH_LD + t` (heads past the group not
/// stored).
#[allow(clippy::too_many_arguments)]
#[cube]
fn round_scores<E: Float>(
    stage: &SharedMemory<E>,
    base: u32,
    query_ops: &Array<Halves<E>>,
    scratch: &mut SharedMemory<f32>,
    own: u32,
    key_column: u32,
    key_rank: u32,
    #[comptime] geo: TmaGeometry,
) {
    let product = MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    // Lane `l` gives row `l mod 8` of matrix `l / 8`: matrices 0 and 1 are the slots' two halves
    // of the first 8 coordinates, 2 and 3 of the next 8.
    let (matrix, piece_row) = (lane / 8, lane % 8);
    #[unroll]
    for half in 0..2u32 {
        let mut acc = Array::<Pair>::new(2usize);
        acc[0] = Pair::new(0.0);
        acc[1] = Pair::new(0.0);
        let row = half * PRODUCT_ROWS + (matrix % 2) * CHUNK + piece_row;
        #[unroll]
        for d in 0..geo.key_depth {
            if d * PRODUCT_DEPTH < key_rank {
                let column = key_column + d * PRODUCT_DEPTH + (matrix / 2) * CHUNK;
                let at = landed_at(base, row, column);
                let a = product.load_matrix::<E, Const<2>>(
                    &stage.slice(at as usize, (at + CHUNK) as usize),
                    MatrixIdent::A,
                    4usize,
                    false,
                );
                let mut b = Array::<Halves<E>>::new(2usize);
                b[0] = query_ops[(2 * d) as usize];
                b[1] = query_ops[(2 * d + 1) as usize];
                product.execute_inplace(&a, &b, &mut acc);
            }
        }
        // Lane (g, t) holds slots g and g + 8 of the half, heads 2t and 2t + 1.
        #[unroll]
        for r in 0..2u32 {
            let slot = half * PRODUCT_ROWS + g + r * CHUNK;
            #[unroll]
            for c in 0..2u32 {
                let h = 2 * t + c;
                if h < geo.group {
                    scratch[(own + h * SCRATCH_LD + slot) as usize] = acc[r as usize][c as usize];
                }
            }
        }
    }
}

/// `Oᵀ += Ṽᵀ Pᵀ` for the calling warp over the round's 32 slots: per block of 16 channels below
/// `value_rank` (from `value_column` of the value run, landed from element `values_at`), two
/// products of 16 slots, the value operands loaded transposed, the weights from the warp's
/// weights tile (`[8 heads × 32 slots]`). `sums[2i + r]` holds channel `16i + g + 8r`, heads
/// `2t`, `2t + 1` of lane `(g, t)`.
#[cube]
fn add_values<E: Float>(
    stage: &SharedMemory<E>,
    values_at: u32,
    weights: &SharedMemory<E>,
    sums: &mut Array<Pair>,
    value_column: u32,
    value_rank: u32,
    #[comptime] geo: TmaGeometry,
) {
    let product = MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
    let lane = UNIT_POS % WARP;
    let (matrix, piece_row) = (lane / 8, lane % 8);
    // Both depths' weights: matrix `m` is head `l mod 8`'s slots `8m ..`.
    let w_at = (UNIT_POS / WARP) * MMA_HEADS * WARP + piece_row * WARP + matrix * CHUNK;
    let w = product.load_matrix::<E, Const<2>>(
        &weights.slice(w_at as usize, (w_at + CHUNK) as usize),
        MatrixIdent::B,
        4usize,
        false,
    );
    #[unroll]
    for depth in 0..2u32 {
        let mut b = Array::<Halves<E>>::new(2usize);
        b[0] = w[(2 * depth) as usize];
        b[1] = w[(2 * depth + 1) as usize];
        // Lane `l` gives slot `16 depth + 8 (m / 2) + l mod 8` of matrix `m = l / 8`: matrices 0
        // and 1 are the first 8 slots of the block's two channel halves, 2 and 3 the next 8.
        let slot = depth * PRODUCT_DEPTH + (matrix / 2) * CHUNK + piece_row;
        #[unroll]
        for i in 0..comptime!(geo.head_dim / PRODUCT_ROWS) {
            if i * PRODUCT_ROWS < value_rank {
                let column = value_column + i * PRODUCT_ROWS + (matrix % 2) * CHUNK;
                let at = landed_at(values_at, slot, column);
                let a = product.load_matrix::<E, Const<2>>(
                    &stage.slice(at as usize, (at + CHUNK) as usize),
                    MatrixIdent::A,
                    4usize,
                    true,
                );
                let mut acc = Array::<Pair>::new(2usize);
                acc[0] = sums[(2 * i) as usize];
                acc[1] = sums[(2 * i + 1) as usize];
                product.execute_inplace(&a, &b, &mut acc);
                sums[(2 * i) as usize] = acc[0];
                sums[(2 * i + 1) as usize] = acc[1];
            }
        }
    }
}

/// Multiplies the calling lane's value sums of heads `2t` and `2t + 1` by their `factor`.
#[cube]
fn rescale_sums(sums: &mut Array<Pair>, factor: &Array<f32>, #[comptime] geo: TmaGeometry) {
    let t = UNIT_POS % 4;
    let mut by = Pair::new(1.0);
    #[unroll]
    for g in 0..geo.group {
        if g == 2 * t {
            by[0] = factor[g as usize];
        }
        if g == 2 * t + 1 {
            by[1] = factor[g as usize];
        }
    }
    #[unroll]
    for i in 0..comptime!(2 * geo.head_dim / PRODUCT_ROWS) {
        sums[i as usize] = sums[i as usize] * by;
    }
}

/// Writes the calling warp's unnormalized outputs (0 past the value rank) as `target`'s split:
/// lane `(g, t)` its channels `16i + g + 8r` of heads `2t`, `2t + 1`.
#[cube]
fn write_outputs(
    sums: &Array<Pair>,
    value_rank: u32,
    target: &SplitOut,
    out: &mut Array<f32>,
    #[comptime] geo: TmaGeometry,
) {
    let lane = UNIT_POS % WARP;
    let (g, t) = (lane / 4, lane % 4);
    #[unroll]
    for i in 0..comptime!(geo.head_dim / PRODUCT_ROWS) {
        #[unroll]
        for r in 0..2u32 {
            let channel = i * PRODUCT_ROWS + g + r * CHUNK;
            #[unroll]
            for c in 0..2u32 {
                let h = 2 * t + c;
                if h < geo.group {
                    let x = select(channel < value_rank, sums[(2 * i + r) as usize][c as usize], 0.0);
                    target.write_output(out, h, channel, x, geo.head_dim);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 16-byte bank group (of 8) where element `at` of a 1 KiB-aligned stage lies.
    fn bank_group(at: u32) -> u32 {
        (at * 2 / 16) % 8
    }

    #[test]
    fn landed_pieces_fill_each_block_once_and_a_loads_rows_take_distinct_banks() {
        // Three blocks of a run: every (row, piece) lands at its own 16-byte piece of its block.
        let mut seen = vec![false; (3 * BLOCK_ELEMENTS / CHUNK) as usize];
        for row in 0..WARP {
            for column in (0..3 * BLOCK_COLUMNS).step_by(CHUNK as usize) {
                let at = landed_at(0, row, column);
                assert_eq!(at % CHUNK, 0);
                assert_eq!(at / BLOCK_ELEMENTS, column / BLOCK_COLUMNS, "row {row}, column {column}");
                assert!(!std::mem::replace(&mut seen[(at / CHUNK) as usize], true), "row {row}, column {column}");
            }
        }
        assert!(seen.iter().all(|&s| s));
        // An `ldmatrix` reads 8 consecutive rows at one column (any multiple of 8, as heads start):
        // with the swizzle they fall in 8 distinct bank groups (without it, all in one).
        for first in (0..WARP).step_by(8) {
            for column in (0..3 * BLOCK_COLUMNS).step_by(CHUNK as usize) {
                let mut groups: Vec<u32> = (first..first + 8).map(|r| bank_group(landed_at(0, r, column))).collect();
                groups.sort_unstable();
                groups.dedup();
                assert_eq!(groups.len(), 8, "rows {first}.., column {column}");
            }
        }
    }
}
