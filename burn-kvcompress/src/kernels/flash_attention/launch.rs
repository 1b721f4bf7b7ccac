//! The host side of the flash-attention kernel: whether it applies, its shape, and its launch.

use burn::tensor::{f16, DType, Tensor, TensorPrimitive};
use burn_cubecl::{
    cubecl::{
        features::MmaConfig,
        ir::{DeviceProperties, ElemType, FloatKind, StorageType},
        prelude::*,
    },
    BoolElement, CubeRuntime,
};

use super::kernel::{flash_attention_kernel, FlashGeometry, KEY_ROWS, PIECE};
use crate::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, key_start_arg, merge_partials, CubeF32, SplitPartials},
};

/// Widest head the kernel takes: a warp keeps a query row's value sums, `head_dim / 2` floats per
/// lane, in registers.
pub const MAX_HEAD_DIM: usize = 128;

/// The kernel's compile-time shapes for `q_len` queries (4 warps of 16 rows for a prompt; for a
/// decode step one warp, whose rows are the group's heads, and splits of the keys) of heads of
/// `head_dim` channels, `group` query heads per KV head, queries and keys/values of `dtypes` on
/// a device with `properties`; `None` where it does not apply: keys or values other than f16,
/// queries other than f32, a head dimension not a multiple of 16 or past [`MAX_HEAD_DIM`], a
/// device without f16 `16 × 8 × 16` warp products into f32 (`mma`) and `ldmatrix`, or too little
/// shared memory.
pub fn flash_geometry(
    q_len: usize,
    head_dim: usize,
    group: usize,
    (q_dtype, kv_dtype): (DType, DType),
    properties: &DeviceProperties,
) -> Option<FlashGeometry> {
    let f16: StorageType = ElemType::Float(FloatKind::F16).into();
    let product =
        MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32).into(), m: 16, n: 8, k: 16 };
    let features = &properties.features.matmul;
    let decode = q_len == 1;
    let geo = FlashGeometry {
        head_dim: head_dim as u32,
        group: group as u32,
        warps: if decode { 1 } else { 4 },
        split: decode,
    };
    let applies = q_dtype == DType::F32
        && kv_dtype == DType::F16
        && head_dim.is_multiple_of(16)
        && (16..=MAX_HEAD_DIM).contains(&head_dim)
        && group > 0
        && geo.stages_evenly()
        && features.mma.contains(&product)
        && features.ldmatrix.contains(&f16)
        && geo.shared_bytes() as usize <= properties.hardware.max_shared_memory_size;
    applies.then_some(geo)
}

/// Cubes per multiprocessor a decode step's splits aim for.
const DECODE_CUBES_PER_SM: usize = 2;

/// Splits of each row's keys for a decode step: enough cubes for [`DECODE_CUBES_PER_SM`] per
/// multiprocessor, at most one per tile of keys.
fn decode_splits(cubes: usize, total_len: usize, properties: &DeviceProperties) -> usize {
    let sms = properties.hardware.num_streaming_multiprocessors.unwrap_or(1).max(1) as usize;
    let target = DECODE_CUBES_PER_SM * sms;
    target.div_ceil(cubes.max(1)).clamp(1, total_len.div_ceil(KEY_ROWS as usize))
}

/// Attention of the queries `q` `[batch, heads, q_len, head_dim]` (f32, the last `q_len` of
/// `total_len` slots) over the first `total_len` slots of the f16 key and value buffers `k`, `v`
/// `[batch, kv_heads, capacity ≥ total_len, head_dim]` (read in place: a cache's buffers with room
/// for later slots) with `options` (causal, left padding, sliding window), to `[batch, heads,
/// q_len, head_dim]` f32, by the tensor-core kernel (a decode step: split over the keys, then
/// merged); `None` (nothing launched) where it does not apply ([`flash_geometry`]). The shapes
/// must be those `cache::check_attend_shapes` accepts for `total_len` slots.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn flash_attention<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    k: Tensor<CubeF32<R, BT>, 4>,
    v: Tensor<CubeF32<R, BT>, 4>,
    total_len: usize,
    options: &AttendOptions,
) -> Option<Tensor<CubeF32<R, BT>, 4>> {
    let [batch, heads, q_len, head_dim] = q.dims();
    let [_, kv_heads, capacity, _] = k.dims();
    let q = float_arg(&q);
    let properties = q.client.properties();
    let geo = flash_geometry(q_len, head_dim, heads / kv_heads, (q.dtype, k.dtype()), properties)?;
    assert!(total_len <= capacity, "flash_attention: {total_len} slots of buffers of {capacity}");
    let blocks = (geo.group as usize * q_len).div_ceil(geo.rows() as usize);
    let splits = if geo.split { decode_splits(blocks * kv_heads * batch, total_len, properties) } else { 1 };
    let (keys, values) = (float_arg(&k), float_arg(&v));
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    let rows = batch * heads * q_len;
    let partials = geo.split.then(|| SplitPartials::allocate(&q, rows, splits, head_dim));
    let (out, out_max, out_sum) = match &partials {
        Some(partials) => (partials.output.clone(), partials.max.clone(), partials.sum.clone()),
        // Normalized outputs need no statistics: one-element stand-ins.
        None => {
            (dense_output::<R, f32>(&q, rows * head_dim), dense_output::<R, f32>(&q, 1), dense_output::<R, f32>(&q, 1))
        }
    };
    // SAFETY: cube `(x, h, b · splits + s)` reads query rows `rows() · x ..` below `group · q_len`
    // of KV head `h`'s rows (`q`: `batch · heads · q_len` rows of `head_dim`, the KV head's rows
    // contiguous from `(b · kv_heads + h) · group · q_len`; `heads = kv_heads · group` as the
    // callers check), key and value rows below `total_len ≤ capacity` of KV head `h` of row `b`
    // (`keys`, `values`: `batch · kv_heads · capacity` rows of `head_dim / 8` pieces, contiguous
    // as `float_arg` makes them) and entry `b <
    // batch` of `key_start`. It writes the same rows of `out` (`rows · head_dim`, or with splits
    // `rows · splits · head_dim`, split `s < splits`) and, with splits, entries `row · splits + s`
    // of `out_max`, `out_sum` (`rows · splits`). Its shared arrays hold `rows()` or 64 rows of
    // `stride ≥ head_dim / 8` pieces, indexed by rows and pieces below those (staging: cells below
    // rows · pieces, the unrolled count times the units); an `ldmatrix` row starts at a piece
    // below `head_dim / 8` of a row below them.
    unsafe {
        flash_attention_kernel::launch_unchecked::<f16, R>(
            &q.client.clone(),
            CubeCount::Static(blocks as u32, kv_heads as u32, (batch * splits) as u32),
            CubeDim::new_1d(geo.units()),
            PIECE as usize,
            q.into_array_arg(),
            keys.into_array_arg(),
            values.into_array_arg(),
            key_start.into_array_arg(),
            out.clone().into_array_arg(),
            out_max.into_array_arg(),
            out_sum.into_array_arg(),
            q_len as u32,
            total_len as u32,
            capacity as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            splits as u32,
            geo,
        )
    };
    let out = match partials {
        Some(partials) => merge_partials(partials),
        None => out,
    };
    let out = Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out));
    Some(out.reshape([batch, heads, q_len, head_dim]))
}
