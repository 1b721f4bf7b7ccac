//! # burn-hack-attn
//!
//! HACK (homomorphic quantization for attention over a 2-bit KV cache), after the paper
//! (design choices and measurements: `docs/hack.md` in the repository).
//!
//! - [`HackConfig`]: the format — key and value bits (2 or 4; Q and P use 8), partition size Π,
//!   rounding, [axes](Axes) (the paper's, or keys per channel and values per slot), the
//!   [rotation](RotationSpec) of queries, keys and values, float sinks and recent window, range
//!   clipping; its text form is `--kv`'s (`hack:bits=2,pi=64,…`) and the [presets](PRESETS) name
//!   the most accurate formats at about 2.6, 3.6 and 4.5 bits per element (`hack2`, `hack3`, `hack4`). [`HackScheme`] is the
//!   [`KvScheme`](burn_kvcompress::cache::KvScheme) that builds one [`cache::HackCache`] per
//!   layer and folds the value rotation into the model ([`HackScheme::fold`]).
//! - [`quant`]: asymmetric min/max quantization of one partition (round-to-nearest or seeded,
//!   counter-based stochastic rounding; degenerate partitions; clamping; clipped ranges), fp16
//!   metadata, bit-packing.
//! - [`cache`]: the paper's layout (keys quantized per slot in channel groups, values per channel
//!   in blocks of Π slots with an f32 tail, cached code sums) and the channel layout (float sinks,
//!   closed blocks of keys per channel and values per slot, a float tail); byte counts; export and
//!   import as a [`LayerState`](burn_kvcompress::cache::LayerState).
//! - [`rotation`]: randomized Hadamard rotations and learned ones in a file; [`finetune`] learns
//!   them from the Hadamard start.
//! - [`kernels`]: the operations behind the [`kernels::HackBackend`] extension trait: quantize +
//!   pack, and attention on the codes with Q and P quantized to 8 bits (both products from Eq. 4
//!   on the paper's axes; with the block scales folded into Q and P on the channel axes).
//! - [`homomorphic`]: the product of two quantized matrices from codes and correction terms (the
//!   oracle of spec §11).

pub mod cache;
mod config;
pub mod finetune;
pub mod homomorphic;
pub mod kernels;
pub mod quant;
pub mod rotation;

pub use cache::HackScheme;
pub use config::{Axes, HackConfig, HackConfigError, Preset, RotationSpec, Rounding, PRESETS};
