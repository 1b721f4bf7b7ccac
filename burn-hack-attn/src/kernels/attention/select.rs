//! Which attention variant runs on a CubeCL backend: the fused decode kernel for one query slot
//! (on tensor cores where CUDA has them, [`mma_geometry`]; else the portable one where its shared
//! memory fits the device, which takes up to 8 query heads per KV head at 128 channels), the fused
//! prefill kernel for several query slots (or a decode the decode kernels do not take) where its
//! shared memory fits, and the reference otherwise.

use burn::tensor::Tensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
    kernels::CubeF32 as Backend,
};

use super::{
    attention_reference, decode_geometry, decode_launch, mma_decode_launch, mma_geometry, prefill_geometry,
    prefill_launch, CacheView,
};

/// HACK attention of `q: [batch, heads, q_len, head_dim]` over `cache`, `[batch, heads, q_len,
/// head_dim]`, by the variant the device's properties and the shapes allow (see the module
/// documentation).
pub fn attention_select<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    cache: &CacheView<'_, Backend<R, BT>>,
    options: &AttendOptions,
) -> Result<Tensor<Backend<R, BT>, 4>, CacheError> {
    let [batch, kv_heads, len, _] = cache.keys.params.dims();
    let (_, heads, q_len, _) = check_attend_shapes(q.dims(), [batch, kv_heads, len, cache.head_dim], options)?;
    let group = heads / kv_heads;
    let client = q.clone().into_primitive().tensor().client;
    let properties = client.properties();
    let device_shared = properties.hardware.max_shared_memory_size;
    let decode = decode_geometry(group, cache);
    if q_len == 1 {
        if let Some(geo) = mma_geometry(&decode, properties) {
            return Ok(mma_decode_launch(q, cache, geo, options));
        }
        if decode.fits(device_shared) {
            return Ok(decode_launch(q, cache, decode, options));
        }
    }
    match prefill_geometry(group, cache.head_dim, cache.partition, cache.bits, device_shared) {
        Some(geo) => Ok(prefill_launch(q, cache, geo, options)),
        None => attention_reference(q, cache, options),
    }
}
