//! Attention over f16 keys and values on tensor cores: flash-attention tiles for a prompt,
//! flash-decoding splits for a decode step. What the dense f16 cache runs on CUDA devices.
//!
//! The reference ([`attention_reference`](crate::cache::attention_reference)) materializes the
//! `[q_len × total_len]` f32 scores, a mask and the weights: 44 ms for an 8192-token prompt of
//! Llama-3-8B's 32 query / 8 KV heads on an H200, where PyTorch's SDPA takes 1.0 ms (this kernel:
//! 2.9), and for a decode step some twenty launches a layer. The keys and values are read in
//! place from a cache's buffers, which keep room for later slots (`cache::SlotBuffer`). Here the rows of one KV head (its group's query
//! heads, head-major) are taken in blocks: 64 per cube for a prompt (four warps of 16), 16 for a
//! decode step (one warp; the rows are the group's heads). A cube walks the keys in tiles of 64
//! slots, from the first slot any of its queries sees to its last query's own (the causal mask
//! skips the tiles past it; a sliding window and left padding, the tiles before); a decode step
//! deals those tiles to splits, one cube each, and merges their partials by log-sum-exp
//! ([`merge_partials`](crate::kernels::merge_partials)). Per tile:
//! 1. staging: the queries (times the softmax scale, rounded to f16) once, then each tile's keys
//!    and values, into shared memory in rows of 16-byte pieces, padded by one piece so that the
//!    eight rows an `ldmatrix` reads fall in distinct banks; a unit issues up to eight loads of
//!    keys and eight of values before it stores them (loads guarded one by one wait for each
//!    other: an 8K decode step's attention took 3.4–3.8× longer on an H200 that way);
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
//! `tests/integration/flash_attention_gpu.rs`).

// `#[cube]` expands each function into undocumented helper items.
#[allow(missing_docs)]
mod kernel;
mod launch;

pub use kernel::FlashGeometry;
pub use launch::{flash_attention, flash_geometry, MAX_HEAD_DIM};
