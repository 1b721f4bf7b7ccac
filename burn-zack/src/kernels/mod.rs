//! ZACK's attention behind one backend-extension trait, as kernel/launch/reference triads
//! (`docs/design.md`), in one op folder, `attention/`:
//!
//! - `reference.rs`: the plain-tensor math, every query length, every backend;
//! - `select.rs`: the only place that picks what runs from the shapes and the device's
//!   properties (the reference, the prefill kernel, or a decode kernel);
//! - `portable_kernel.rs` + `portable_launch.rs`: the decode kernel of every CubeCL backend
//!   (scalar products on column blocks), over the load-balanced tasks of `schedule.rs`;
//! - `mma_kernel.rs` + `mma_launch.rs`: the decode kernel on `wmma` tensor cores (CUDA);
//! - `tma_kernel.rs` + `tma_launch.rs`: the decode kernel on rows landed by Hopper's TMA;
//! - `prefill_kernel.rs` + `prefill_launch.rs`: the kernel for many query slots;
//! - shared steps: `rotate_kernel.rs` + `rotate_launch.rs` (the queries rotated once per step),
//!   `decode_step.rs` (the metadata upload, the partials and their merge), `task.rs` (what one
//!   cube of a decode kernel works on) and `row_splits.rs` (the tensor-core kernels' splits).

pub mod attention;

use burn::tensor::{backend::Backend, Tensor};
use burn_kvcompress::{cache::AttendOptions, error::CacheError};

pub use attention::{split_length, zack_attention_reference, DecodeSchedule, DecodeTask};

use crate::layout::HeadLayout;

/// A backend that runs ZACK attention. The provided method is the plain-tensor reference;
/// CubeCL backends override it with the kernels.
pub trait ZackBackend: Backend {
    /// Whether the backend holds f16 tensors, as the cache's f16 storage of the reduced
    /// coordinates needs.
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

/// The kernels run on CubeCL backends computing in f32 with i32 integers (the `Wgpu` and `Cuda`
/// backends).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl<R, BT> ZackBackend for burn_cubecl::CubeBackend<R, f32, i32, BT>
where
    R: burn_cubecl::CubeRuntime,
    BT: burn_cubecl::BoolElement,
{
    const HALF_STORAGE: bool = true;

    /// The kernel [`attention_select`](attention::attention_select) picks.
    fn zack_attention(
        q: Tensor<Self, 4>,
        basis: Tensor<Self, 2>,
        keys: Tensor<Self, 3>,
        values: Tensor<Self, 3>,
        layout: &HeadLayout,
        options: &AttendOptions,
    ) -> Result<Tensor<Self, 4>, CacheError> {
        attention::attention_select(q, basis, keys, values, layout, options)
    }
}
