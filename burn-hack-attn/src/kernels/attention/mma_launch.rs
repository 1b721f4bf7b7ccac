//! The host side of the tensor-core decode kernel ([`mma_decode_kernel`]): whether it applies, its
//! compile-time shapes and its launch (the query quantization, the kernel, the merge).

use burn::tensor::Tensor;
use burn_cubecl::{
    cubecl::{
        features::{MmaConfig, Plane},
        ir::{DeviceProperties, ElemType, IntKind, UIntKind},
        prelude::*,
    },
    BoolElement, CubeRuntime,
};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{
        float_arg as float, key_start_arg, merge_decode_output, warp_mma::WARP, CubeF32 as Backend, SplitPartials,
        WarpSplits, SM_REGISTERS,
    },
};

use super::{
    mma_geometry::{MmaGeometry, PRODUCT_COLUMNS, PRODUCT_DEPTH, PRODUCT_ROWS},
    mma_kernel::mma_decode_kernel,
    portable_kernel::DecodeGeometry,
};
use crate::kernels::{cache_args::CacheArgs, CacheView};

/// The most warps per cube (fewer where their stages do not fit in shared memory). CUDA's launch
/// bound (the cube's 512 units) caps a lane at 128 registers; the kernel would take about 145
/// uncapped (4 to 12 warps per cube), which leaves fewer warps per SM, and spills under a lower
/// cap (24 warps: 80 registers). 16 measured fastest on an H100
/// (`results/decode-hack-register-products-h100.md`); with two stage regions a warp, 18 (96
/// registers, 6 % more instructions) measured 5 to 9 % slower (`results/decode-hack-halves-h100.md`).
const WARPS: u32 = 16;
/// Registers a lane of the kernel takes without a launch bound (about 145 at 4 to 12 warps).
const UNBOUNDED_LANE_REGISTERS: u32 = 145;
/// The most channels of a head (the lanes' running outputs: `head_dim / 8 · lane_heads`
/// registers).
const MAX_HEAD_DIM: u32 = 128;
/// The most query heads per KV head (a lane's scores: `Π / 4 · lane_heads` registers).
const MAX_GROUP: u32 = 16;

/// The tensor-core kernel's compile-time shapes for the scalar kernel's `decode` shapes on a
/// device with `properties`. `None` where it does not apply: no `u8 × u8 → i32` `16 × 8 × 32`
/// warp products with registers managed by the kernel, no asynchronous copies, or planes of
/// other than 32 lanes; more than `MAX_GROUP` query heads per KV head; a head dimension above
/// `MAX_HEAD_DIM` or not a multiple of 64 (whole 16-byte key copies); Π not a multiple of 32;
/// codes of other than 2 bits; or no room in shared memory for one warp's stage beside the cube's
/// barriers and queries. The cube takes as many warps as their stages fit, up to `WARPS`; the
/// launch sets the key metadata's copy width (`meta_vector`) from the cache's metadata pitch.
pub fn mma_geometry(decode: &DecodeGeometry, properties: &DeviceProperties) -> Option<MmaGeometry> {
    let u8_codes = ElemType::UInt(UIntKind::U8).into();
    let product = MmaConfig {
        a_type: u8_codes,
        b_type: u8_codes,
        cd_type: ElemType::Int(IntKind::I32).into(),
        m: PRODUCT_ROWS,
        n: PRODUCT_COLUMNS,
        k: PRODUCT_DEPTH,
    };
    let features = &properties.features;
    let applies = features.matmul.mma.contains(&product)
        && features.copy_async
        && features.plane.contains(Plane::Ops)
        && properties.hardware.plane_size_min == WARP
        && properties.hardware.plane_size_max == WARP
        && decode.group <= MAX_GROUP
        && decode.head_dim.is_multiple_of(2 * PRODUCT_DEPTH)
        && decode.head_dim <= MAX_HEAD_DIM
        && decode.partition.is_multiple_of(PRODUCT_DEPTH)
        && decode.key_group.is_multiple_of(PRODUCT_DEPTH / 2)
        && decode.bits == 2;
    let geo = MmaGeometry {
        group: decode.group,
        head_dim: decode.head_dim,
        key_group: decode.key_group,
        partition: decode.partition,
        warps: WARPS,
        meta_vector: 1,
    };
    let stages = (properties.hardware.max_shared_memory_size as u32).saturating_sub(geo.cube_shared_bytes());
    let fitting = stages / geo.warp_shared_bytes();
    (applies && fitting > 0).then_some(MmaGeometry { warps: fitting.min(WARPS), ..geo })
}

