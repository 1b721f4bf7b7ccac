//! The PQ operations behind one backend-extension trait, as kernel/launch/reference triads
//! (DESIGN.md): `encode` (nearest centroid + pack on append) and `attention` (lookup-table
//! attention over the codes and the recent window; `decode` is its fused kernel for one query).

pub mod attention;
pub mod encode;
mod view;

use burn::tensor::{backend::Backend, Int, Tensor};
use burn_kvcompress::{cache::AttendOptions, error::CacheError};

pub use attention::attention_reference;
pub use encode::{encode_reference, unpack_codes};
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
