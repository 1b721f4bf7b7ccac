//! Lookup-table attention over PQ codes and the recent window: the tensor-op reference (the
//! implementation on non-Cube backends and for several query slots everywhere).

mod reference;

pub use reference::{attention_reference, lut_scores, reconstruct};
