//! # burn-hack-attn
//!
//! HACK (homomorphic quantization for attention over a 2-bit KV cache), after the paper
//! (design choices and measurements: `docs/hack.md` in the repository).
//!
//! - [`HackConfig`]: bits (2 or 4 for K/V; Q and P use 8), partition size Π, rounding; it is the
//!   [`KvScheme`](burn_kvcompress::cache::KvScheme) that builds one [`cache::HackCache`] per layer
//!   (`--kv hack:bits=2,pi=64` in the example CLIs).
//! - [`quant`]: asymmetric min/max quantization of one partition (round-to-nearest or seeded,
//!   counter-based stochastic rounding; degenerate partitions; clamping), fp16 metadata,
//!   bit-packing.
//! - [`cache`]: keys quantized per slot in channel groups, values per channel in blocks of Π slots
//!   with an f32 tail until a block fills (requantization elimination), cached code sums
//!   (summation elimination), the byte count per token, and export/import as a
//!   [`LayerState`](burn_kvcompress::cache::LayerState).
//! - [`kernels`]: the operations behind the [`kernels::HackBackend`] extension trait: quantize +
//!   pack, and attention on the codes (Q and P quantized to 8 bits, both products from Eq. 4).
//! - [`homomorphic`]: the product of two quantized matrices from codes and correction terms (the
//!   oracle of spec §11).

pub mod cache;
mod config;
pub mod homomorphic;
pub mod kernels;
pub mod quant;
pub mod rotation;

pub use cache::HackScheme;
pub use config::{Axes, HackConfig, HackConfigError, Preset, RotationSpec, Rounding, PRESETS};
