//! A prompt's causal attention over an f16 cache on tensor cores (flash-attention tiles), what
//! the dense f16 cache runs for a prompt on CUDA devices.
//!
//! The reference ([`attention_reference`](crate::cache::attention_reference)) materializes the
//! `[q_len × total_len]` f32 scores, a mask and the weights: 44 ms for an 8192-token prompt of
//! Llama-3-8B's 32 query / 8 KV heads on an H200, where PyTorch's SDPA takes 0.96 ms. Here a cube
//! takes 64 queries of one head (four warps of 16) and walks the keys in tiles of 64 slots, from
//! the first slot any of its queries sees to its last query's own (the causal mask skips the
//! tiles past it; a sliding window and left padding, the tiles before):
//! 1. staging: the queries (times the softmax scale, rounded to f16) once, then each tile's keys
//!    and values, into shared memory in rows of 16-byte pieces, padded by one piece so that the
//!    eight rows an `ldmatrix` reads fall in distinct banks;
//! 2. scores: `S = Q Kᵀ` in `16 × 8 × 16` warp products (`mma`) into f32, the query operands
//!    loaded once into registers, the key operands by `ldmatrix`;
//! 3. online softmax in registers: each query's reference max moves to the tile's (the four lanes
//!    holding a query's keys exchange theirs), the mass and value sums are rescaled, the scores
//!    become weights `exp(s − max)`; a tile that some query does not wholly see is masked first
//!    ([`slot_visible`](crate::kernels::slot_visible));
//! 4. values: `O += P V`, the weights (rounded to f16) as the `A` operands straight from the
//!    score accumulators' registers, the values loaded transposed by `ldmatrix`.
//!
//! Error bound against exact attention on the stored f16 keys and values: a query rounded to f16
//! moves each score by at most `δ = 2^-11 · scale · Σ_j |q_j k_j|`, so the weights by a factor
//! within `e^(±2δ)`; a weight rounded to f16 moves the output by at most `2^-11 · max|v|` (the
//! mass sums the unrounded weights); the f32 sums over `total_len` slots and `head_dim` channels
//! add at most `(total_len + head_dim) · 2^-24 · max|v|`. In all: `|o − o_exact| ≤ (e^(2δ_max) −
//! 1 + 2^-11 + (total_len + head_dim) · 2^-24) · max|v|` (tested in
//! `tests/integration/prompt_attention_gpu.rs`).

// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod kernel;
mod launch;

pub use kernel::PromptGeometry;
pub use launch::{prompt_attention, prompt_geometry, MAX_HEAD_DIM};
