//! Staging a tile of cached rows in shared memory, with all of a unit's loads in flight at once.

use cubecl::prelude::*;

use super::kernel::DecodeGeometry;

/// Copies rows `0..rows` of `width` elements, row `r` starting at `src[start + r * row_stride]`,
/// into `tile[r * tile_stride + c]` as f32; `rows * tile_stride` must fit `geo.tile_floats`.
///
/// The tile's elements are dealt to the units in row-major order (consecutive units read
/// consecutive floats of a row: coalesced, whatever the width), `tile_floats / units` each, and
/// each unit issues all its loads before its first store, so staging a tile costs about one
/// memory latency. Every unit of the cube must call it; the caller synchronizes the cube before
/// reading the tile.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn stage_rows<E: Float>(
    src: &Array<E>,
    start: u32,
    row_stride: u32,
    rows: u32,
    width: u32,
    tile: &mut SharedMemory<f32>,
    tile_stride: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let per_unit = comptime!(geo.tile_floats / geo.units);
    // Element `unit + i · units` is at (row, column) = (r₀ + i · step_rows, c₀ + i · step_cols),
    // carried over the row end as it goes.
    let step_rows = geo.units / width;
    let step_cols = geo.units % width;
    let mut held = Array::<E>::new(comptime!(per_unit as usize));
    let mut r = UNIT_POS / width;
    let mut c = UNIT_POS % width;
    #[unroll]
    for i in 0..per_unit {
        let mut x = E::from_int(0);
        if r < rows {
            x = src[(start + r * row_stride + c) as usize];
        }
        held[i as usize] = x;
        r += step_rows;
        c += step_cols;
        if c >= width {
            c -= width;
            r += 1;
        }
    }
    let mut r = UNIT_POS / width;
    let mut c = UNIT_POS % width;
    #[unroll]
    for i in 0..per_unit {
        if r < rows {
            tile[(r * tile_stride + c) as usize] = f32::cast_from(held[i as usize]);
        }
        r += step_rows;
        c += step_cols;
        if c >= width {
            c -= width;
            r += 1;
        }
    }
}
