//! burn-million-pq's integration tests: the PQ cache, codebook fine-tuning, and the kernels on a
//! GPU backend.
//!
//! One test binary per crate, the files of `tests/` its modules: every binary links Burn and
//! instantiates its generic code again, so one binary instead of one per file builds much faster.

mod common;

mod attention_gpu;
mod cache;
mod encode_gpu;
mod finetune;
