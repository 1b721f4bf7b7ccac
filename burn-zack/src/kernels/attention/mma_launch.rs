//! The host side of the tensor-core decode kernel ([`mma_decode_kernel`]): whether it applies and
//! its compile-time shapes, where each head's rows go in a staging buffer, and how a step's
//! slots are split into cubes.

use burn::tensor::DType;
use burn_cubecl::cubecl::{
    features::MmaConfig,
    ir::{DeviceProperties, ElemType, FloatKind},
};
use burn_kvcompress::kernels::{
    warp_mma::{CHANNEL_BLOCK, MMA_DEPTH, MMA_HEADS, WARP},
    SM_UNITS,
};

use super::mma_kernel::{MmaGeometry, CELL_BUFFER_VECTORS, CELL_ROW_VECTORS, TILE_WORDS};
use crate::cache::HeadLayout;

/// The most KV heads (warps) one cube takes.
pub(super) const MAX_CUBE_HEADS: usize = 8;
/// The most channels of an output head (4 blocks of value sums per warp).
pub(super) const MAX_HEAD_DIM: usize = 128;
/// Warps an SM holds at once ([`SM_UNITS`] over the warp's lanes).
const SM_WARPS: usize = (SM_UNITS / WARP) as usize;

/// Elements between the staged rows of a head's keys of rank `rank`: the columns the score
/// products read (the rank rounded up to 16), plus 8 (16 bytes), so that the rows of a product's
/// load fall in distinct banks.
pub fn key_stride(rank: usize) -> usize {
    rank.next_multiple_of(MMA_DEPTH as usize) + 8
}

/// Elements between the staged rows of a head's values of rank `rank`: the channels the value
/// products read (the rank rounded up to 32), plus 8.
pub fn value_stride(rank: usize) -> usize {
    rank.next_multiple_of(CHANNEL_BLOCK as usize) + 8
}

/// Where the KV heads' rows go in a staging buffer when cubes take `heads` KV heads each: per KV
/// head `[key_tile, key_stride, value_tile, value_stride]` in elements, the key tiles of a
/// cube's heads one after the other from the buffer's start, then their value tiles from
/// `key_tiles` (the widest group's key tiles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedTiles {
    /// `TILE_WORDS` words per KV head.
    pub table: Vec<u32>,
    /// Elements of a buffer's key tiles.
    pub key_tiles: usize,
    /// Elements of a buffer's value tiles.
    pub value_tiles: usize,
    /// The most key or value columns of one cube's heads (the widest run of a row it stages).
    pub widest_row: usize,
}

impl StagedTiles {
    /// The tiles of `layout`'s heads, `heads` per cube (`heads` divides the KV heads).
    pub fn new(layout: &HeadLayout, heads: usize) -> Self {
        let groups: Vec<std::ops::Range<usize>> =
            (0..layout.kv_heads()).step_by(heads).map(|first| first..first + heads).collect();
        let span = |range: &std::ops::Range<usize>, stride: &dyn Fn(usize) -> usize| -> usize {
            range.clone().map(|h| WARP as usize * stride(h)).sum()
        };
        let key = |h: usize| key_stride(layout.qk_ranks[h]);
        let value = |h: usize| value_stride(layout.vo_ranks[h]);
        let key_tiles = groups.iter().map(|g| span(g, &key)).max().unwrap_or(0);
        let value_tiles = groups.iter().map(|g| span(g, &value)).max().unwrap_or(0);
        let widest_row = groups
            .iter()
            .flat_map(|g| [layout.qk_ranks[g.clone()].iter().sum(), layout.vo_ranks[g.clone()].iter().sum()])
            .max()
            .unwrap_or(0);
        let mut table = Vec::with_capacity(TILE_WORDS as usize * layout.kv_heads());
        for group in &groups {
            let (mut key_at, mut value_at) = (0, key_tiles);
            for h in group.clone() {
                table.extend([key_at, key(h), value_at, value(h)].map(|x| x as u32));
                key_at += WARP as usize * key(h);
                value_at += WARP as usize * value(h);
            }
        }
        Self { table, key_tiles, value_tiles, widest_row }
    }
}

