//! # burn-million-pq
//!
//! MILLION (Wang et al., DAC'25): the KV cache as product-quantization codes, attention by
//! lookup tables of query-centroid products, a recent window kept in full precision.
//!
//! - [`PqConfig`]: subspaces, bits per code, codebook scope; [`KmeansConfig`]: training.
//! - [`codebook`]: k-means codebook training on calibration samples (recorded by the core's
//!   `RecordingScheme`), saved as safetensors tagged with the model's fingerprint.
//! - [`cache::PqScheme`]: the `KvScheme` (codebooks + window) the models and CLIs use, with a
//!   transferable state.
//! - [`finetune`]: the codebooks refined from k-means by autodiff on the attention-output error.
//! - [`kernels`]: the [`PqBackend`](kernels::PqBackend) trait with tensor-op references and
//!   CubeCL kernels (encode, fused decode attention) on wgpu and cuda.

pub mod cache;
pub mod codebook;
mod config;
mod error;
pub mod finetune;
pub mod kernels;

pub use config::{CodebookScope, KmeansConfig, PqConfig};
pub use error::PqError;