/// Registers a lane of a cube of `units` takes: as many as it needs
/// ([`UNBOUNDED_LANE_REGISTERS`]), or what CUDA's launch bound leaves it (`SM_REGISTERS / units`,
/// 128 at 16 warps), so that the launch plans only the cubes an SM's registers hold (one, from 8
/// to 16 warps).
fn lane_registers(units: u32) -> u32 {
    UNBOUNDED_LANE_REGISTERS.min(SM_REGISTERS / units)
}

/// `geo` with its key metadata copied in the widest vectors (up to 4 values) that divide both
/// the key groups per head and the metadata rows' `pitch`.
fn with_key_meta_pitch(geo: MmaGeometry, pitch: usize) -> MmaGeometry {
    let meta_vector =
        [4, 2, 1].into_iter().find(|&v| geo.parts().is_multiple_of(v) && pitch.is_multiple_of(v as usize)).unwrap_or(1);
    MmaGeometry { meta_vector, ..geo }
}

/// HACK decode attention on tensor cores of `q: [batch, heads, 1, head_dim]` (the last slot) over
/// `cache`, shapes already checked, with `geo` from [`mma_geometry`]; returns `[batch, heads, 1,
/// head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn mma_decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    cache: &CacheView<'_, Backend<R, BT>>,
    geo: MmaGeometry,
    options: &AttendOptions,
) -> Tensor<Backend<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let [_, kv_heads, len, _] = cache.keys.params.dims();
    let q = float(&q);
    let client = q.client.clone();
    let parts = geo.parts() as usize;
    let args = CacheArgs::new(cache, &q, parts);
    let geo = with_key_meta_pitch(geo, args.key_meta_pitch);
    let [k_params, k_sums] = args.k_meta;
    let [v_params, v_sums] = args.v_meta;
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    let streams = batch * kv_heads;
    let splits = WarpSplits::for_device(
        geo.warps,
        geo.shared_bytes(),
        Some(lane_registers(geo.units())),
        geo.partition as usize,
        (streams, len),
        client.properties(),
    );
    let warp_splits = splits.cubes * geo.warps as usize;
    let partials = SplitPartials::allocate(&q, batch * heads, warp_splits, d);
    // SAFETY: each warp's slots `split · warp_chunk ..` are clamped to `len` (the caches' own
    // length); key words (16-byte vectors of a slot's row of `head_dim / 16` words) and metadata
    // are copied for slots clamped to `end − 1 < len` of the stream (metadata at `part < parts ≤
    // key_meta_pitch` of its row); value words (16-byte copies of the block's `head_dim · Π / 16`
    // contiguous words) and metadata (`head_dim` values) for closed blocks only (`block_first <
    // blocks · Π`, so `block < blocks`); every copy starts at a multiple of its width, in global
    // memory (`meta_vector` divides the pitch; a block's words and metadata start at multiples of
    // 16 bytes) and in the stages (`mma_stage`), which hold `warps` warps' blocks and are read at
    // the calling warp's own offsets; tail rows for slots in `blocks · Π .. end` (the tail holds
    // `len − blocks · Π` rows per stream); the queries of stream `CUBE_POS_Y` (`group · head_dim`
    // values of `q`, which has `streams ·` that many), their codes and metadata in the cube's
    // shared memory at heads `< group` and runs `< group · parts`; `key_start` has `batch`
    // entries and the grid `batch · kv_heads` rows; outputs are written for heads `< group`, and
    // the partials hold `heads · cubes · warps` entries. Bounds validated on CUDA:
    // `burn_kvcompress::kernels`.
    unsafe {
        mma_decode_kernel::launch_unchecked::<R>(
            &client,
            CubeCount::Static(splits.cubes as u32, streams as u32, 1),
            CubeDim::new_1d(geo.units()),
            q.clone().into_array_arg(),
            args.k_words.into_array_arg(),
            k_params.into_array_arg(),
            k_sums.into_array_arg(),
            args.v_words.into_array_arg(),
            v_params.into_array_arg(),
            v_sums.into_array_arg(),
            args.tail.into_array_arg(),
            key_start.into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            args.key_meta_pitch as u32,
            len as u32,
            args.blocks as u32,
            splits.warp_chunk as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
        )
    };
    merge_decode_output(partials, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_metadata_copies_divide_the_groups_and_the_pitch() {
        let geo =
            |key_group| MmaGeometry { group: 4, head_dim: 128, key_group, partition: 64, warps: 16, meta_vector: 1 };
        let vector = |key_group, pitch| with_key_meta_pitch(geo(key_group), pitch).meta_vector;
        // 2 groups: rows of 2 values, padded to 4 or not; an odd pitch leaves single values.
        assert_eq!([vector(64, 2), vector(64, 4), vector(64, 3)], [2, 2, 1]);
        // 4 groups of 32: whole rows in one copy where the pitch allows; one group: one value.
        assert_eq!([vector(32, 4), vector(32, 6), vector(128, 4)], [4, 2, 1]);
    }
}
