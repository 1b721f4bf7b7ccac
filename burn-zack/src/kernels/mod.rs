//! ZACK's attention behind one backend-extension trait, as a kernel/launch/reference triad
//! (`docs/design.md`), and the load-balancing schedule of the decode kernel.

pub mod attention;
mod schedule;

use burn::tensor::{backend::Backend, Tensor};
use burn_kvcompress::{cache::AttendOptions, error::CacheError};

pub use attention::zack_attention_reference;
pub use schedule::{split_length, DecodeSchedule, DecodeTask};

use crate::cache::HeadLayout;

/// A backend that runs ZACK attention. The provided method is the plain-tensor reference;
/// CubeCL backends override it with the decode kernel.
pub trait ZackBackend: Backend {
    /// Whether the backend holds f16 tensors, as [`ReducedStorage::F16`](crate::cache::ReducedStorage) needs.
    const HALF_STORAGE: bool = false;

    /// Attention of full post-RoPE `q: [batch, heads, q_len, head_dim]` over reduced `keys:
    /// [batch, slots, Σ k_qk]` and `values: [batch, slots, Σ k_vo]` with the packed query/key
    /// `basis: [head_dim, Σ k_qk]`; returns `[batch, heads, q_len, head_dim]` (see
    /// [`zack_attention_reference`]).
    fn zack_attention(
        q: Tensor<Self, 4>,
        basis: Tensor<Self, 2>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        layout: &HeadLayout,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        zack_attention_reference(q, basis, keys, values, layout, options)
    }
}

#[cfg(feature = "ndarray")]
impl ZackBackend for burn::backend::NdArray<f32> {}

#[cfg(feature = "flex")]
impl ZackBackend for burn::backend::Flex<f32, i32> {}

/// The kernel runs on CubeCL backends computing in f32 with i32 integers (the `Wgpu` and `Cuda`
/// backends).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R, BT> ZackBackend for burn_cubecl::CubeBackend<R, f32, i32, BT>
where
    R: burn_cubecl::CubeRuntime,
    BT: burn_cubecl::BoolElement,
{
    const HALF_STORAGE: bool = true;

    /// The fused decode kernel for one query slot and the prefill kernel for several (in the
    /// shapes they [`support`](attention::supports), with no head of rank 0); other shapes run
    /// the reference.
    fn zack_attention(
        q: Tensor<Self, 4>,
        basis: Tensor<Self, 2>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        layout: &HeadLayout,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        let [batch, slots, _] = keys.dims();
        let cache_dims = [batch, layout.kv_heads(), slots, layout.head_dim];
        let (_, heads, q_len, head_dim) = burn_kvcompress::cache::check_attend_shapes(q.dims(), cache_dims, options)?;
        let group = heads / layout.kv_heads();
        if layout.has_empty_head() {
            return zack_attention_reference(q, basis, keys, values, layout, options);
        }
        match (q_len, attention::prefill_geometry(group, head_dim)) {
            (1, _) if attention::supports(group, head_dim) => {
                Ok(attention::decode_launch(q, basis, keys, values, layout, options))
            }
            (_, Some(geo)) => Ok(attention::prefill_launch(q, basis, keys, values, layout, geo, options)),
            _ => zack_attention_reference(q, basis, keys, values, layout, options),
        }
    }
}
