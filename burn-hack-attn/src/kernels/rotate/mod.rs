//! Queries or keys rotated per KV head in one launch: the kernel and its launch. The reference
//! is [`rotate_heads`](crate::rotation::rotate_heads) (Burn's batched matrix product).

#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::{rotate_applies, rotate_launch};
