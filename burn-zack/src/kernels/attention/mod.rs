//! ZACK attention on reduced, uneven head dimensions: the plain-tensor reference (every query
//! length, every backend), the fused decode kernel (one query slot) and the prefill kernel (many
//! query slots, tiles balanced across heads), both on CubeCL backends.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_launch;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod prefill_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod prefill_launch;
mod reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod rotate;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod task;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod tma_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod tma_launch;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::{decode_launch, supports};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_kernel::MmaGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_launch::{key_stride, mma_geometry, value_stride, RowSplits, StagedTiles};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use prefill_kernel::PrefillGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use prefill_launch::{prefill_geometry, prefill_launch, prefill_tasks};
pub use reference::zack_attention_reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use tma_kernel::TmaGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use tma_launch::tma_geometry;
