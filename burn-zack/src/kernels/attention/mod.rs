//! ZACK attention on reduced, uneven head dimensions: the plain-tensor reference (every query
//! length, every backend) and the fused decode kernel (one query slot, CubeCL backends).

#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
mod reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod rotate;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::{decode_launch, supports};
pub use reference::zack_attention_reference;
