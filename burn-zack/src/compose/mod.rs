//! ZACK composed with a quantizer of the reduced dimensions: the rotations shorten each KV head's
//! keys and values, then a second scheme quantizes what is left.
//!
//! - [`ZackHackScheme`]: the reduced keys and values quantized as HACK quantizes a cache (2 or 4
//!   bits, partitions of Π, fp16 min/scale, cached code sums, values in closed blocks of Π slots
//!   with an f32 tail). Attention runs ZACK's attention on the dequantized operands: the products
//!   are not homomorphic (queries and probabilities stay f32), so its error is the quantization
//!   error of K/V alone.

mod hack_cache;
mod hack_scheme;
mod hack_state;

pub use hack_cache::ZackHackCache;
pub use hack_scheme::ZackHackScheme;
