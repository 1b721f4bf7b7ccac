//! The kernel: rows of one (batch row, KV head) stream (its query heads' rows, then its key
//! head's) rotated by their positions in the "rotate half" layout as they are read into shared
//! memory, then, where the cache asks for one, multiplied by the KV head's orthogonal matrix `R`
//! (unit `(part, j)` sums `x_c R[c, j]` over its part of the channels, [`LOADS`] loads of `R` in
//! flight; the parts meet in shared memory), and written as `[batch, heads, seq, head_dim]`.

use cubecl::prelude::*;

/// Rows of one stream a cube takes.
pub const TILE_ROWS: u32 = 8;
/// Loads of `R` a unit issues before it uses them.
pub const LOADS: u32 = 16;

/// The kernel's compile-time shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RotaryGeometry {
    /// Channels per head (even; a power of two from 16 to 256 with `rotate`).
    pub head_dim: u32,
    /// Parts the channels of a product are split into (a cube has `parts · head_dim` units); each
    /// part a multiple of [`LOADS`] channels where `rotate`.
    pub parts: u32,
    /// Whether the rows are rotated by their positions (RoPE) on the way in.
    pub rope: bool,
    /// Whether they are multiplied by the stream's matrix.
    pub rotate: bool,
}

impl RotaryGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.parts * self.head_dim
    }
}

/// How a stream's rows lie in the inputs and outputs (runtime values).
#[derive(CubeType, CubeLaunch, Clone, Copy)]
pub struct RowLayout {
    /// Rows of each query head per batch row.
    pub seq: u32,
    /// Rows of the key head per batch row (`seq`, or 0 where the launch takes queries only).
    pub k_seq: u32,
    /// Query heads per KV head.
    pub group: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Element strides of the queries' batch row, head and position.
    pub q_batch: u32,
    /// See `q_batch`.
    pub q_head: u32,
    /// See `q_batch`.
    pub q_position: u32,
    /// Element strides of the keys' batch row, head and position.
    pub k_batch: u32,
    /// See `k_batch`.
    pub k_head: u32,
    /// See `k_batch`.
    pub k_position: u32,
}

/// Where one row of a stream lies.
#[derive(CubeType)]
struct RowPlace {
    /// Its first element in `q` or `k`.
    read: u32,
    /// Its first element in `q_out` or `k_out`.
    write: u32,
    /// Whether it is a query row.
    is_query: bool,
    /// Its entry in `positions` (`batch · seq + s`).
    position_at: u32,
}

/// Where row `row` of stream (`batch`, `kv_head`) lies.
#[cube]
fn row_place(layout: &RowLayout, batch: u32, kv_head: u32, row: u32, #[comptime] head_dim: u32) -> RowPlace {
    let query_rows = layout.group * layout.seq;
    let is_query = row < query_rows;
    // Both places are computed (no loads) and one is selected.
    let head = kv_head * layout.group + row / layout.seq;
    let s = select(is_query, row % layout.seq, row - u32::min(row, query_rows));
    let q_read = batch * layout.q_batch + head * layout.q_head + s * layout.q_position;
    let k_read = batch * layout.k_batch + kv_head * layout.k_head + s * layout.k_position;
    let q_write = ((batch * layout.kv_heads * layout.group + head) * layout.seq + s) * head_dim;
    let k_write = ((batch * layout.kv_heads + kv_head) * layout.k_seq + s) * head_dim;
    RowPlace {
        read: select(is_query, q_read, k_read),
        write: select(is_query, q_write, k_write),
        is_query,
        position_at: batch * layout.seq + s,
    }
}

/// Channel `c` of the row at `read` (`x`), rotated by `position`'s angles where `rope`:
/// `x_c · cos − x_{c+half} · sin` below the half, `x_c · cos + x_{c−half} · sin` above.
#[cube]
fn rotated_channel<F: Float>(
    x: &Array<F>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    read: u32,
    c: u32,
    position: u32,
    #[comptime] head_dim: u32,
    #[comptime] rope: bool,
) -> f32 {
    let value = f32::cast_from(x[(read + c) as usize]);
    let mut out = value;
    if comptime!(rope) {
        let half = comptime!(head_dim / 2);
        let angle = (position * half + c % half) as usize;
        let (cos, sin) = (cos[angle], sin[angle]);
        if c < half {
            out = value * cos - f32::cast_from(x[(read + c + half) as usize]) * sin;
        } else {
            out = value * cos + f32::cast_from(x[(read + c - half) as usize]) * sin;
        }
    }
    out
}

