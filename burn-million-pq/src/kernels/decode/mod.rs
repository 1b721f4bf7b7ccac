//! Fused lookup-table decode attention (one query slot): the table kernel, the attention kernel
//! and their launch; the reference is [`super::attention_reference`].

mod kernel;
mod launch;
mod table;

pub use launch::{decode_geometry, decode_launch, pq_shape, split_chunk, supports};
