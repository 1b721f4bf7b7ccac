//! ZACK attention on reduced, uneven head dimensions: the plain-tensor reference (every query
//! length, every backend) and, on CubeCL backends, the kernels [`attention_select`] picks among: the
//! prefill kernel (many query slots, tiles balanced across heads) and three decode kernels (one
//! query slot: portable, `wmma` tensor cores, Hopper TMA), all reading queries rotated once by
//! the rotation kernel. One op folder, since the reference serves every query length and one
//! selection routes between the decode and prefill kernels.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod decode_step;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_launch;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod portable_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_launch;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod prefill_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod prefill_launch;
mod reference;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod rotate_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod rotate_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod row_splits;
mod schedule;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod select;
// `#[cube]` expands the helpers into undocumented items.
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
pub use mma_kernel::MmaGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_launch::{key_stride, mma_geometry, value_stride, StagedTiles};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use prefill_kernel::PrefillGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use prefill_launch::{prefill_geometry, prefill_launch, prefill_tasks};
pub use reference::zack_attention_reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use row_splits::RowSplits;
pub use schedule::{split_length, DecodeSchedule, DecodeTask};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use select::{attention_select, supports};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use tma_kernel::TmaGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use tma_launch::tma_geometry;
