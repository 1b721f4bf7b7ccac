//! How the tensor-core decode kernels (`wmma` and TMA) split a step's slots into cubes: equal
//! splits of whole 32-slot rounds, one wave of the GPU.

use burn_cubecl::cubecl::{ir::DeviceProperties, prelude::CubeCount};
use burn_kvcompress::kernels::{warp_mma::WARP, SM_UNITS};

use crate::layout::HeadLayout;

/// Warps an SM holds at once ([`SM_UNITS`] over the warp's lanes).
const SM_WARPS: usize = (SM_UNITS / WARP) as usize;

/// How a decode step's slots are split: cubes of `chunk` slots (a multiple of the 32-slot
/// rounds), `splits` per sequence and group of KV heads. The `wmma` kernel gives each split a
/// contiguous chunk; the TMA kernel deals the rounds out to the splits in turn
/// (`task::InterleavedRounds`), `chunk / 32` rounds or fewer each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowSplits {
    /// Slots per cube (the last split of a sequence may be shorter).
    pub chunk: usize,
    /// Splits per sequence.
    pub splits: usize,
}

impl RowSplits {
    /// The splits of `len` slots for `rows` (sequences × groups of KV heads) such that the step's
    /// cubes fill a GPU of `sms` multiprocessors once, `per_sm` cubes on each: as many splits as
    /// one wave holds (at least one), of equal length rounded up to a round, so that no cube of a
    /// second wave waits for the first.
    pub fn plan(len: usize, rows: usize, sms: usize, per_sm: usize) -> Self {
        let splits = (sms * per_sm / rows.max(1)).max(1);
        let chunk = len.div_ceil(splits).next_multiple_of(WARP as usize);
        Self { chunk, splits: len.div_ceil(chunk) }
    }

    /// The splits of a step of `batch` sequences of `len` slots for a kernel whose cubes take
    /// `heads` KV heads (a warp each) and `shared_bytes` of shared memory, on a device with
    /// `properties`: the cubes an SM holds are limited by its shared memory and its warps.
    pub fn for_device(
        (heads, shared_bytes): (u32, u32),
        layout: &HeadLayout,
        batch: usize,
        len: usize,
        properties: &DeviceProperties,
    ) -> Self {
        let hardware = &properties.hardware;
        let per_sm = (hardware.max_shared_memory_size / shared_bytes as usize).clamp(1, SM_WARPS / heads as usize);
        let sms = hardware.num_streaming_multiprocessors.unwrap_or(1) as usize;
        Self::plan(len, batch * layout.kv_heads() / heads as usize, sms, per_sm)
    }

    /// The grid of a step of `batch` sequences over `kv_heads` KV heads, `heads` per cube:
    /// `(split, group of KV heads, sequence)`.
    pub fn cubes(&self, kv_heads: usize, heads: u32, batch: usize) -> CubeCount {
        CubeCount::Static(self.splits as u32, kv_heads as u32 / heads, batch as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_wave_of_equal_splits_rounded_to_rounds() {
        // 132 SMs, one cube each: 8 sequences take 16 splits (128 cubes), 1 sequence 132.
        assert_eq!(RowSplits::plan(32768, 8, 132, 1), RowSplits { chunk: 2048, splits: 16 });
        assert_eq!(RowSplits::plan(32768, 1, 132, 1), RowSplits { chunk: 256, splits: 128 });
        // Short sequences: one round per split, never an empty split.
        assert_eq!(RowSplits::plan(5, 1, 132, 1), RowSplits { chunk: 32, splits: 1 });
        assert_eq!(RowSplits::plan(100, 3, 4, 2), RowSplits { chunk: 64, splits: 2 });
        // More rows than cubes in a wave: one split each.
        assert_eq!(RowSplits::plan(1000, 500, 132, 2), RowSplits { chunk: 1024, splits: 1 });
        for (len, rows) in [(1, 1), (31, 2), (33, 7), (4097, 3), (65536, 8)] {
            let plan = RowSplits::plan(len, rows, 132, 2);
            assert!(
                plan.chunk.is_multiple_of(32)
                    && plan.splits * plan.chunk >= len
                    && (plan.splits - 1) * plan.chunk < len
            );
            assert!(plan.splits * rows <= (132 * 2).max(rows), "one wave");
        }
    }
}
