//! The flash-attention kernel: see the [module documentation](super).

use cubecl::{
    cmma::{MatrixIdent, MmaDefinition},
    prelude::*,
};

use crate::kernels::{
    first_visible_slot, masked_score, slot_visible,
    warp_mma::{Halves, Pair, WARP},
};

/// Query rows of one warp: the rows of a `16 × 8 × 16` product.
pub const WARP_ROWS: u32 = 16;
/// Key slots of one tile.
pub const KEY_ROWS: u32 = 64;
/// Elements of a 16-byte piece: one vector of a staged row, one row of an `ldmatrix` 8 × 8 matrix.
pub const PIECE: u32 = 8;
/// Most pieces of the keys and of the values a unit loads before storing them (a round of
/// [`stage_tiles`]): 32 registers each.
const MAX_STAGED_LOADS: u32 = 8;
/// Pieces a staged row is padded by, so that the eight rows an `ldmatrix` reads at one column
/// fall in distinct banks.
const PAD_PIECES: u32 = 1;

/// Shapes fixed at compile time: one kernel per head dimension, GQA group, cube size and output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlashGeometry {
    /// Channels of a head: a multiple of 16, at most 128.
    pub head_dim: u32,
    /// Query heads per KV head.
    pub group: u32,
    /// Warps per cube, each taking 16 query rows: 4 for a prompt, 1 for a decode step
    /// (whose rows are the group's heads).
    pub warps: u32,
    /// Whether the cubes split each row's keys and write partial results for the log-sum-exp
    /// merge (a decode step) rather than normalized outputs.
    pub split: bool,
}

impl FlashGeometry {
    /// Query rows of one cube.
    pub fn rows(&self) -> u32 {
        self.warps * WARP_ROWS
    }

    /// Units of one cube.
    pub fn units(&self) -> u32 {
        self.warps * WARP
    }

    /// 16-byte pieces of a head's row.
    pub fn pieces(&self) -> u32 {
        self.head_dim / PIECE
    }

    /// Pieces of the keys (and as many of the values) each unit stages per tile.
    pub fn staged_per_unit(&self) -> u32 {
        KEY_ROWS * self.pieces() / self.units()
    }

    /// Whether the units stage the queries and each tile in whole pieces, every unit as many
    /// (at least one): the staging loops' counts are these quotients.
    pub fn stages_evenly(&self) -> bool {
        let divides = |pieces: u32| pieces >= self.units() && pieces.is_multiple_of(self.units());
        divides(KEY_ROWS * self.pieces()) && divides(self.rows() * self.pieces())
    }

    /// Pieces of the keys (and of the values) a unit loads in one round of `stage_tiles`: all
    /// of its tile's up to 8, else 8 or 4, whichever divides them (the per-unit count is a
    /// multiple of 4 wherever it exceeds 8: heads of multiples of 16 channels, one warp).
    pub fn staged_loads(&self) -> u32 {
        let per_unit = self.staged_per_unit();
        match per_unit {
            _ if per_unit <= MAX_STAGED_LOADS => per_unit,
            _ if per_unit.is_multiple_of(MAX_STAGED_LOADS) => MAX_STAGED_LOADS,
            _ => 4,
        }
    }

    /// Pieces between two staged rows.
    pub fn stride(&self) -> u32 {
        self.pieces() + PAD_PIECES
    }

    /// Bytes of shared memory of one cube: the staged queries, keys and values (f16).
    pub fn shared_bytes(&self) -> u32 {
        (self.rows() + 2 * KEY_ROWS) * self.stride() * PIECE * 2
    }
}

/// The query rows of one KV head, `group · q_len` of them, head-major: row `ρ` is query `ρ mod
/// q_len` of the group's head `ρ / q_len` (the heads of a group are adjacent, so a KV head's rows
/// are contiguous in `[batch, heads, q_len, head_dim]`).
#[derive(CubeType, Clone, Copy)]
struct Rows {
    /// The KV head's first row among all (batch rows and heads flattened).
    first: u32,
    /// Rows of the KV head.
    count: u32,
    q_len: u32,
    total_len: u32,
}

#[cube]
impl Rows {
    /// The cache slot of row `row`'s query.
    fn slot(&self, row: u32) -> u32 {
        self.total_len - self.q_len + row % self.q_len
    }
}

