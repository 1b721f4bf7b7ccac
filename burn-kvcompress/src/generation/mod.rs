//! Text generation: prefill then decode through the KV cache, greedy or seeded sampling.

mod generate;
mod sampler;

pub use generate::{generate, generate_batch, GenerateOptions, Generation};
pub use sampler::{Sampler, SamplingConfig};
