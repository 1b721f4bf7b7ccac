//! `x R` for rows of a KV head's queries or keys: a cube takes [`TILE_ROWS`] rows of one (batch
//! row, KV head) into shared memory; unit `(part, j)` sums `x_c R[c, j]` for its part of the
//! channels `c` (consecutive units read consecutive columns of `R`: coalesced), with
//! [`LOADS`] loads of `R` in flight before the first product; the parts' sums meet in shared
//! memory. Splitting the channels over parts keeps a decode step's rotation (a few rows per KV
//! head) from a chain of `head_dim` dependent loads.

use cubecl::prelude::*;

/// Rows of one KV head a cube rotates.
pub const TILE_ROWS: u32 = 8;
/// Loads of `R` a unit issues before it uses them.
pub const LOADS: u32 = 16;

/// The kernel's compile-time shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RotateGeometry {
    /// Channels per head.
    pub head_dim: u32,
    /// Parts the channels of a sum are split into (a cube has `parts · head_dim` units); each part
    /// a multiple of [`LOADS`] channels.
    pub parts: u32,
}

impl RotateGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        self.parts * self.head_dim
    }
}

/// Cube `(tile, stream)` rotates rows `tile · TILE_ROWS ..` (below `rows`) of stream `stream =
/// batch row · kv_heads + kv head`.
///
/// - `x`: `[streams · rows, head_dim]` (any float type `F`); `r`: `[kv_heads, head_dim,
///   head_dim]`, f32;
/// - `out`: `[streams · rows, head_dim]` in `O`, the f32 sums rounded once.
#[cube(launch_unchecked)]
pub fn rotate_kernel<F: Float, O: Float>(
    x: &Array<F>,
    r: &Array<f32>,
    out: &mut Array<O>,
    rows: u32,
    kv_heads: u32,
    #[comptime] geo: RotateGeometry,
    #[define(F, O)] _dtypes: [StorageType; 2],
) {
    let d = comptime!(geo.head_dim);
    let span = comptime!(geo.head_dim / geo.parts);
    let stream = CUBE_POS_Y;
    let first_row = CUBE_POS_X * TILE_ROWS;
    let tile_rows = u32::min(TILE_ROWS, rows - first_row);
    let j = UNIT_POS % d;
    let part = UNIT_POS / d;
    let mut tile = SharedMemory::<f32>::new(comptime!((TILE_ROWS * geo.head_dim) as usize));
    let mut sums = SharedMemory::<f32>::new(comptime!((TILE_ROWS * geo.head_dim * geo.parts) as usize));
    let base = (stream * rows + first_row) * d;
    let mut i = UNIT_POS;
    while i < tile_rows * d {
        tile[i as usize] = f32::cast_from(x[(base + i) as usize]);
        i += CUBE_DIM;
    }
    sync_cube();
    let matrix = (stream % kv_heads) * d * d;
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
        out[(base + i) as usize] = O::cast_from(total);
        i += CUBE_DIM;
    }
}
