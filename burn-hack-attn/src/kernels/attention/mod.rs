//! HACK attention on the paper's layout ([`CacheView`]): the tensor-op reference (any q_len,
//! [`attention_reference`]) and, on CubeCL backends, the fused kernels with `select` choosing
//! among them:
//!
//! - `portable_kernel` / `portable_launch`: decode (one query slot) on CUDA cores, after the query
//!   quantization (`query_kernel`); its steps in `portable_scores` (a slot's scores) and
//!   `portable_values` (the blocks' softmax and P·V);
//! - `mma_kernel` / `mma_launch`: decode with its integer products on CUDA's tensor cores; its
//!   steps in `mma_scores` (the score product), `mma_softmax` (the block's numerators and P codes)
//!   and `mma_values` (the value product), its registers in `mma_operands`, its shapes in
//!   `mma_geometry`, its staged blocks in `mma_stage` (their barriers in `kernels/copy_barriers`);
//! - `prefill_kernel` / `prefill_launch`: many query slots; its steps in `prefill_scores` (the
//!   queries in 8 bits, a staged key block, its scores) and `prefill_values` (the block's softmax
//!   and P·V).

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_geometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod mma_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_operands;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_scores;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_softmax;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the stage's functions into undocumented helper items.
#[allow(missing_docs)]
mod mma_stage;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_values;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_scores;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_values;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod prefill_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod prefill_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod prefill_scores;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod prefill_values;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod query_kernel;
mod reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod select;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_geometry::MmaGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_launch::{mma_decode_launch, mma_geometry};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use portable_kernel::DecodeGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use portable_launch::{decode_chunk, decode_geometry, decode_launch};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use prefill_kernel::PrefillGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use prefill_launch::{prefill_geometry, prefill_launch};
pub use reference::{attention_reference, attention_reference_in_steps, CacheView};
