//! The HACK operations behind one backend-extension trait, each as a kernel/launch/reference triad
//! (`docs/design.md`): `quantize` (quantize + pack on append: rows, and the channel layout's
//! blocks), `rotate` (queries and keys rotated per KV head), `decode` (the fused decode attention
//! kernel, one query slot), `prefill` (the fused attention kernel for many query slots) and
//! `attention` (the tensor-op reference of both).

pub mod attention;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cache_args;
pub mod channel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod decode;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod eight_bit;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod noise;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod params_word;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod prefill;
pub mod quantize;
mod spec;
// `#[cube]` expands the helpers into undocumented items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod warp_codes;

use burn::tensor::{backend::Backend, DType, Tensor};
use burn_kvcompress::{cache::AttendOptions, error::CacheError};

pub use attention::{attention_reference, attention_reference_in_steps, CacheView};
pub use channel::{channel_attention_reference, ChannelView};
pub use quantize::{pack_words, quantize_blocks_reference, quantize_reference, unpack_words};
pub use spec::{QuantizeSpec, RowLayout};

use crate::{
    cache::{Codes, PackedRows},
    quant::QuantError,
    rotation::rotate_heads,
};

/// A backend that runs HACK's operations. The provided methods are the plain-tensor references;
/// CubeCL backends override them with kernels.
pub trait HackBackend: Backend {
    /// Quantizes and packs `x: [batch, kv_heads, rows, z]` per `spec`.
    fn hack_quantize(x: Tensor<Self, 4>, spec: &QuantizeSpec) -> Result<Codes<Self>, QuantError> {
        quantize_reference(x, spec)
    }

    /// Quantizes the blocks of `x: [batch, kv_heads, blocks · Π, head_dim]` for the channel
    /// layout as [`quantize_blocks_reference`] says.
    fn hack_quantize_blocks(x: Tensor<Self, 4>, spec: &QuantizeSpec) -> Result<PackedRows<Self>, QuantError> {
        quantize_blocks_reference(x, spec)
    }

    /// `x: [batch, heads, n, head_dim]` rotated per KV head by `r: [kv_heads, head_dim, head_dim]`
    /// (f32) as [`rotate_heads`] rotates it, in `dtype`.
    fn hack_rotate(x: Tensor<Self, 4>, r: &Tensor<Self, 3>, dtype: DType) -> Tensor<Self, 4> {
        rotate_heads(x.cast(DType::F32), r).cast(dtype)
    }

    /// HACK attention of `q: [batch, heads, q_len, head_dim]` over `cache`, `[batch, heads, q_len,
    /// head_dim]`.
    fn hack_attention(
        q: Tensor<Self, 4>,
        cache: &CacheView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        attention_reference(q, cache, options)
    }

    /// HACK attention of `q: [batch, heads, q_len, head_dim]` (rotated) over a channel-layout
    /// cache, `[batch, heads, q_len, head_dim]`.
    fn hack_channel_attention(
        q: Tensor<Self, 4>,
        cache: &ChannelView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        channel_attention_reference(q, cache, options)
    }
}

#[cfg(feature = "ndarray")]
impl HackBackend for burn::backend::NdArray<f32> {}

#[cfg(feature = "flex")]
impl HackBackend for burn::backend::Flex<f32, i32> {}

/// The kernels run on CubeCL backends computing in f32 with i32 integers (the crate's `Wgpu` and
/// `Cuda` aliases).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R, BT> HackBackend for burn_cubecl::CubeBackend<R, f32, i32, BT>
where
    R: burn_cubecl::CubeRuntime,
    BT: burn_cubecl::BoolElement,
{
    fn hack_quantize(x: Tensor<Self, 4>, spec: &QuantizeSpec) -> Result<Codes<Self>, QuantError> {
        Ok(quantize::quantize_launch(x, spec))
    }

    /// One launch (`quantize_blocks_kernel`), where the reference quantizes rows and transposes
    /// the packed blocks with a dozen tensor operations (a decode step that closes a block runs
    /// it in every layer).
    fn hack_quantize_blocks(x: Tensor<Self, 4>, spec: &QuantizeSpec) -> Result<PackedRows<Self>, QuantError> {
        Ok(quantize::quantize_blocks_launch(x, spec))
    }

    /// One launch (`burn_kvcompress::kernels::rotate_heads_kernel`, the model's rotary kernel
    /// without RoPE) in f32 arithmetic, where Burn's product of the expanded matrices takes
    /// several (and CUDA's runs in TF32); Burn's product for head dimensions the kernel does not
    /// take.
    fn hack_rotate(x: Tensor<Self, 4>, r: &Tensor<Self, 3>, dtype: DType) -> Tensor<Self, 4> {
        use burn_kvcompress::kernels::{rotary_applies, rotate_heads_kernel};
        match rotary_applies(x.dtype(), dtype, x.dims()[3], true) {
            true => rotate_heads_kernel(x, r, dtype),
            false => rotate_heads(x.cast(DType::F32), r).cast(dtype),
        }
    }

    /// The fused decode kernel for one query slot (on tensor cores where CUDA has them,
    /// [`decode::mma_geometry`]) and the fused prefill kernel for several,
    /// where their shared memory fits the device (the decode kernel takes up to 8 query heads per
    /// KV head at 128 channels); larger groups run the reference.
    fn hack_attention(
        q: Tensor<Self, 4>,
        cache: &CacheView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        let [batch, kv_heads, len, _] = cache.keys.params.dims();
        let (_, heads, q_len, _) =
            burn_kvcompress::cache::check_attend_shapes(q.dims(), [batch, kv_heads, len, cache.head_dim], options)?;
        let group = heads / kv_heads;
        let client = q.clone().into_primitive().tensor().client;
        let properties = client.properties();
        let device_shared = properties.hardware.max_shared_memory_size;
        let decode = decode::decode_geometry(group, cache);
        if q_len == 1 {
            if let Some(geo) = decode::mma_geometry(&decode, properties) {
                return Ok(decode::mma_decode_launch(q, cache, geo, options));
            }
            if decode.fits(device_shared) {
                return Ok(decode::decode_launch(q, cache, decode, options));
            }
        }
        match prefill::prefill_geometry(group, cache.head_dim, cache.partition, cache.bits, device_shared) {
            Some(geo) => Ok(prefill::prefill_launch(q, cache, geo, options)),
            None => attention_reference(q, cache, options),
        }
    }

    /// The decode kernel for one query slot over closed blocks: on tensor cores where CUDA has
    /// integer warp products ([`channel::channel_mma_geometry`]), else the portable kernel where
    /// its cube fits the device; the reference (on the host) otherwise.
    fn hack_channel_attention(
        q: Tensor<Self, 4>,
        cache: &ChannelView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        let [batch, kv_heads, len, d] = [cache.batch, cache.kv_heads, cache.len, cache.head_dim];
        let (_, heads, q_len, _) =
            burn_kvcompress::cache::check_attend_shapes(q.dims(), [batch, kv_heads, len, d], options)?;
        let geo = channel::channel_decode_geometry(heads / kv_heads, cache);
        let client = q.clone().into_primitive().tensor().client;
        let properties = client.properties();
        if q_len == 1 && cache.blocks() > 0 {
            if let Some(mma) = channel::channel_mma_geometry(&geo, properties) {
                return Ok(channel::channel_mma_decode_launch(q, cache, mma, options));
            }
            if geo.fits(properties.hardware.max_shared_memory_size) {
                return Ok(channel::channel_decode_launch(q, cache, geo, options));
            }
        }
        channel_attention_reference(q, cache, options)
    }
}
