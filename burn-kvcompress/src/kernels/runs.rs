//! Tree reductions over runs of shared memory: `runs` runs of `len` values each, run `r` at
//! `r · len`, every run reduced at once by all units of the cube, `⌈log2 len⌉` levels with a
//! cube barrier after each.

use cubecl::prelude::*;

/// Levels of a tree over `len` values, and the first level's width: the largest power of two
/// below `len`.
fn tree_shape(len: u32) -> (u32, u32) {
    if len > 1 {
        let top = len.next_power_of_two() / 2;
        (top.trailing_zeros() + 1, top)
    } else {
        (0, 0)
    }
}

/// Reduces each run of `lo` to its min and each run of `hi` to its max, in place: afterwards
/// `lo[r · len]` and `hi[r · len]` hold run `r`'s min and max (the other entries are scratch).
/// Every unit of the cube must call it, after a barrier that follows the writes of the runs; it
/// ends with a barrier.
#[cube]
pub fn min_max_runs(lo: &mut SharedMemory<f32>, hi: &mut SharedMemory<f32>, runs: u32, #[comptime] len: u32) {
    reduce_runs(lo, hi, runs, len, true);
}

/// Reduces each run of `a` and of `b` to its sum, in place: afterwards `a[r · len]` and
/// `b[r · len]` hold run `r`'s sums. Same calling rules as [`min_max_runs()`].
#[cube]
pub fn sum_runs(a: &mut SharedMemory<f32>, b: &mut SharedMemory<f32>, runs: u32, #[comptime] len: u32) {
    reduce_runs(a, b, runs, len, false);
}

/// The trees of [`min_max_runs`] (`min_max`) or [`sum_runs`]: level by level, entry `i` of a
/// run takes in entry `i + width`.
#[cube]
fn reduce_runs(
    a: &mut SharedMemory<f32>,
    b: &mut SharedMemory<f32>,
    runs: u32,
    #[comptime] len: u32,
    #[comptime] min_max: bool,
) {
    let (levels, top) = comptime!(tree_shape(len));
    #[unroll]
    for level in 0..levels {
        let width = top >> level;
        let mut item = UNIT_POS;
        while item < runs * width {
            let i = item % width;
            if i + width < len {
                let x = ((item / width) * len + i) as usize;
                let y = x + width as usize;
                if comptime!(min_max) {
                    a[x] = f32::min(a[x], a[y]);
                    b[x] = f32::max(b[x], b[y]);
                } else {
                    a[x] += a[y];
                    b[x] += b[y];
                }
            }
            item += CUBE_DIM;
        }
        sync_cube();
    }
}

#[cfg(test)]
mod tests {
    use super::tree_shape;

    #[test]
    fn a_tree_covers_every_value_of_a_run() {
        for len in 1..300u32 {
            let (levels, top) = tree_shape(len);
            // Level k adds index i + (top >> k) into i; the widths sum to 2·top − 1 ≥ len − 1,
            // and the first width is the largest power of two below len.
            let reach: u32 = (0..levels).map(|k| top >> k).sum();
            assert!(reach + 1 >= len, "len {len}: reach {reach}");
            if len > 1 {
                assert!(top < len && 2 * top >= len, "len {len}: top {top}");
            } else {
                assert_eq!(levels, 0);
            }
        }
    }
}