/// Attention of the query rows `rows() · CUBE_POS_X ..` of one KV head (its group's query heads)
/// over one split of their visible keys; see the module documentation.
///
/// - `q`: `[batch, heads, q_len, head_dim]` f32, the last `q_len` of `total_len` slots;
/// - `keys`, `values`: `[batch, kv_heads, capacity ≥ total_len, head_dim]` f16, in pieces of
///   [`PIECE`] (slots from `total_len` on are not read);
/// - `key_start`: `[batch]`, each row's first real slot;
/// - `out`: normalized `[batch, heads, q_len, head_dim]` f32; split: `[rows, splits, head_dim]`
///   unnormalized, with `out_max`, `out_sum` `[rows, splits]` (rows = `batch · heads · q_len`);
/// - cube `(block of rows, KV head, batch row · splits + split)`.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn flash_attention_kernel<E: Float, N: Size>(
    q: &Array<f32>,
    keys: &Array<Vector<E, N>>,
    values: &Array<Vector<E, N>>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    q_len: u32,
    total_len: u32,
    capacity: u32,
    window: u32,
    scale: f32,
    splits: u32,
    #[comptime] geo: FlashGeometry,
) {
    let (block, kv_head) = (CUBE_POS_X, CUBE_POS_Y);
    let (batch_row, split) = (CUBE_POS_Z / splits, CUBE_POS_Z % splits);
    let kv_heads = CUBE_COUNT_Y;
    let rows = Rows {
        first: (batch_row * kv_heads + kv_head) * geo.group * q_len,
        count: geo.group * q_len,
        q_len,
        total_len,
    };
    let kv_at = (batch_row * kv_heads + kv_head) * capacity;
    let start = key_start[batch_row as usize];
    // The slots of the cube's queries span `first_query ..= last_query` (the whole prompt where
    // its rows run from one head into the next).
    let first_row = block * geo.rows();
    let last_row = u32::min(first_row + geo.rows(), rows.count) - 1;
    let mut first_query = rows.slot(first_row);
    let mut last_query = rows.slot(last_row);
    if first_row / q_len != last_row / q_len {
        first_query = total_len - q_len;
        last_query = total_len - 1;
    }

    let mut queries =
        SharedMemory::<Vector<E, N>>::new_aligned(comptime!((geo.rows() * geo.stride()) as usize), 16usize);
    let mut key_tile =
        SharedMemory::<Vector<E, N>>::new_aligned(comptime!((KEY_ROWS * geo.stride()) as usize), 16usize);
    let mut value_tile =
        SharedMemory::<Vector<E, N>>::new_aligned(comptime!((KEY_ROWS * geo.stride()) as usize), 16usize);
    stage_queries(q, &mut queries, &rows, first_row, scale, geo);
    sync_cube();
    let query_ops = query_operands(&queries, geo);

    let mut max = Array::<f32>::new(2usize);
    let mut mass = Array::<f32>::new(2usize);
    #[unroll]
    for r in 0..2u32 {
        max[r as usize] = masked_score();
        mass[r as usize] = 0.0;
    }
    let mut sums = Array::<Pair>::new(comptime!((2 * geo.head_dim / PIECE) as usize));
    #[unroll]
    for i in 0..comptime!(2 * geo.head_dim / PIECE) {
        sums[i as usize] = Pair::new(0.0);
    }

    // The tiles from the one holding the first slot any of the cube's queries sees to the one
    // holding its last query's slot (the causal mask skips those past it), dealt to the splits
    // in contiguous runs.
    let first_tile = first_visible_slot(first_query, start, window) / KEY_ROWS;
    let span = last_query / KEY_ROWS + 1 - first_tile;
    let per_split = span.div_ceil(splits);
    let mut tile = first_tile + split * per_split;
    let end = first_tile + u32::min(span, (split + 1) * per_split);
    let lane = UNIT_POS % WARP;
    let own_row = first_row + (UNIT_POS / WARP) * WARP_ROWS + lane / 4;
    while tile < end {
        let first_key = tile * KEY_ROWS;
        stage_tiles(keys, values, &mut key_tile, &mut value_tile, kv_at, first_key, total_len, geo);
        sync_cube();
        let mut scores = tile_scores(&key_tile, &query_ops, geo);
        // Every query of the cube sees every key of the tile: no mask to apply.
        let seen_whole = first_key + KEY_ROWS - 1 <= first_query
            && first_key >= start
            && (window == 0 || last_query - first_key < window);
        if !seen_whole {
            mask_scores(&mut scores, &rows, own_row, first_key, start, window);
        }
        weigh_scores(&mut scores, &mut max, &mut mass, &mut sums, geo);
        add_values(&value_tile, &scores, &mut sums, geo);
        sync_cube();
        tile += 1;
    }
    write_rows(&sums, &max, &mass, out, out_max, out_sum, &rows, own_row, split, splits, geo);
}

