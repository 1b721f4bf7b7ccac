//! Rotary position embedding of a layer's queries and keys in one launch, in the "rotate half"
//! layout, with the orthogonal rotation per KV head that a cache may apply to both (HACK's)
//! in the same launch: the rows of one (batch row, KV head) stream rotated by their positions
//! as they are read, then multiplied by the stream's matrix, written as heads. Also the
//! multiplication alone, for rows already in heads.
//!
//! Burn's ops take about nine launches for the embedding of one tensor (a cast, two gathers of
//! the tables, four products, a sum, a difference and a concatenation), a product of the
//! expanded matrices and casts for the rotation, and a decode step is bound by launching them.
//! The arithmetic is the same as theirs, `x1 · cos − x2 · sin` and `x2 · cos + x1 · sin` in f32
//! on the same f32 tables (up to the compiler contracting a product and a sum into one fused
//! multiply-add: a difference of at most `2^-24 · (|x1 · cos| + |x2 · sin|)` per output), then
//! the product's f32 sums in the order of the channels' parts, rounded once to the output type.

mod kernel;
mod launch;

pub use launch::{rotary_applies, rotary_qk, rotate_heads_kernel};
