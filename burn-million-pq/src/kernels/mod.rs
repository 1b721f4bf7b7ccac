//! The PQ operations behind one backend-extension trait, as kernel/launch/reference triads
//! (`docs/design.md`): `encode` (nearest centroid + pack on append) and `attention` (lookup-table
//! attention over the codes and the recent window; `decode` is its fused kernel for one query).

pub mod attention;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod decode;
pub mod encode;
mod shape;
mod view;

use burn::tensor::{backend::Backend, Int, Tensor};
use burn_kvcompress::{cache::AttendOptions, error::CacheError};

pub use attention::attention_reference;
pub use encode::{encode_host, encode_reference, unpack_codes};
pub use shape::PqShape;
pub use view::{KvPair, PqView};

use crate::PqConfig;

/// A backend that runs MILLION's operations. The provided methods are the plain-tensor
/// references; CubeCL backends override them with kernels.
pub trait PqBackend: Backend {
    /// Encodes `x: [batch, kv_heads, n, head_dim]` with `books: [groups, subspaces, centroids,
    /// sub_dim]` (`groups` is 1 or `kv_heads`) into packed codes `[batch, kv_heads, n,
    /// words_per_vector]`.
    fn pq_encode(x: Tensor<Self, 4>, books: &Tensor<Self, 4>, config: &PqConfig) -> Tensor<Self, 4, Int> {
        encode_reference(x, books, config)
    }

    /// Attention of `q: [batch, heads, q_len, head_dim]` over `view`; returns `[batch, heads,
    /// q_len, head_dim]`.
    fn pq_attention(
        q: Tensor<Self, 4>,
        view: &PqView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        attention_reference(q, view, options)
    }
}

#[cfg(feature = "ndarray")]
impl PqBackend for burn::backend::NdArray<f32> {}

#[cfg(feature = "flex")]
impl PqBackend for burn::backend::Flex<f32, i32> {}

/// The kernels run on CubeCL backends computing in f32 with i32 integers (the `Wgpu` and `Cuda`
/// backends).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R, BT> PqBackend for burn_cubecl::CubeBackend<R, f32, i32, BT>
where
    R: burn_cubecl::CubeRuntime,
    BT: burn_cubecl::BoolElement,
{
    fn pq_encode(x: Tensor<Self, 4>, books: &Tensor<Self, 4>, config: &PqConfig) -> Tensor<Self, 4, Int> {
        encode::encode_launch(x, books, config)
    }

    /// The fused decode kernel for one query slot whose shapes it
    /// [`supports`](decode::supports); several query slots, or other shapes, run the reference.
    fn pq_attention(
        q: Tensor<Self, 4>,
        view: &PqView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        let pair = view.codes.map(|(k, _)| k.dims()).or(view.recent.map(|(k, _)| k.dims()));
        let [batch, kv_heads, _, _] =
            pair.ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        let cache_dims = [batch, kv_heads, view.len(), q.dims()[3]];
        let (_, _, q_len, _) = burn_kvcompress::cache::check_attend_shapes(q.dims(), cache_dims, options)?;
        let [_, heads, _, head_dim] = q.dims();
        let shape = decode::pq_shape(&view.config, heads / kv_heads, head_dim);
        if q_len == 1 && decode::supports(shape) {
            Ok(decode::decode_launch(q, view, options, kv_heads))
        } else {
            attention_reference(q, view, options)
        }
    }
}
