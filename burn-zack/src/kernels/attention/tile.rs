//! Staging a tile of cached rows in shared memory, with all of a unit's loads in flight at once.

use cubecl::prelude::*;

use super::kernel::DecodeGeometry;

/// Copies rows `0..rows` (`rows ≤ geo.tile`) of `width ≤ geo.head_dim` floats, row `r` starting
/// at `src[start + r * row_stride]`, into `tile[r * tile_stride + c]`.
///
/// The units form teams of `min(32, head_dim)` lanes; a team reads consecutive floats of one row
/// (coalesced), and each unit issues all its loads before its first store, so staging a tile
/// costs about one memory latency rather than one per row. Every unit of the cube must call it;
/// the caller synchronizes the cube before reading the tile.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn stage_rows(
    src: &Array<f32>,
    start: u32,
    row_stride: u32,
    rows: u32,
    width: u32,
    tile: &mut SharedMemory<f32>,
    tile_stride: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let lanes = comptime!(geo.head_dim.min(32));
    let teams = comptime!(geo.units / lanes);
    let cols = comptime!(geo.head_dim.div_ceil(lanes));
    let rows_per_team = comptime!(geo.tile.div_ceil(teams));
    let lane = UNIT_POS % lanes;
    let team = UNIT_POS / lanes;
    let active = team < teams;
    let mut held = Array::<f32>::new(comptime!((rows_per_team * cols) as usize));
    #[unroll]
    for i in 0..rows_per_team {
        let r = team + i * teams;
        #[unroll]
        for k in 0..cols {
            let c = lane + k * lanes;
            let mut x = 0.0f32;
            if active && r < rows && c < width {
                x = src[(start + r * row_stride + c) as usize];
            }
            held[(i * cols + k) as usize] = x;
        }
    }
    #[unroll]
    for i in 0..rows_per_team {
        let r = team + i * teams;
        #[unroll]
        for k in 0..cols {
            let c = lane + k * lanes;
            if active && r < rows && c < width {
                tile[(r * tile_stride + c) as usize] = held[(i * cols + k) as usize];
            }
        }
    }
}
