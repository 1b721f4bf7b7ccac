//! burn-hack-attn's integration tests: the HACK caches against independent computations, the
//! homomorphic oracle, fine-tuning, and the kernels on a GPU backend.
//!
//! One test binary per crate, the files of `tests/` its modules: every binary links Burn and
//! instantiates its generic code again, so one binary instead of one per file builds much faster.

mod kernel_inputs;

mod attention_gpu;
mod cache;
mod channel;
mod channel_gpu;
mod finetune;
mod homomorphic_oracle;
mod quantize_gpu;
mod rotate_gpu;
