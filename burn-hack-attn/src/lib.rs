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
//!   correction terms (Eq. 4 summed over partitions), as a plain-tensor reference.
//!
//! Not yet: the K/V cache geometry (K per token in channel groups, V per channel in token groups),
//! summation and requantization elimination, attention, CubeCL kernels, the `KvScheme`.

mod config;
pub mod homomorphic;
pub mod quant;

pub use config::{HackConfig, HackConfigError, Rounding};
