//! Model loading: GGUF (llama.cpp) files and Hugging Face `config.json` + `model.safetensors`.
//!
//! Both formats go through one [`WeightSource`] that serves weights under their Hugging Face
//! names, row-major `[out, in]`, as f32; [`build_model`] assembles the model from it.
//! [`RandomWeights`] serves random weights of a configuration's shapes (speed measurements).

mod build;
mod gguf_source;
mod hf;
mod random;
mod weights;

pub use build::build_model;
pub use gguf_source::{gguf_model_config, GgufWeights};
pub use hf::{hf_model_config, parse_hf_config, SafetensorsWeights};
pub use random::RandomWeights;
pub use weights::{HostTensor, WeightSource};

use std::path::Path;

use burn::tensor::backend::Backend;

use crate::{error::LoadError, gguf::GgufFile, model::CausalLm, tokenizer::Tokenizer};

/// A loaded model with its tokenizer (when the files carry one).
#[derive(Debug)]
pub struct LoadedModel<B: Backend> {
    /// The model.
    pub model: CausalLm<B>,
    /// The tokenizer, if the files define one.
    pub tokenizer: Option<Tokenizer>,
}

/// Loads a Llama/Mistral GGUF file (weights dequantized to f32) and its tokenizer.
pub fn load_gguf_model<B: Backend>(path: &Path, device: &B::Device) -> Result<LoadedModel<B>, LoadError> {
    let file = GgufFile::open(path)?;
    let config = gguf_model_config(&file)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    let model = build_model(config.clone(), &GgufWeights::new(&file, &config), device)?;
    Ok(LoadedModel { model, tokenizer: Some(tokenizer) })
}

/// Loads a Hugging Face checkpoint directory (`config.json`, `model.safetensors` and, if present,
/// `tokenizer.json`).
pub fn load_hf_model<B: Backend>(dir: &Path, device: &B::Device) -> Result<LoadedModel<B>, LoadError> {
    let config = hf_model_config(&dir.join("config.json"))?;
    let weights = SafetensorsWeights::open(&dir.join("model.safetensors"))?;
    let model = build_model(config, &weights, device)?;
    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer = match tokenizer_path.exists() {
        true => Some(Tokenizer::from_json_file(&tokenizer_path)?),
        false => None,
    };
    Ok(LoadedModel { model, tokenizer })
}

/// Loads a model from a `.gguf` file or a Hugging Face directory, whichever `path` is.
pub fn load_model<B: Backend>(path: &Path, device: &B::Device) -> Result<LoadedModel<B>, LoadError> {
    if path.is_dir() {
        load_hf_model(path, device)
    } else {
        load_gguf_model(path, device)
    }
}