/// Cube `(tile, stream)` takes rows `tile · TILE_ROWS ..` (below `group · seq + k_seq`) of stream
/// `stream = batch row · kv_heads + KV head`: its query heads' rows (head-major), then its key
/// head's.
///
/// - `q`, `k`: the queries and keys (`F`) at `layout`'s strides; `positions`: `[batch · seq]`
///   (with `rope`; entries past the tables take the last angle: wrong but in bounds); `cos`,
///   `sin`: `[max_position, head_dim / 2]`; `r`: `[kv_heads, head_dim, head_dim]` (with
///   `rotate`), all f32 but the inputs;
/// - `q_out`: `[batch, kv_heads · group, seq, head_dim]` in `OQ`, `k_out`: `[batch, kv_heads,
///   k_seq, head_dim]` in `OK`: the f32 results rounded once.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn rotary_kernel<F: Float, OQ: Float, OK: Float>(
    q: &Array<F>,
    k: &Array<F>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    positions: &Array<i32>,
    r: &Array<f32>,
    q_out: &mut Array<OQ>,
    k_out: &mut Array<OK>,
    layout: RowLayout,
    max_position: u32,
    #[comptime] geo: RotaryGeometry,
    #[define(F, OQ, OK)] _dtypes: [StorageType; 3],
) {
    let d = comptime!(geo.head_dim);
    let batch = CUBE_POS_Y / layout.kv_heads;
    let kv_head = CUBE_POS_Y % layout.kv_heads;
    let first_row = CUBE_POS_X * TILE_ROWS;
    let tile_rows = u32::min(TILE_ROWS, layout.group * layout.seq + layout.k_seq - first_row);
    if comptime!(geo.rotate) {
        let mut tile = SharedMemory::<f32>::new(comptime!((TILE_ROWS * geo.head_dim) as usize));
        let mut i = UNIT_POS;
        while i < tile_rows * d {
            let place = row_place(&layout, batch, kv_head, first_row + i / d, d);
            tile[i as usize] = read_channel(q, k, cos, sin, positions, &place, i % d, max_position, geo);
            i += CUBE_DIM;
        }
        sync_cube();
        times_rotation(&tile, r, q_out, k_out, &layout, batch, kv_head, first_row, tile_rows, geo);
    } else {
        let mut i = UNIT_POS;
        while i < tile_rows * d {
            let place = row_place(&layout, batch, kv_head, first_row + i / d, d);
            let value = read_channel(q, k, cos, sin, positions, &place, i % d, max_position, geo);
            write_channel(q_out, k_out, &place, i % d, value);
            i += CUBE_DIM;
        }
    }
}

/// Channel `c` of the row at `place` (in `q` or `k`), rotated by its position where `rope`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn read_channel<F: Float>(
    q: &Array<F>,
    k: &Array<F>,
    cos: &Array<f32>,
    sin: &Array<f32>,
    positions: &Array<i32>,
    place: &RowPlace,
    c: u32,
    max_position: u32,
    #[comptime] geo: RotaryGeometry,
) -> f32 {
    let position = position_of(positions, place.position_at, max_position, geo.rope);
    if place.is_query {
        rotated_channel::<F>(q, cos, sin, place.read, c, position, geo.head_dim, geo.rope)
    } else {
        rotated_channel::<F>(k, cos, sin, place.read, c, position, geo.head_dim, geo.rope)
    }
}

/// `value` rounded to channel `c` of the row at `place` (in `q_out` or `k_out`).
#[cube]
fn write_channel<OQ: Float, OK: Float>(
    q_out: &mut Array<OQ>,
    k_out: &mut Array<OK>,
    place: &RowPlace,
    c: u32,
    value: f32,
) {
    if place.is_query {
        q_out[(place.write + c) as usize] = OQ::cast_from(value);
    } else {
        k_out[(place.write + c) as usize] = OK::cast_from(value);
    }
}

/// The position of entry `at` of `positions`, clamped below `max_position` (0 without `rope`,
/// where `positions` is a placeholder).
#[cube]
fn position_of(positions: &Array<i32>, at: u32, max_position: u32, #[comptime] rope: bool) -> u32 {
    let mut position = 0u32;
    if comptime!(rope) {
        position = u32::min(positions[at as usize] as u32, max_position - 1);
    }
    position
}

/// The tile's rows (`[TILE_ROWS, head_dim]`, f32) times the stream's matrix, written to their
/// rows of `q_out` or `k_out`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn times_rotation<OQ: Float, OK: Float>(
    tile: &SharedMemory<f32>,
    r: &Array<f32>,
    q_out: &mut Array<OQ>,
    k_out: &mut Array<OK>,
    layout: &RowLayout,
    batch: u32,
    kv_head: u32,
    first_row: u32,
    tile_rows: u32,
    #[comptime] geo: RotaryGeometry,
) {
    let d = comptime!(geo.head_dim);
    let span = comptime!(geo.head_dim / geo.parts);
    let j = UNIT_POS % d;
    let part = UNIT_POS / d;
    let mut sums = SharedMemory::<f32>::new(comptime!((TILE_ROWS * geo.head_dim * geo.parts) as usize));
    let matrix = kv_head * d * d;
    let mut acc = Array::<f32>::new(TILE_ROWS as usize);
    #[unroll]
    for t in 0..TILE_ROWS {
        acc[t as usize] = 0.0;
    }
    let mut held = Array::<f32>::new(LOADS as usize);
    #[unroll]
    for block in 0..comptime!(span / LOADS) {
        #[unroll]
        for l in 0..LOADS {
            let c = comptime!(block * LOADS + l);
            held[l as usize] = r[(matrix + (part * span + c) * d + j) as usize];
        }
        #[unroll]
        for l in 0..LOADS {
            let c = comptime!(block * LOADS + l);
            #[unroll]
            for t in 0..TILE_ROWS {
                acc[t as usize] += tile[(t * d + part * span + c) as usize] * held[l as usize];
            }
        }
    }
    #[unroll]
    for t in 0..TILE_ROWS {
        sums[((part * TILE_ROWS + t) * d + j) as usize] = acc[t as usize];
    }
    sync_cube();
    let mut i = UNIT_POS;
    while i < tile_rows * d {
        let mut total = 0.0f32;
        #[unroll]
        for p in 0..comptime!(geo.parts) {
            total += sums[(p * TILE_ROWS * d + i) as usize];
        }
        let place = row_place(layout, batch, kv_head, first_row + i / d, d);
        write_channel(q_out, k_out, &place, i % d, total);
        i += CUBE_DIM;
    }
}
