//! The host side of the channel layout's tensor-core decode kernel ([`channel_mma_decode_kernel`]):
//! whether it applies, its shapes, and its launch (closed blocks and float slots in one kernel,
//! then the split merge).

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
        float_arg as float, int_arg as int, key_start_arg, merge_decode_output, warp_mma::WARP, CubeF32 as Backend,
        SplitPartials, WarpSplits, SM_REGISTERS,
    },
};

use super::{
    float_slots::FloatSlotArgs,
    mma_kernel::{channel_mma_decode_kernel, ChannelMmaGeometry, StagePlan},
    mma_operands::{PRODUCT_COLUMNS, PRODUCT_DEPTH, PRODUCT_ROWS},
    portable_kernel::ChannelDecodeGeometry,
    ChannelView,
};

/// Warps per cube where a stage fits ([`StagePlan`]). Each warp runs on its own blocks with no
/// cube-wide synchronization; the count sets CUDA's launch bound, which caps a lane's registers
/// at `SM_REGISTERS / units`. At 32K batch 8 on an H200 (`results/hack-decode-channel-h200.md`):
/// 4 warps, kernel 191 µs and merge 13 µs (5 times the splits); 8 warps, 213 and 5; 16 warps
/// (bound 128 registers, spills), 214 and 7: steps within the spread between calls. With two
/// blocks a product step (`ChannelMmaGeometry::paired`), a build that read the queries from
/// shared memory: pipelined steps of 180, 196 and 187 µs at 8, 12 and 16 warps; with the float
/// slots in every warp, 110 µs at 8 warps and 121 at 10. Staged `hack2` (session 61): 73–75 µs
/// at 8 warps, 88–90 at 10 and 85–89 at 12; at 64K about the same at 8 and 12 (fewer steps a
/// warp, each slower: the SM's issue, not the warps' latency, bounds a staged step).
const STAGED_WARPS: u32 = 8;
/// The fewest warps per cube that stage in key and value halves where 8 warps' stages do not
/// fit. `hack4` on Llama's heads (34 KiB a warp's step) stages at 6 warps: on an H200 at 32K batch
/// 8, 91–103 µs against 105–107 loading from the caches at 12 warps in the same calls, 160–175
/// against 181–184 at 64K; one later call of the committed build took 110–111 with no unstaged
/// run beside it, so the gain wants a rerun (`results/hack-decode-channel-h200.md`, session 63).
const MIN_STAGED_WARPS: u32 = 6;

/// The most warps per cube that load their blocks from the caches (where no stage fits
/// `MIN_STAGED_WARPS`): more warps keep more loads in flight. 12 is the most whose launch bound
/// (170 registers) holds the kernel without spills; `hack4`, which loaded so before session 63:
/// 102 µs at 32K batch 8 against 111 at 8 warps (session 61).
const DIRECT_WARPS: u32 = 12;
/// Registers a lane of the kernel takes without a launch bound (246 at Llama's heads and 64-slot
/// 2-bit blocks on CUDA).
const UNBOUNDED_LANE_REGISTERS: u32 = 246;
/// The most channels of a head: a lane's running outputs and query take `head_dim / 4`
/// registers each.
const MAX_HEAD_DIM: u32 = 128;
/// The most slots of a block: a lane's scores and weights take `Π / 4` registers each.
const MAX_PARTITION: u32 = 128;