/// Stages the cube's query rows `first_row ..` times `scale`, rounded to f16; rows past the KV
/// head's as zeros.
#[cube]
fn stage_queries<E: Float, N: Size>(
    q: &Array<f32>,
    queries: &mut SharedMemory<Vector<E, N>>,
    rows: &Rows,
    first_row: u32,
    scale: f32,
    #[comptime] geo: FlashGeometry,
) {
    #[unroll]
    for i in 0..comptime!(geo.rows() * geo.pieces() / geo.units()) {
        let cell = i * geo.units() + UNIT_POS;
        let (row, piece) = (cell / geo.pieces(), cell % geo.pieces());
        let mut staged = Vector::<E, N>::new(E::cast_from(0.0f32));
        if first_row + row < rows.count {
            let at = (rows.first + first_row + row) * geo.head_dim + piece * PIECE;
            #[unroll]
            for e in 0..PIECE {
                staged[e as usize] = E::cast_from(q[(at + e) as usize] * scale);
            }
        }
        queries[(row * geo.stride() + piece) as usize] = staged;
    }
}

/// Stages the [`KEY_ROWS`] rows from slot `first_key` of one head's keys and values (rows from
/// `kv_at`) into `key_tile` and `value_tile`; rows past `total_len` as zeros.
///
/// A tile that `total_len` does not cut is loaded in rounds of `geo.staged_loads()` pieces of each,
/// all of a round's loads issued before its stores: a load guarded per row, as the cut tile's
/// are, waits for the one before it, and a tile's 64 such round trips cost more than its
/// products.
#[cube]
fn stage_tiles<E: Float, N: Size>(
    keys: &Array<Vector<E, N>>,
    values: &Array<Vector<E, N>>,
    key_tile: &mut SharedMemory<Vector<E, N>>,
    value_tile: &mut SharedMemory<Vector<E, N>>,
    kv_at: u32,
    first_key: u32,
    total_len: u32,
    #[comptime] geo: FlashGeometry,
) {
    if first_key + KEY_ROWS <= total_len {
        #[unroll]
        for round in 0..comptime!(geo.staged_per_unit() / geo.staged_loads()) {
            let mut staged_keys = Array::<Vector<E, N>>::new(comptime!(geo.staged_loads() as usize));
            let mut staged_values = Array::<Vector<E, N>>::new(comptime!(geo.staged_loads() as usize));
            #[unroll]
            for i in 0..comptime!(geo.staged_loads()) {
                let cell = (round * comptime!(geo.staged_loads()) + i) * geo.units() + UNIT_POS;
                let at = (kv_at + first_key + cell / geo.pieces()) * geo.pieces() + cell % geo.pieces();
                staged_keys[i as usize] = keys[at as usize];
                staged_values[i as usize] = values[at as usize];
            }
            #[unroll]
            for i in 0..comptime!(geo.staged_loads()) {
                let cell = (round * comptime!(geo.staged_loads()) + i) * geo.units() + UNIT_POS;
                let at = (cell / geo.pieces()) * geo.stride() + cell % geo.pieces();
                key_tile[at as usize] = staged_keys[i as usize];
                value_tile[at as usize] = staged_values[i as usize];
            }
        }
    } else {
        stage_cut_tile(keys, key_tile, kv_at, first_key, total_len, geo);
        stage_cut_tile(values, value_tile, kv_at, first_key, total_len, geo);
    }
}

