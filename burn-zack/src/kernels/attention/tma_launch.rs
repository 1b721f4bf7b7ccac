//! The host side of the TMA decode kernel ([`tma_decode_kernel`]): whether it applies, its
//! compile-time shapes, the caches as TMA maps, and its launch.

use burn::tensor::{f16, DType, Tensor};
use burn_cubecl::{
    cubecl::{
        features::{MmaConfig, Tma},
        ir::{DeviceProperties, ElemType, FloatKind},
        prelude::*,
    },
    tensor::CubeTensor,
    BoolElement, CubeRuntime,
};
use burn_kvcompress::kernels::{
    float_arg, merge_decode_output,
    warp_mma::{MMA_HEADS, WARP},
    CubeF32,
};

use super::{
    decode_step::{step_metadata, DecodeInputs, DecodeStep},
    mma_launch::{MAX_CUBE_HEADS, MAX_HEAD_DIM},
    row_splits::RowSplits,
    tma_kernel::{tma_decode_kernel, TmaGeometry, BLOCK_COLUMNS},
};
use crate::layout::HeadLayout;

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

/// ZACK decode attention of the dense queries `q: [batch, heads, 1, head_dim]` over `inputs`
/// (f16 caches) by the TMA kernel with compile-time shapes `geo` (from [`tma_geometry`]) in the
/// step's splits `rows`, whose rounds it interleaves; returns `[batch, heads, 1, head_dim]`, zero
/// past each head's value rank.
#[allow(unsafe_code)] // An unchecked kernel launch; it states why it is in bounds.
pub fn tma_launch<R: CubeRuntime, BT: BoolElement>(
    q: CubeTensor<R>,
    inputs: &DecodeInputs<'_, R, BT>,
    geo: TmaGeometry,
    rows: RowSplits,
) -> Tensor<CubeF32<R, BT>, 4> {
    let ([batch, _, _], layout, len) = (inputs.dims, inputs.layout, inputs.slots());
    // The metadata upload: the head layout and each row's first real slot (no table: the kernel
    // takes its split's rounds from its cube's position).
    let meta = step_metadata(layout, inputs.options);
    let cubes = rows.cubes(layout.kv_heads(), geo.heads, batch);
    let step = DecodeStep::begin(q, inputs, meta, rows.splits);
    let (key_width, value_width) = (layout.key_width(), layout.value_width());
    let landed = |cache: &Tensor<CubeF32<R, BT>, 3>, width: usize| {
        landed_rows(float_arg(&cache.clone().reshape([batch * len, width])))
    };
    // SAFETY: every split has a round (`RowSplits`: at most `⌈len / 32⌉` splits), whose slots past
    // `len` are masked; the TMA lands whole boxes (rows past the caches and columns past their
    // widths as zeros) into the two stages, and the products read within the stages and the
    // guard block after them (`TmaGeometry`); the partials hold `heads · splits` entries. Bounds
    // validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        tma_decode_kernel::launch_unchecked::<f16, R>(
            &step.reduced_q.client.clone(),
            cubes,
            CubeDim::new_1d(geo.units()),
            step.reduced_q.into_array_arg(),
            landed(&inputs.keys, key_width),
            landed(&inputs.values, value_width),
            step.meta.into_array_arg(),
            step.partials.output.clone().into_array_arg(),
            step.partials.max.clone().into_array_arg(),
            step.partials.sum.clone().into_array_arg(),
            layout.kv_heads() as u32,
            len as u32,
            inputs.options.window.unwrap_or(0) as u32,
            key_width as u32,
            geo,
        )
    };
    merge_decode_output(step.partials, inputs.dims[0])
}
