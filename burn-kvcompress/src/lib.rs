//! # burn-kvcompress
//!
//! The core of the burn-kvcompress family: the [`KvCache`](cache::KvCache) trait that every
//! compression scheme implements, the uncompressed [`DenseCache`](cache::DenseCache) baseline,
//! a Llama/Mistral [`CausalLm`](model::CausalLm) generic over the cache scheme, GGUF and
//! Hugging Face safetensors loading, the BPE tokenizer, generation, and the decode-perplexity
//! evaluation protocol.
//!
//! ```no_run
//! use burn_kvcompress::{backend::NdArray, cache::DenseScheme, loading::load_gguf_model};
//! let device = Default::default();
//! let loaded = load_gguf_model::<NdArray>("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref(), &device)?;
//! let mut cache = loaded.model.new_cache(&DenseScheme, 1, &device);
//! # Ok::<(), burn_kvcompress::error::LoadError>(())
//! ```

pub mod backend;
pub mod cache;
pub mod error;
pub mod eval;
pub mod finetune;
pub mod fingerprint;
pub mod generation;
pub mod gguf;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub mod kernels;
pub mod loading;
pub mod model;
pub mod paths;
pub mod tagged_file;
pub mod tokenizer;
