//! # burn-hack-attn
//!
//! HACK (homomorphic quantization for attention over a 2-bit KV cache), after the paper and
//! `shared/specs/hack.md`.
//!
//! **Status: building blocks only; issue 3 is open.** What exists and is tested:
//! - [`HackConfig`]: bits (2 or 4 for K/V, 8 for Q/P), partition size Π, rounding mode;
//! - [`quant`]: asymmetric min/max quantization of one partition (round-to-nearest or seeded
//!   stochastic rounding; degenerate partitions; clamping), fp16 metadata, and bit-packing;
//! - [`homomorphic`]: the product of two quantized matrices computed from their codes and
//!   correction terms (Eq. 4 summed over partitions), as a plain-tensor reference;
//! - [`store`]: one (sequence, KV head) stream in the paper's geometry: K per token in channel
//!   groups, V per channel in blocks of Π tokens with a float tail until a block fills
//!   (requantization elimination), cached code sums (summation elimination), packed codes, and
//!   the byte count per token.
//!
//! Not yet: attention over the stores (Q/P quantization, the homomorphic QKᵀ and PV with the
//! tail), CubeCL kernels, the `KvScheme` for the models and CLIs, evaluation and benchmarks.

mod config;
pub mod homomorphic;
pub mod quant;
pub mod store;

pub use config::{HackConfig, HackConfigError, Rounding};