/// The tensor-core kernel's compile-time shapes for `layout` with `group` query heads per KV head
/// of `head_dim` channels, cached elements of `dtype` copied `vector` at a time, on a device with
/// `properties`: the most KV heads per cube (a divisor of the KV heads, at most 8) whose shared
/// memory fits, with the heads' tiles. `None` where it does not apply: elements other than f16,
/// no f16 `32 × 8 × 16` warp products into f32 (`cmma`) or no asynchronous copies, more than 8
/// query heads per KV head, more than 128 channels, copies of one element (an asynchronous copy
/// moves at least 4 bytes), or not even one KV head per cube fits the shared memory.
pub fn mma_geometry(
    layout: &HeadLayout,
    (group, head_dim): (usize, usize),
    vector: u32,
    dtype: DType,
    properties: &DeviceProperties,
) -> Option<(MmaGeometry, StagedTiles)> {
    let f16 = ElemType::Float(FloatKind::F16).into();
    let product =
        MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32).into(), m: 32, n: 8, k: 16 };
    let features = &properties.features;
    let applies = dtype == DType::F16
        && features.matmul.cmma.contains(&product)
        && features.copy_async
        && group <= MMA_HEADS as usize
        && head_dim <= MAX_HEAD_DIM
        && vector >= 2;
    if !applies {
        return None;
    }
    let kv_heads = layout.kv_heads();
    let widest_key = layout.qk_ranks.iter().copied().max().unwrap_or(0);
    let limit = properties.hardware.max_shared_memory_size;
    (1..=kv_heads.min(MAX_CUBE_HEADS)).rev().filter(|heads| kv_heads.is_multiple_of(*heads)).find_map(|heads| {
        let tiles = StagedTiles::new(layout, heads);
        let per_row = tiles.widest_row / vector as usize;
        let geo = MmaGeometry {
            group: group as u32,
            head_dim: head_dim as u32,
            heads: heads as u32,
            vector,
            key_tiles: tiles.key_tiles as u32,
            value_tiles: tiles.value_tiles as u32,
            query_stride: key_stride(widest_key) as u32,
            key_depth: widest_key.div_ceil(MMA_DEPTH as usize) as u32,
            cells: (WARP as usize * per_row).div_ceil(WARP as usize * heads) as u32,
        };
        let addressable = (geo.buffer_elements() / vector) < CELL_BUFFER_VECTORS && per_row < CELL_ROW_VECTORS as usize;
        (addressable && geo.shared_bytes() as usize <= limit).then_some((geo, tiles))
    })
}

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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(qk: &[usize], vo: &[usize]) -> HeadLayout {
        HeadLayout { head_dim: 128, qk_ranks: qk.to_vec(), vo_ranks: vo.to_vec() }
    }

    #[test]
    fn tiles_follow_each_other_within_a_cube_and_restart_per_cube() {
        let tiles = StagedTiles::new(&layout(&[32, 40, 96, 16], &[40, 64, 8, 128]), 2);
        // Key strides 40, 56 | 104, 24; value strides 72, 72 | 40, 136.
        assert_eq!((tiles.key_tiles, tiles.value_tiles), (32 * 128, 32 * 176));
        // Columns of a row per cube: keys 72 | 112, values 104 | 136.
        assert_eq!(tiles.widest_row, 136);
        let key_end = 32 * 128;
        assert_eq!(
            tiles.table,
            vec![
                0,
                40,
                key_end,
                72,
                32 * 40,
                56,
                key_end + 32 * 72,
                72,
                0,
                104,
                key_end,
                40,
                32 * 104,
                24,
                key_end + 32 * 40,
                136,
            ]
        );
        // Every tile start is 512-byte aligned (a product's operand needs 32 bytes).
        assert!(tiles.table.chunks(2).all(|w| w[0] % 256 == 0 && w[1] % 8 == 0));
    }

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
