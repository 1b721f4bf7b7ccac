//! Quantize + pack of K rows and closed V blocks.

mod reference;

pub use reference::{quantize_reference, unpack_words};
