//! Fused decode attention (one query slot): the query quantization kernel, the decode kernel,
//! the steps they share, and their launch; the reference is [`super::attention_reference`].

mod kernel;
mod launch;
mod query_kernel;
mod steps;

pub use kernel::DecodeGeometry;
pub use launch::{decode_chunk, decode_geometry, decode_launch};
