//! burn-kvcompress's integration tests: the model, its loaders and tokenizer against references,
//! the dense caches, and the shared kernels on a GPU backend.
//!
//! One test binary per crate, the files of `tests/` its modules: every binary links Burn and
//! instantiates its generic code again, so one binary instead of one per file builds much faster.

mod common;

mod attention;
mod buffers_gpu;
mod cache_state;
mod dense_half;
mod flash_attention_gpu;
mod gguf_dequant;
mod gguf_malformed;
mod gguf_model;
mod hf_tiny_reference;
mod load_errors;
mod merge_gpu;
mod model_ops_gpu;
mod model_precision;
mod prefill_decode;
mod ragged_batch;
mod rotary_gpu;
mod row_product_gpu;
mod slot_buffer;
mod smollm2_perplexity;
mod smollm2_reference;
mod state_upload_gpu;
mod tokenizer_api;
mod tokenizer_chat;
mod tokenizer_reference;
mod wgpu_backend;
