//! Which implementation attends on a CubeCL backend, from the device's properties and the
//! shapes: the only place a variant is picked.
//!
//! - one query slot whose shapes the portable kernel supports, on a device with f16 tensor cores
//!   and asynchronous copies (CUDA) and shapes the tensor-core kernel fits: the tensor-core
//!   kernel ([`mma_decode_launch`]);
//! - one query slot whose shapes the portable kernel supports: the portable kernel
//!   ([`portable_decode_launch`]);
//! - several query slots (prefill), or other shapes: the reference ([`attention_reference`]).

use burn::tensor::Tensor;
use burn_cubecl::{
    cubecl::{
        features::{MmaConfig, Plane},
        ir::{DeviceProperties, ElemType, FloatKind},
    },
    BoolElement, CubeRuntime,
};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
    kernels::{warp_mma::WARP, CubeF32},
};

use super::{
    attention_reference, decode_args::DecodeArgs, mma_geometry::mma_geometry, mma_launch::mma_decode_launch,
    portable_geometry::portable_supports, portable_launch::portable_decode_launch, table::DecodeShape,
};
use crate::kernels::PqView;

/// Attention of `q: [batch, heads, q_len, head_dim]` (the last `q_len` slots) over `view`;
/// returns `[batch, heads, q_len, head_dim]`. One query slot whose shapes the portable kernel
/// supports runs a fused decode kernel (on tensor cores where the device has them and the shapes
/// fit them), anything else the reference [`attention_reference`].
pub fn attention_select<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    view: &PqView<'_, CubeF32<R, BT>>,
    options: &AttendOptions,
) -> Result<Tensor<CubeF32<R, BT>, 4>, CacheError> {
    let pair = view.codes.map(|(k, _)| k.dims()).or(view.recent.map(|(k, _)| k.dims()));
    let [batch, kv_heads, _, _] = pair.ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
    let cache_dims = [batch, kv_heads, view.len(), q.dims()[3]];
    let (_, _, q_len, _) = check_attend_shapes(q.dims(), cache_dims, options)?;
    let [_, heads, _, head_dim] = q.dims();
    let shape = DecodeShape::of(&view.config, heads / kv_heads, head_dim);
    if q_len != 1 || !portable_supports(shape) {
        return attention_reference(q, view, options);
    }
    let args = DecodeArgs::new(&q, view, options);
    let properties = args.q.client.properties();
    let mma = match has_tensor_cores(properties) {
        true => mma_geometry(shape, properties.hardware.max_shared_memory_size),
        false => None,
    };
    Ok(match mma {
        Some(geo) => mma_decode_launch(args, view, options, (batch, kv_heads), geo),
        None => portable_decode_launch(args, view, options, (batch, kv_heads), shape),
    })
}

/// Whether the device runs the tensor-core kernel's operations: f16 `32 × 8 × 16` warp products
/// into f32, asynchronous copies, and plane operations on planes of exactly 32 lanes.
fn has_tensor_cores(properties: &DeviceProperties) -> bool {
    let f16 = ElemType::Float(FloatKind::F16).into();
    let product =
        MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32).into(), m: 32, n: 8, k: 16 };
    let features = &properties.features;
    features.matmul.cmma.contains(&product)
        && features.copy_async
        && features.plane.contains(Plane::Ops)
        && properties.hardware.plane_size_min == WARP
        && properties.hardware.plane_size_max == WARP
}
