//! Fused decode attention (one query slot): the query quantization kernel, the decode kernel and
//! their launch, and where CUDA's tensor cores are available, a kernel whose integer products run
//! on them; the reference is [`super::attention_reference`].

// `#[cube]` expands the barriers' methods into undocumented helper items.
#[allow(missing_docs)]
mod copy_barriers;
mod kernel;
mod launch;
mod mma_geometry;
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod mma_kernel;
mod mma_launch;
// `#[cube]` expands the stage's functions into undocumented helper items.
#[allow(missing_docs)]
mod mma_stage;
mod query_kernel;

pub use kernel::DecodeGeometry;
pub use launch::{decode_chunk, decode_geometry, decode_launch};
pub use mma_geometry::MmaGeometry;
pub use mma_launch::{mma_decode_launch, mma_geometry};
