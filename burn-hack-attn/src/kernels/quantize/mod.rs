//! Quantize + pack: of K rows and closed V blocks (the paper's layout), and of the channel
//! layout's blocks (quantized along one axis, packed along the other): kernels, launches,
//! reference.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod blocks_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod blocks_launch;
// `#[derive(CubeType)]` expands into undocumented items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
mod reference;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use blocks_launch::quantize_blocks_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::quantize_launch;
pub use reference::{pack_words, quantize_blocks_reference, quantize_reference, unpack_words};
