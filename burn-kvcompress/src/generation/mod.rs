//! Text generation: prefill then decode through the KV cache, greedy or seeded sampling.

mod generate;
mod sampler;

pub use generate::{decode_batch, generate, generate_batch, Decoded, GenerateOptions, Generation};
pub use sampler::{Sampler, SamplingConfig};
