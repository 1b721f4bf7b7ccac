//! Fused decode attention (one query slot): kernel and launch; the reference is
//! [`super::attention_reference`].

mod kernel;
mod launch;

pub use kernel::DecodeGeometry;
pub use launch::{decode_chunk, decode_geometry, decode_launch};
