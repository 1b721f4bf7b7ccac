//! Quantize + pack of K rows and closed V blocks: kernel, launch, reference.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
mod reference;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::quantize_launch;
pub use reference::{pack_words, quantize_reference, unpack_words};
