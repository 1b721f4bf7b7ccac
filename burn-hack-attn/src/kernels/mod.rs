//! The HACK operations behind one backend-extension trait ([`HackBackend`]). Each operation has a
//! folder: `reference.rs` (the plain-tensor math, the trait's provided methods), one file per
//! kernel variant (`<variant>_kernel.rs` + `<variant>_launch.rs`) and, where there is a choice,
//! `select.rs`, the only place that picks a variant from the device's properties and the shapes
//! (the CubeCL impl of the trait calls it):
//!
//! - [`attention`]: attention on the paper's layout ([`CacheView`]): reference; decode (one query
//!   slot) `portable_*` and tensor-core `mma_*`; `prefill_*` (many query slots);
//!   `attention::select` (on CubeCL backends);
//! - [`channel`]: attention on the channel layout ([`ChannelView`]): reference; decode `portable_*`
//!   and tensor-core `mma_*`; `channel::select` (on CubeCL backends);
//! - [`quantize`]: quantize + pack on append: reference; `rows_*` (the paper's layout) and
//!   `blocks_*` (the channel layout's blocks), one kernel each;
//! - [`rotate`]: queries and keys rotated per KV head (the reference is [`rotate_heads`]);
//!   `rotate::select` picks the rotary kernel.
//!
//! Shared by them: the data the kernels produce and read (`codes`: [`Codes`], [`PackedRows`]),
//! what a quantize call covers (`spec`: [`QuantizeSpec`], [`RowLayout`], [`key_group`],
//! [`value_group`]), and the device helpers `cache_args`, `copy_barriers`, `eight_bit`, `noise`, `params_word`,
//! `warp_codes`.

pub mod attention;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod cache_args;
pub mod channel;
mod codes;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the barriers' methods into undocumented helper items.
#[allow(missing_docs)]
mod copy_barriers;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod eight_bit;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod noise;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod params_word;
pub mod quantize;
pub mod rotate;
mod spec;
// `#[cube]` expands the helpers into undocumented items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod warp_codes;

use burn::tensor::{backend::Backend, DType, Tensor};
use burn_kvcompress::{cache::AttendOptions, error::CacheError};

pub use attention::{attention_reference, attention_reference_in_steps, CacheView};
pub use channel::{channel_attention_reference, ChannelView, FloatSlots};
pub(crate) use codes::append_codes;
pub use codes::{Codes, PackedRows};
pub use quantize::{pack_words, quantize_blocks_reference, quantize_reference, unpack_words};
pub use spec::{key_group, value_group, QuantizeSpec, RowLayout};

use crate::{quant::QuantError, rotation::rotate_heads};

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

    /// The rotary kernel where it applies ([`rotate::select`]).
    fn hack_rotate(x: Tensor<Self, 4>, r: &Tensor<Self, 3>, dtype: DType) -> Tensor<Self, 4> {
        rotate::select::rotate_select(x, r, dtype)
    }

    /// The fused decode and prefill kernels where they apply ([`attention::select`]).
    fn hack_attention(
        q: Tensor<Self, 4>,
        cache: &CacheView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        attention::select::attention_select(q, cache, options)
    }

    /// The decode kernels where they apply ([`channel::select`]).
    fn hack_channel_attention(
        q: Tensor<Self, 4>,
        cache: &ChannelView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        channel::select::channel_attention_select(q, cache, options)
    }
}
