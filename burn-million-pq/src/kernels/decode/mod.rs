//! Fused lookup-table decode attention (one query slot): kernel and launch; the reference is
//! [`super::attention_reference`].

mod kernel;
mod launch;

pub use launch::{decode_launch, DECODE_CHUNK};
