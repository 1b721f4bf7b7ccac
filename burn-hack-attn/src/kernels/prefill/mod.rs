//! Fused prefill attention (many query slots): kernel and launch; the reference is
//! [`super::attention_reference`].

mod kernel;
mod launch;

pub use kernel::PrefillGeometry;
pub use launch::{prefill_geometry, prefill_launch};
