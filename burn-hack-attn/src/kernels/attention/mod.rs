//! HACK attention: the tensor-op reference (any q_len).

mod reference;

pub use reference::{attention_reference, attention_reference_in_steps, CacheView};
