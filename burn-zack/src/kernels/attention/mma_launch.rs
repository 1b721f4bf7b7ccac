//! The host side of the tensor-core decode kernel ([`mma_decode_kernel`]): whether it applies and
//! its compile-time shapes, where each head's rows go in a staging buffer, and its launch.

use burn::tensor::{f16, DType, Tensor};
use burn_cubecl::{
    cubecl::{
        features::MmaConfig,
        ir::{DeviceProperties, ElemType, FloatKind},
        prelude::*,
    },
    tensor::CubeTensor,
    BoolElement, CubeRuntime,
};
use burn_kvcompress::kernels::{
    float_arg, merge_decode_output,
    warp_mma::{CHANNEL_BLOCK, MMA_DEPTH, MMA_HEADS, WARP},
    CubeF32,
};

use super::{
    decode_step::{launch_split_kernel, step_metadata, DecodeInputs, DecodeStep},
    mma_kernel::{mma_decode_kernel, MmaGeometry, CELL_BUFFER_VECTORS, CELL_ROW_VECTORS, TILE_WORDS},
    row_splits::RowSplits,
};
use crate::layout::HeadLayout;

/// The most KV heads (warps) one cube takes.
pub(super) const MAX_CUBE_HEADS: usize = 8;
/// The most channels of an output head (4 blocks of value sums per warp).
pub(super) const MAX_HEAD_DIM: usize = 128;

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

/// ZACK decode attention of the dense queries `q: [batch, heads, 1, head_dim]` over `inputs`
/// (f16 caches) by the `wmma` kernel with compile-time shapes `geo` and staged `tiles` (from
/// [`mma_geometry`]) in the step's splits `rows`; returns `[batch, heads, 1, head_dim]`, zero past
/// each head's value rank.
#[allow(unsafe_code)] // An unchecked kernel launch; it states why it is in bounds.
pub fn mma_launch<R: CubeRuntime, BT: BoolElement>(
    q: CubeTensor<R>,
    inputs: &DecodeInputs<'_, R, BT>,
    (geo, tiles): (MmaGeometry, &StagedTiles),
    rows: RowSplits,
) -> Tensor<CubeF32<R, BT>, 4> {
    let [batch, _, _] = inputs.dims;
    // The metadata upload: the head layout, each row's first real slot, then the heads' tiles.
    let mut meta = step_metadata(inputs.layout, inputs.options);
    meta.extend(tiles.table.iter().map(|&w| w as i32));
    let cubes = rows.cubes(inputs.layout.kv_heads(), geo.heads, batch);
    let step = DecodeStep::begin(q, inputs, meta, rows.splits);
    let shape = (cubes, geo.units(), geo.vector, rows.chunk);
    // SAFETY: every split's slots `split · chunk ..` (at most `chunk`) lie within `len`
    // (`RowSplits`: no split is empty), copies are whole vectors of a group's columns (within the
    // row widths) clamped to the split's last slot, into its head's tile of `32 × stride`
    // elements, `stride` past the columns the products read (`key_stride`, `value_stride`), the
    // tiles of a cube within a buffer (`StagedTiles`); the partials hold `heads · splits`
    // entries. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe { launch_split_kernel!(mma_decode_kernel::launch_unchecked::<f16, R>, inputs, step, shape, geo) };
    merge_decode_output(step.partials, inputs.dims[0])
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
}
