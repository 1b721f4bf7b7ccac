//! The host side of the prompt-attention kernel: whether it applies, and its launch.

use burn::tensor::{f16, DType, Int, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{
    cubecl::{
        features::MmaConfig,
        ir::{DeviceProperties, ElemType, FloatKind, StorageType},
        prelude::*,
    },
    BoolElement, CubeRuntime,
};

use super::kernel::{prompt_attention_kernel, PromptGeometry, PIECE, QUERY_ROWS, WARPS};
use crate::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, int_arg, CubeF32},
};

/// Widest head the kernel takes: a warp keeps a query row's value sums, `head_dim / 2` floats per
/// lane, in registers.
pub const MAX_HEAD_DIM: usize = 128;

/// The kernel's compile-time shapes for heads of `head_dim` channels, `group` query heads per KV
/// head, f32 queries and keys and values of `kv_dtype` on a device with `properties`; `None`
/// where it does not apply: keys or values other than f16, queries other than f32, a head
/// dimension not a multiple of 16 or past [`MAX_HEAD_DIM`], a device without f16 `16 × 8 × 16`
/// warp products into f32 (`mma`) and `ldmatrix`, or too little shared memory.
pub fn prompt_geometry(
    head_dim: usize,
    group: usize,
    (q_dtype, kv_dtype): (DType, DType),
    properties: &DeviceProperties,
) -> Option<PromptGeometry> {
    let f16: StorageType = ElemType::Float(FloatKind::F16).into();
    let product =
        MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32).into(), m: 16, n: 8, k: 16 };
    let features = &properties.features.matmul;
    let geo = PromptGeometry { head_dim: head_dim as u32, group: group as u32 };
    let applies = q_dtype == DType::F32
        && kv_dtype == DType::F16
        && head_dim.is_multiple_of(16)
        && (16..=MAX_HEAD_DIM).contains(&head_dim)
        && group > 0
        && features.mma.contains(&product)
        && features.ldmatrix.contains(&f16)
        && geo.shared_bytes() as usize <= properties.hardware.max_shared_memory_size;
    applies.then_some(geo)
}

/// Attention of the queries `q` `[batch, heads, q_len, head_dim]` (f32, the last `q_len` of
/// `total_len` slots) over the f16 keys and values `k`, `v` `[batch, kv_heads, total_len,
/// head_dim]` with `options` (causal, left padding, sliding window), to `[batch, heads, q_len,
/// head_dim]` f32, by the tensor-core kernel; `None` (nothing launched) where it does not apply
/// ([`prompt_geometry`]). The shapes must be those `cache::check_attend_shapes` accepts.
#[allow(unsafe_code)] // An unchecked kernel launch; the SAFETY comment says why it is in bounds.
pub fn prompt_attention<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    k: Tensor<CubeF32<R, BT>, 4>,
    v: Tensor<CubeF32<R, BT>, 4>,
    options: &AttendOptions,
) -> Option<Tensor<CubeF32<R, BT>, 4>> {
    let [batch, heads, q_len, head_dim] = q.dims();
    let [_, kv_heads, total_len, _] = k.dims();
    let device = q.device();
    let q = float_arg(&q);
    let geo = prompt_geometry(head_dim, heads / kv_heads, (q.dtype, k.dtype()), q.client.properties())?;
    let (keys, values) = (float_arg(&k), float_arg(&v));
    let starts: Vec<i32> = options.key_start.iter().map(|&s| s as i32).collect();
    let key_start = int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::from_data(TensorData::new(starts, [batch]), &device));
    let out = dense_output::<R, f32>(&q, batch * heads * q_len * head_dim);
    // SAFETY: cube `(x, h, b)` reads rows `64x ..` below `q_len` of query head `h` of row `b`
    // (`q`: `batch · heads · q_len` rows of `head_dim`), rows below `total_len` of KV head `h /
    // group` of row `b` (`keys`, `values`: `batch · kv_heads · total_len` rows of `head_dim / 8`
    // pieces; `heads = kv_heads · group` as the callers check) and entry `b < batch` of
    // `key_start`, and writes the same rows of `out` as of `q`. Its shared arrays hold 64 rows of
    // `stride ≥ head_dim / 8` pieces, indexed by rows below 64 and pieces below `head_dim / 8`
    // (staging: cells below `64 · head_dim / 8`, the unrolled count times the 128 units); an
    // `ldmatrix` row starts at a piece below `head_dim / 8` of a row below 64.
    unsafe {
        prompt_attention_kernel::launch_unchecked::<f16, R>(
            &q.client.clone(),
            CubeCount::Static(q_len.div_ceil(QUERY_ROWS as usize) as u32, heads as u32, batch as u32),
            CubeDim::new_1d(WARPS * 32),
            PIECE as usize,
            q.into_array_arg(),
            keys.into_array_arg(),
            values.into_array_arg(),
            key_start.into_array_arg(),
            out.clone().into_array_arg(),
            q_len as u32,
            total_len as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
        )
    };
    let out = Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out));
    Some(out.reshape([batch, heads, q_len, head_dim]))
}
