//! The host side of the TMA decode kernel ([`tma_decode_kernel`](super::tma_kernel)): whether it
//! applies, its compile-time shapes, and the caches as TMA maps.

use burn::tensor::{f16, DType};
use burn_cubecl::{
    cubecl::{
        features::{MmaConfig, Tma},
        ir::{DeviceProperties, ElemType, FloatKind},
        prelude::*,
    },
    tensor::CubeTensor,
    CubeRuntime,
};
use burn_kvcompress::kernels::warp_mma::{MMA_HEADS, WARP};

use super::{
    mma_launch::{MAX_CUBE_HEADS, MAX_HEAD_DIM},
    tma_kernel::{TmaGeometry, BLOCK_COLUMNS},
};
use crate::cache::HeadLayout;

/// Elements of a 16-byte piece: every head's columns and the rows' widths are multiples of it.
const PIECE: usize = 8;

/// The TMA kernel's compile-time shapes for `layout` with `group` query heads per KV head of
/// `head_dim` channels, cached elements of `dtype`, on a device with `properties`: the most KV
/// heads per cube (a divisor of the KV heads, at most 8) whose shared memory fits. `None` where
/// it does not apply: elements other than f16, no TMA or no f16 `16 × 8 × 16` warp products into
/// f32 (`mma`), more than 8 query heads per KV head, a head dimension past 128 or not a multiple
/// of 16, a head's columns or a row's width not in 16-byte pieces, or not even one KV head per
/// cube fits the shared memory.
pub fn tma_geometry(
    layout: &HeadLayout,
    (group, head_dim): (usize, usize),
    dtype: DType,
    properties: &DeviceProperties,
) -> Option<TmaGeometry> {
    let f16 = ElemType::Float(FloatKind::F16).into();
    let product =
        MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32).into(), m: 16, n: 8, k: 16 };
    let features = &properties.features;
    let kv_heads = layout.kv_heads();
    let applies = dtype == DType::F16
        && features.tma.contains(Tma::Base)
        && features.matmul.mma.contains(&product)
        && group <= MMA_HEADS as usize
        && head_dim <= MAX_HEAD_DIM
        && head_dim.is_multiple_of(16)
        && layout.ranks_multiple_of(PIECE);
    if !applies {
        return None;
    }
    let widest_key = layout.qk_ranks.iter().copied().max().unwrap_or(0);
    let key_depth = widest_key.div_ceil(16) as u32;
    let limit = properties.hardware.max_shared_memory_size;
    (1..=kv_heads.min(MAX_CUBE_HEADS)).rev().filter(|heads| kv_heads.is_multiple_of(*heads)).find_map(|heads| {
        // The widest group's runs of key and value columns, in landed blocks.
        let blocks = |ranks: &[usize]| {
            ranks.chunks(heads).map(|g| g.iter().sum::<usize>().div_ceil(BLOCK_COLUMNS as usize)).max().unwrap_or(0)
        };
        let geo = TmaGeometry {
            group: group as u32,
            head_dim: head_dim as u32,
            heads: heads as u32,
            key_blocks: blocks(&layout.qk_ranks) as u32,
            value_blocks: blocks(&layout.vo_ranks) as u32,
            key_depth,
            query_stride: 16 * key_depth + 8,
        };
        (geo.shared_bytes() as usize <= limit).then_some(geo)
    })
}

/// `cache` (`[rows, width]` f16, contiguous) as a TMA map of boxes of a round's 32 rows by
/// [`BLOCK_COLUMNS`] columns, landed with the 128-byte swizzle (rows past `rows` and columns
/// past `width` land as zeros).
pub fn landed_rows<R: CubeRuntime>(cache: CubeTensor<R>) -> TensorMapArg<R, Tiled> {
    let tile = TiledArgs { tile_size: [WARP as usize, BLOCK_COLUMNS as usize].into() };
    TensorMapArg::new(tile, cache.into_tensor_arg(), f16::as_type_native_unchecked())
        .with_swizzle(TensorMapSwizzle::B128)
}
