//! Which channel-layout attention variant runs on a CubeCL backend: for one query slot over closed
//! blocks, the decode kernel on tensor cores where CUDA has integer warp products
//! ([`channel_mma_geometry`]), else the portable one where its cube fits the device; the
//! reference (on the host) otherwise.

use burn::tensor::Tensor;
use burn_cubecl::{BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
    kernels::CubeF32 as Backend,
};

use super::{
    channel_attention_reference, channel_decode_geometry, channel_decode_launch, channel_mma_decode_launch,
    channel_mma_geometry, ChannelView,
};

/// HACK attention of `q: [batch, heads, q_len, head_dim]` (rotated) over the channel-layout
/// `cache`, `[batch, heads, q_len, head_dim]`, by the variant the device's properties and the
/// shapes allow (see the module documentation).
pub fn channel_attention_select<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    cache: &ChannelView<'_, Backend<R, BT>>,
    options: &AttendOptions,
) -> Result<Tensor<Backend<R, BT>, 4>, CacheError> {
    let [batch, kv_heads, len, d] = [cache.batch, cache.kv_heads, cache.len, cache.head_dim];
    let (_, heads, q_len, _) = check_attend_shapes(q.dims(), [batch, kv_heads, len, d], options)?;
    let geo = channel_decode_geometry(heads / kv_heads, cache);
    let client = q.clone().into_primitive().tensor().client;
    let properties = client.properties();
    if q_len == 1 && cache.blocks() > 0 {
        if let Some(mma) = channel_mma_geometry(&geo, properties) {
            return Ok(channel_mma_decode_launch(q, cache, mma, options));
        }
        if geo.fits(properties.hardware.max_shared_memory_size) {
            return Ok(channel_decode_launch(q, cache, geo, options));
        }
    }
    channel_attention_reference(q, cache, options)
}