/// Stages the rows from slot `first_key` of one head's keys or values (rows from `kv_at`) that
/// lie below `total_len`, and zeros for the rest of the tile.
#[cube]
fn stage_cut_tile<E: Float, N: Size>(
    source: &Array<Vector<E, N>>,
    tile: &mut SharedMemory<Vector<E, N>>,
    kv_at: u32,
    first_key: u32,
    total_len: u32,
    #[comptime] geo: FlashGeometry,
) {
    #[unroll]
    for i in 0..comptime!(geo.staged_per_unit()) {
        let cell = i * geo.units() + UNIT_POS;
        let (row, piece) = (cell / geo.pieces(), cell % geo.pieces());
        let mut staged = Vector::<E, N>::new(E::cast_from(0.0f32));
        if first_key + row < total_len {
            staged = source[((kv_at + first_key + row) * geo.pieces() + piece) as usize];
        }
        tile[(row * geo.stride() + piece) as usize] = staged;
    }
}

/// The calling warp's queries as the score products' `A` operands (`[16 rows × 16 channels]`,
/// four registers per lane), one per block of 16 channels: `ldmatrix` of four 8 × 8 matrices, lane
/// `l` giving row `l mod 8` of matrix `m = l / 8` (rows `8 (m mod 2) ..`, channels `8 (m / 2) ..`
/// of the block).
#[cube]
fn query_operands<E: Float, N: Size>(
    queries: &SharedMemory<Vector<E, N>>,
    #[comptime] geo: FlashGeometry,
) -> Array<Halves<E>> {
    let lane = UNIT_POS % WARP;
    let (matrix, piece_row) = (lane / 8, lane % 8);
    let row = (UNIT_POS / WARP) * WARP_ROWS + (matrix % 2) * 8 + piece_row;
    let mut operands = Array::<Halves<E>>::new(comptime!((4 * geo.head_dim / 16) as usize));
    #[unroll]
    for d in 0..comptime!(geo.head_dim / 16) {
        let at = row * geo.stride() + 2 * d + matrix / 2;
        let a = load_four(queries, at, MatrixIdent::A, false);
        #[unroll]
        for i in 0..4u32 {
            operands[(4 * d + i) as usize] = a[i as usize];
        }
    }
    operands
}

/// The scores `Q Kᵀ` of the calling warp's 16 queries against the tile's keys: per block of 8
/// keys `j`, `scores[2j]` holds lane `(g, t)`'s query `g` (`scores[2j + 1]`: `g + 8`), keys `8j +
/// 2t`, `8j + 2t + 1`. The key operands are loaded four 8 × 8 matrices at a time, lane `l` giving
/// row `l mod 8` of matrix `m = l / 8`: keys `8 (m / 2) ..` of a pair of key blocks, channels
/// `8 (m mod 2) ..` of a block of 16.
#[cube]
fn tile_scores<E: Float, N: Size>(
    key_tile: &SharedMemory<Vector<E, N>>,
    query_ops: &Array<Halves<E>>,
    #[comptime] geo: FlashGeometry,
) -> Array<Pair> {
    let lane = UNIT_POS % WARP;
    let (matrix, piece_row) = (lane / 8, lane % 8);
    let mut scores = Array::<Pair>::new(comptime!((2 * KEY_ROWS / 8) as usize));
    #[unroll]
    for i in 0..comptime!(2 * KEY_ROWS / 8) {
        scores[i as usize] = Pair::new(0.0);
    }
    #[unroll]
    for pair in 0..comptime!(KEY_ROWS / 16) {
        let key = pair * 16 + (matrix / 2) * 8 + piece_row;
        #[unroll]
        for d in 0..comptime!(geo.head_dim / 16) {
            let at = key * geo.stride() + 2 * d + matrix % 2;
            let b = load_four(key_tile, at, MatrixIdent::B, false);
            let mut a = Array::<Halves<E>>::new(4usize);
            #[unroll]
            for i in 0..4u32 {
                a[i as usize] = query_ops[(4 * d + i) as usize];
            }
            add_products(&a, &b, &mut scores, pair);
        }
    }
    scores
}

