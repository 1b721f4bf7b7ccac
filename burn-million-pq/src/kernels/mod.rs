//! The PQ operations behind one backend-extension trait ([`PqBackend`]), one folder per operation
//! (`docs/design.md`):
//!
//! - `encode/`: nearest centroid + pack on append; `reference.rs`, `kernel.rs`, `launch.rs`;
//! - `attention/`: lookup-table attention over the codes and the recent window; `reference.rs`,
//!   `select.rs` (the only place a variant is picked, from the device and the shapes), and the
//!   fused decode attention of one query slot in two variants, `portable_*` (any CubeCL backend)
//!   and `mma_*` (CUDA tensor cores), each as `*_kernel.rs`, `*_geometry.rs` (compile-time
//!   shapes) and `*_launch.rs`, with the shared `table.rs` (the f32 lookup table and the step's
//!   shapes), `half_table.rs` (the f16 tables) and `decode_args.rs` (the launches' arguments);
//! - `shape.rs` ([`PqShape`]) and `view.rs` ([`PqView`]): what the operations share.

pub mod attention;
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

    /// Picked by [`attention_select`](attention::attention_select): a fused decode kernel for one
    /// query slot whose shapes it supports; several query slots, or other shapes, run the
    /// reference.
    fn pq_attention(
        q: Tensor<Self, 4>,
        view: &PqView<'_, Self>,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        attention::attention_select(q, view, options)
    }
}
