//! Quantize + pack: of K rows and closed V blocks (the paper's layout, `rows_kernel` /
//! `rows_launch`), and of the channel layout's blocks (quantized along one axis, packed along the
//! other, `blocks_kernel` / `blocks_launch`); the references in `reference`. One kernel per
//! layout, so there is nothing to select.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod blocks_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod blocks_launch;
mod reference;
// `#[derive(CubeType)]` expands into undocumented items.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod rows_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod rows_launch;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use blocks_launch::quantize_blocks_launch;
pub use reference::{pack_words, quantize_blocks_reference, quantize_reference, unpack_words};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use rows_launch::quantize_launch;