/// Sets the scores of the keys a query does not see ([`slot_visible`]) to [`masked_score`]: the
/// calling lane's rows `own_row`, `own_row + 8`, keys from slot `first_key`.
#[cube]
fn mask_scores(scores: &mut Array<Pair>, rows: &Rows, own_row: u32, first_key: u32, start: u32, window: u32) {
    let t = UNIT_POS % 4;
    #[unroll]
    for r in 0..2u32 {
        let query = rows.slot(own_row + 8 * r);
        #[unroll]
        for j in 0..comptime!(KEY_ROWS / 8) {
            let mut pair = scores[(2 * j + r) as usize];
            #[unroll]
            for c in 0..2u32 {
                let key = first_key + 8 * j + 2 * t + c;
                pair[c as usize] = select(slot_visible(key, query, start, window), pair[c as usize], masked_score());
            }
            scores[(2 * j + r) as usize] = pair;
        }
    }
}

/// The online softmax of one tile for the calling lane's two queries (`g`, `g + 8`): each query's
/// reference `max` moves to the tile's max (over the four lanes holding its keys), its `mass`
/// (the lane's share) and value `sums` are rescaled by `exp(old − new)`, and the scores become the
/// weights `exp(s − max)` (0 for a masked key), whose share the lane adds to the mass.
#[cube]
fn weigh_scores(
    scores: &mut Array<Pair>,
    max: &mut Array<f32>,
    mass: &mut Array<f32>,
    sums: &mut Array<Pair>,
    #[comptime] geo: FlashGeometry,
) {
    #[unroll]
    for r in 0..2u32 {
        let mut top = masked_score();
        #[unroll]
        for j in 0..comptime!(KEY_ROWS / 8) {
            let pair = scores[(2 * j + r) as usize];
            top = f32::max(top, f32::max(pair[0], pair[1]));
        }
        // The four lanes `(g, 0..4)` hold one query's keys.
        top = f32::max(top, plane_shuffle_xor(top, 1));
        top = f32::max(top, plane_shuffle_xor(top, 2));
        let reference = f32::max(max[r as usize], top);
        let factor = f32::exp(max[r as usize] - reference);
        max[r as usize] = reference;
        let mut share = mass[r as usize] * factor;
        #[unroll]
        for j in 0..comptime!(KEY_ROWS / 8) {
            let mut pair = scores[(2 * j + r) as usize];
            #[unroll]
            for c in 0..2u32 {
                let s = pair[c as usize];
                let w = select(s > masked_score(), f32::exp(s - reference), 0.0);
                share += w;
                pair[c as usize] = w;
            }
            scores[(2 * j + r) as usize] = pair;
        }
        mass[r as usize] = share;
        #[unroll]
        for i in 0..comptime!(geo.head_dim / PIECE) {
            sums[(2 * i + r) as usize] = sums[(2 * i + r) as usize] * Pair::new(factor);
        }
    }
}

/// `O += P V` for the calling warp's queries over the tile: the weights (rounded to f16) are the
/// `A` operands as they lie in the lane's registers (an accumulator's two key blocks are one
/// operand's two halves of depth), the values loaded transposed four 8 × 8 matrices at a time,
/// lane `l` giving row `l mod 8` of matrix `m = l / 8`: keys `8 (m mod 2) ..` of a block of 16,
/// channels `8 (m / 2) ..` of a pair of channel blocks. `sums[2i]` holds lane `(g, t)`'s query `g`
/// (`sums[2i + 1]`: `g + 8`), channels `8i + 2t`, `8i + 2t + 1`.
#[cube]
fn add_values<E: Float, N: Size>(
    value_tile: &SharedMemory<Vector<E, N>>,
    weights: &Array<Pair>,
    sums: &mut Array<Pair>,
    #[comptime] geo: FlashGeometry,
) {
    let lane = UNIT_POS % WARP;
    let (matrix, piece_row) = (lane / 8, lane % 8);
    #[unroll]
    for depth in 0..comptime!(KEY_ROWS / 16) {
        let mut a = Array::<Halves<E>>::new(4usize);
        #[unroll]
        for i in 0..4u32 {
            a[i as usize] = Halves::<E>::cast_from(weights[(4 * depth + i) as usize]);
        }
        let key = depth * 16 + (matrix % 2) * 8 + piece_row;
        #[unroll]
        for pair in 0..comptime!(geo.head_dim / 16) {
            let at = key * geo.stride() + 2 * pair + matrix / 2;
            let b = load_four(value_tile, at, MatrixIdent::B, true);
            add_products(&a, &b, sums, pair);
        }
    }
}

