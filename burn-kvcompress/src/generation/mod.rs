//! Text generation: prefill then decode through the KV cache, greedy or seeded sampling; the
//! admission of requests into a continuous batch under a KV memory budget.

mod admission;
mod generate;
mod sampler;

pub use admission::{Admission, AdmissionError};
pub use generate::{decode_batch, generate, generate_batch, Decoded, GenerateOptions, Generation};
pub use sampler::{Sampler, SamplingConfig};