/// The tensor-core kernel's shapes for the portable kernel's `portable` shapes on a device with
/// `properties`; `None` where it does not apply: no `u8 × i8` and `u8 × u8 → i32` `16 × 8 × 32`
/// warp products with registers managed by the kernel, or planes of other than 32 lanes; more than
/// 8 query heads per KV head; a head dimension or Π not a multiple of 32 or above 128; value
/// groups not a multiple of 16 channels; key or value rows not a multiple of 4 words (16-byte
/// copies, a word per lane of a quad), or, with more than 4 query heads per KV head (one block a
/// product), of fewer than 8 words (a product's depth halves are two words of a lane's row,
/// [`PackedDepth`](super::mma_operands::PackedDepth)).
/// (`portable` is the portable kernel's geometry, from which the tensor-core kernel takes its
/// shapes; the dispatch tries this kernel first.)
pub fn channel_mma_geometry(
    portable: &ChannelDecodeGeometry,
    properties: &DeviceProperties,
) -> Option<ChannelMmaGeometry> {
    let product = |b_type: ElemType| MmaConfig {
        a_type: ElemType::UInt(UIntKind::U8).into(),
        b_type: b_type.into(),
        cd_type: ElemType::Int(IntKind::I32).into(),
        m: PRODUCT_ROWS,
        n: PRODUCT_COLUMNS,
        k: PRODUCT_DEPTH,
    };
    let mma = &properties.features.matmul.mma;
    let geo = ChannelMmaGeometry {
        group: portable.group,
        head_dim: portable.head_dim,
        partition: portable.partition,
        key_bits: portable.key_bits,
        value_bits: portable.value_bits,
        value_group: portable.value_group,
        warps: STAGED_WARPS,
        stage: StagePlan::Steps,
    };
    // The largest stage that `STAGED_WARPS` warps fit (each warp's tile in its key rows); else
    // key and value halves at as many warps as fit, if at least `MIN_STAGED_WARPS`; otherwise up
    // to `DIRECT_WARPS` warps, as many as their tiles allow, each loading from the caches.
    let device_bytes = properties.hardware.max_shared_memory_size as u32;
    let staged = [StagePlan::Steps, StagePlan::Halves]
        .map(|stage| ChannelMmaGeometry { stage, ..geo })
        .into_iter()
        .find(|staged| staged.tile_fits_keys() && staged.shared_bytes() <= device_bytes)
        .or_else(|| {
            let halves = most_warps(ChannelMmaGeometry { stage: StagePlan::Halves, ..geo }, STAGED_WARPS, device_bytes);
            (halves.warps >= MIN_STAGED_WARPS && halves.tile_fits_keys()).then_some(halves)
        });
    let geo = staged.unwrap_or_else(|| {
        most_warps(ChannelMmaGeometry { stage: StagePlan::Direct, ..geo }, DIRECT_WARPS, device_bytes)
    });
    let warps = geo.warps;
    let applies = mma.contains(&product(ElemType::Int(IntKind::I8)))
        && mma.contains(&product(ElemType::UInt(UIntKind::U8)))
        && properties.features.plane.contains(Plane::Ops)
        && properties.hardware.plane_size_min == WARP
        && properties.hardware.plane_size_max == WARP
        && geo.group <= PRODUCT_COLUMNS
        && geo.head_dim.is_multiple_of(PRODUCT_DEPTH)
        && geo.head_dim <= MAX_HEAD_DIM
        && geo.partition.is_multiple_of(PRODUCT_DEPTH)
        && geo.partition <= MAX_PARTITION
        && geo.value_group.is_multiple_of(PRODUCT_ROWS)
        && [geo.key_bits, geo.value_bits].iter().all(|b| [2, 4].contains(b))
        && (geo.head_dim * geo.key_bits).is_multiple_of(128)
        && (geo.partition * geo.value_bits).is_multiple_of(128)
        && (geo.paired() || geo.key_row_words().min(geo.value_row_words()) >= 8)
        && warps > 0;
    applies.then_some(geo)
}

/// `geo` with as many warps a cube as `device_bytes` of shared memory hold, at most `most` (a
/// cube's shared memory grows by one warp's share a warp).
fn most_warps(geo: ChannelMmaGeometry, most: u32, device_bytes: u32) -> ChannelMmaGeometry {
    let one = ChannelMmaGeometry { warps: 1, ..geo };
    ChannelMmaGeometry { warps: (device_bytes / one.shared_bytes()).min(most), ..one }
}