/// Four 8 × 8 f16 matrices of a product's `ident` operand by `ldmatrix` (transposed with
/// `transpose`), the calling lane giving the 16-byte row at piece `at` of `tile`.
#[cube]
fn load_four<E: Float, N: Size>(
    tile: &SharedMemory<Vector<E, N>>,
    at: u32,
    #[comptime] ident: MatrixIdent,
    #[comptime] transpose: bool,
) -> Array<Halves<E>> {
    let product = MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
    product.load_matrix::<Vector<E, N>, Const<2>>(&tile.slice(at as usize, (at + 1) as usize), ident, 4usize, transpose)
}

/// Adds the products of the `A` operand `a` with the two `B` operands of an `ldmatrix` of four
/// matrices (`b[0..2]`, `b[2..4]`: blocks of 8 columns `2 · pair` and `2 · pair + 1`) to those
/// blocks' accumulators in `accs` (two pairs of floats per block).
#[cube]
fn add_products<E: Float>(a: &Array<Halves<E>>, b: &Array<Halves<E>>, accs: &mut Array<Pair>, pair: u32) {
    let product = MmaDefinition::<E, E, f32>::new(16usize, 8usize, 16usize);
    #[unroll]
    for half in 0..2u32 {
        let block = 2 * pair + half;
        let mut operand = Array::<Halves<E>>::new(2usize);
        operand[0] = b[(2 * half) as usize];
        operand[1] = b[(2 * half + 1) as usize];
        let mut acc = Array::<Pair>::new(2usize);
        acc[0] = accs[(2 * block) as usize];
        acc[1] = accs[(2 * block + 1) as usize];
        product.execute_inplace(a, &operand, &mut acc);
        accs[(2 * block) as usize] = acc[0];
        accs[(2 * block + 1) as usize] = acc[1];
    }
}

/// Writes the calling lane's two rows (`own_row`, `own_row + 8`, those of the KV head): the value
/// sums over their masses (summed over the four lanes of a row), or with `geo.split` the
/// unnormalized sums, the reference max and the mass as split `split`'s partials.
#[allow(clippy::too_many_arguments)]
#[cube]
fn write_rows(
    sums: &Array<Pair>,
    max: &Array<f32>,
    mass: &Array<f32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    rows: &Rows,
    own_row: u32,
    split: u32,
    splits: u32,
    #[comptime] geo: FlashGeometry,
) {
    let t = UNIT_POS % 4;
    #[unroll]
    for r in 0..2u32 {
        let mut total = mass[r as usize];
        total += plane_shuffle_xor(total, 1);
        total += plane_shuffle_xor(total, 2);
        let row = own_row + 8 * r;
        if row < rows.count {
            let flat = rows.first + row;
            let mut at = flat * geo.head_dim + 2 * t;
            let mut divisor = total;
            if comptime!(geo.split) {
                at = (flat * splits + split) * geo.head_dim + 2 * t;
                divisor = 1.0;
                if t == 0 {
                    out_max[(flat * splits + split) as usize] = max[r as usize];
                    out_sum[(flat * splits + split) as usize] = total;
                }
            }
            #[unroll]
            for i in 0..comptime!(geo.head_dim / PIECE) {
                let pair = sums[(2 * i + r) as usize];
                out[(at + i * PIECE) as usize] = pair[0] / divisor;
                out[(at + i * PIECE + 1) as usize] = pair[1] / divisor;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FlashGeometry;

    #[test]
    fn the_launched_geometries_stage_evenly_in_rounds_that_divide_them() {
        for head_dim in (16..=128).step_by(16) {
            for (warps, split) in [(1, true), (4, false)] {
                let geo = FlashGeometry { head_dim, group: 4, warps, split };
                assert!(geo.stages_evenly(), "{geo:?}");
                assert!(geo.staged_per_unit().is_multiple_of(geo.staged_loads()), "{geo:?}");
            }
        }
        // Eight warps would leave units of a 16-channel tile without a piece.
        assert!(!FlashGeometry { head_dim: 16, group: 4, warps: 8, split: false }.stages_evenly());
    }
}
