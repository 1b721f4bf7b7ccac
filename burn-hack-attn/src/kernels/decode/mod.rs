//! Fused decode attention (one query slot): the query quantization kernel, the decode kernel and
//! their launch; the reference is [`super::attention_reference`].

mod kernel;
mod launch;
mod query_kernel;

pub use kernel::DecodeGeometry;
pub use launch::{decode_chunk, decode_geometry, decode_launch};