/// Decode attention of `q: [batch, heads, 1, head_dim]` (rotated; the last slot) over `view`
/// (with closed blocks), shapes already checked, with `geo` from [`channel_mma_geometry`]; returns
/// `[batch, heads, 1, head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn channel_mma_decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    view: &ChannelView<'_, Backend<R, BT>>,
    geo: ChannelMmaGeometry,
    options: &AttendOptions,
) -> Tensor<Backend<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let streams = batch * view.kv_heads;
    let q = float(&q);
    let client = q.client.clone();
    let blocks = view.blocks();
    let registers = UNBOUNDED_LANE_REGISTERS.min(SM_REGISTERS / geo.units());
    let splits = WarpSplits::for_device(
        geo.warps,
        geo.shared_bytes(),
        Some(registers),
        // Paired, a warp's run is whole pairs (but for a stream's last).
        geo.blocks_per_step() as usize,
        (streams, blocks),
        client.properties(),
    );
    let cubes = splits.cubes;
    let partials = SplitPartials::allocate(&q, batch * heads, cubes * geo.warps as usize, d);
    let (keys, values) = (view.keys.expect("closed blocks"), view.values.expect("closed blocks"));
    let floats = FloatSlotArgs::new(view, &q);
    let [sinks_k, sinks_v, tail_k, tail_v] = floats.arrays;
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    // SAFETY: warp `w` of cube `(x, stream)` reads blocks `b < blocks` of its stream only (its
    // range is clamped to `blocks`): key rows `(stream · blocks + b) · Π + slot` (`slot < Π`) of
    // `key_row_words` words, `[streams · blocks · Π, head_dim · key_bits / 32]` words; key
    // metadata `(stream · blocks + b) · d + j`; value rows `(stream · blocks + b) · d + j` of
    // `value_row_words` words; value metadata `((stream · blocks + b) · Π + slot) · groups + vg`
    // (the tensors' own shapes, contiguous); queries of its stream's heads `< group`; its own
    // tile (`tile_floats` words, at least `group · d` and 8 columns of `Π + TILE_PAD`: unstaged
    // its part of the key rows buffer, staged the key rows of the region it reads, which
    // `tile_fits_keys` holds). Staged, it copies those blocks' key rows, value rows and metadata
    // whole (16-byte copies inside each block's contiguous parts, which are multiples of 16
    // bytes) into its own stage regions, each sized for one step's blocks, and reads them there
    // at the same offsets within a block. Its float slots are `i < sinks + tail` of its stream
    // (the share is clamped to that count), a sink's row only for `i < sinks` and a tail row's
    // otherwise (branches; row `stream · rows + i` of a buffer of `streams · rows` rows, `i`
    // below its filled ones). Partial outputs go to heads `< group` of the stream and splits
    // `< cubes · warps`, which `partials` holds. Bounds validated on CUDA:
    // `burn_kvcompress::kernels`.
    unsafe {
        channel_mma_decode_kernel::launch_unchecked::<R>(
            &client,
            CubeCount::Static(cubes as u32, streams as u32, 1),
            CubeDim::new_1d(geo.units()),
            q.clone().into_array_arg(),
            int(&keys.words).into_array_arg(),
            int(&keys.params).into_array_arg(),
            int(&values.words).into_array_arg(),
            int(&values.params).into_array_arg(),
            sinks_k.into_array_arg(),
            sinks_v.into_array_arg(),
            tail_k.into_array_arg(),
            tail_v.into_array_arg(),
            key_start.into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            view.len as u32,
            view.sinks_len() as u32,
            blocks as u32,
            view.tail_len() as u32,
            floats.rows[0],
            floats.rows[1],
            view.kv_heads as u32,
            splits.warp_chunk as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
            floats.dtype.into(),
        )
    };
    merge_decode_output(partials, batch)
}
