//! Fused lookup-table decode attention (one query slot): the table kernel, the attention kernel
//! and their launch, and where CUDA's tensor cores are available, a kernel whose values run on
//! them over an f16 table; the reference is [`super::attention_reference`].

// `#[cube]` expands the kernels into undocumented helper items.
#[allow(missing_docs)]
mod half_table;
mod kernel;
mod kernel_geometry;
mod launch;
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod mma_kernel;
mod mma_kernel_geometry;
mod mma_launch;
mod table;

pub use half_table::HalfTables;
pub use launch::{decode_geometry, decode_launch, pq_shape, split_chunk, supports};
pub use mma_kernel_geometry::MmaGeometry;
pub use mma_launch::mma_geometry;
