//! Nearest-centroid encoding and packing of K/V vectors: `reference.rs`, and one kernel (so no
//! `select.rs`) with its launch.

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
mod reference;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::encode_launch;
pub use reference::{encode_host, encode_reference, unpack_codes};
