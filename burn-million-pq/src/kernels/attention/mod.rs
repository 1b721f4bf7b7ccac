//! Lookup-table attention over PQ codes and the recent window.
//!
//! - `reference.rs`: the tensor-op reference (the implementation on non-Cube backends, and for
//!   several query slots everywhere);
//! - `select.rs`: which implementation attends on a CubeCL backend, from the device and the shapes;
//! - the fused decode attention of one query slot, flash-decoding style, in two variants:
//!   `portable_kernel.rs` (any CubeCL backend, an f32 lookup table from `table.rs`) and
//!   `mma_kernel.rs` (values on CUDA's tensor cores, f16 tables from `half_table.rs`), each with
//!   its compile-time shapes (`portable_geometry.rs`, `mma_geometry.rs`) and its launch
//!   (`portable_launch.rs`, `mma_launch.rs`); both read the arguments of `decode_args.rs`.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod decode_args;
// `#[cube]` expands the kernels into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod half_table;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_geometry;
// `#[cube]` expands the kernel into undocumented helper items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_geometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_launch;
mod reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod select;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod table;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use half_table::HalfTables;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_geometry::{mma_geometry, MmaGeometry};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use portable_geometry::{portable_geometry, portable_supports, split_chunk, PortableGeometry};
pub use reference::{attention_reference, lut_scores, reconstruct};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use select::attention_select;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use table::DecodeShape;
