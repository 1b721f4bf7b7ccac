//! Attention on the channel layout ([`Axes::Channel`](crate::Axes::Channel)): what it reads
//! ([`ChannelView`], `view`), the reference ([`channel_attention_reference`]) and, on CubeCL
//! backends, the decode kernels with `select` choosing among them:
//!
//! - `portable_kernel` / `portable_launch`: on CUDA cores;
//! - `mma_kernel` / `mma_launch`: on tensor cores where the device has integer warp products; its
//!   product steps in `mma_block` (their reductions in `mma_chains`), a warp's run of them in
//!   `mma_runs`, its operand layout in `mma_operands`, its staged blocks in `mma_stage`, its float
//!   slots (a share in every warp) in `float_warp`;
//! - shared by both: `float_slots` (where a stream's float slots lie).

#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod float_slots;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod float_warp;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_block;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_chains;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod mma_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_operands;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_runs;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_stage;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod portable_kernel;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod portable_launch;
mod reference;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod select;
mod view;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_kernel::{ChannelMmaGeometry, StagePlan, TILE_PAD};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_launch::{channel_mma_decode_launch, channel_mma_geometry};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_operands::PackedDepth;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use portable_kernel::ChannelDecodeGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use portable_launch::{block_splits, channel_decode_geometry, channel_decode_launch};
pub use reference::{channel_attention_reference, symmetric_codes, weight_codes_of, QUERY_LEVELS, WEIGHT_LEVELS};
pub use view::{ChannelView, FloatSlots};
