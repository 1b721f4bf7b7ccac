//! Hugging Face checkpoints: `config.json` (transformers 4.x `rope_theta` or 5.x
//! `rope_parameters`) and `model.safetensors`.

use std::path::Path;

use safetensors::{tensor::Dtype, SafeTensors};
use serde::Deserialize;

use super::{HostTensor, WeightSource};
use crate::{
    error::LoadError,
    gguf::{dequantize, GgmlType},
    model::{Architecture, ModelConfig},
};

/// RoPE settings of transformers 5.x (`rope_parameters`).
#[derive(Debug, Deserialize)]
struct RopeParameters {
    rope_theta: Option<f32>,
    rope_type: Option<String>,
}

/// The subset of `config.json` that Llama and Mistral use.
#[derive(Debug, Deserialize)]
struct HfConfig {
    model_type: String,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rope_theta: Option<f32>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    rms_norm_eps: f64,
    #[serde(default)]
    tie_word_embeddings: bool,
    sliding_window: Option<usize>,
    max_position_embeddings: usize,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    hidden_act: Option<String>,
}

/// Parses a `config.json` text into a [`ModelConfig`].
pub fn parse_hf_config(json: &str, path: &Path) -> Result<ModelConfig, LoadError> {
    let hf: HfConfig =
        serde_json::from_str(json).map_err(|source| LoadError::Json { path: path.to_path_buf(), source })?;
    let architecture = match hf.model_type.as_str() {
        "llama" => Architecture::Llama,
        "mistral" => Architecture::Mistral,
        other => return Err(LoadError::UnsupportedArchitecture(other.to_string())),
    };
    let unsupported = |what: String| Err(LoadError::InvalidConfig(what));
    if hf.attention_bias || hf.mlp_bias {
        return unsupported("attention/MLP biases are not supported".into());
    }
    if let Some(act) = hf.hidden_act.as_deref().filter(|a| *a != "silu") {
        return unsupported(format!("activation `{act}` is not supported (only silu)"));
    }
    if hf.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
        return unsupported("rope_scaling is not supported".into());
    }
    let params = hf.rope_parameters.as_ref();
    if let Some(kind) = params.and_then(|p| p.rope_type.as_deref()).filter(|t| *t != "default") {
        return unsupported(format!("rope_type `{kind}` is not supported"));
    }
    let rope_theta = params.and_then(|p| p.rope_theta).or(hf.rope_theta).unwrap_or(10_000.0);
    let head_dim = hf.head_dim.unwrap_or(hf.hidden_size / hf.num_attention_heads.max(1));
    Ok(ModelConfig {
        architecture,
        vocab_size: hf.vocab_size,
        hidden_size: hf.hidden_size,
        intermediate_size: hf.intermediate_size,
        num_layers: hf.num_hidden_layers,
        num_heads: hf.num_attention_heads,
        num_kv_heads: hf.num_key_value_heads.unwrap_or(hf.num_attention_heads),
        head_dim,
        rope_theta,
        rms_norm_eps: hf.rms_norm_eps,
        tie_embeddings: hf.tie_word_embeddings,
        sliding_window: match architecture {
            Architecture::Mistral => hf.sliding_window,
            Architecture::Llama => None,
        },
        max_position: hf.max_position_embeddings,
    })
}

/// Reads and parses a `config.json` file.
pub fn hf_model_config(path: &Path) -> Result<ModelConfig, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
    parse_hf_config(&text, path)
}

/// The tensors of a `model.safetensors` file, kept as the file's bytes and decoded to f32 (by the
/// same decoder as GGUF's float tensors) when a weight is asked for.
pub struct SafetensorsWeights {
    bytes: Vec<u8>,
}

fn ggml_type(dtype: Dtype) -> Option<GgmlType> {
    match dtype {
        Dtype::F32 => Some(GgmlType::F32),
        Dtype::F16 => Some(GgmlType::F16),
        Dtype::BF16 => Some(GgmlType::BF16),
        _ => None,
    }
}

fn malformed(e: impl std::fmt::Display) -> LoadError {
    LoadError::Safetensors(e.to_string())
}

impl SafetensorsWeights {
    /// Reads a safetensors file; F32, F16 and BF16 tensors are accepted.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io { path: path.to_path_buf(), source })?;
        Self::from_vec(bytes)
    }

    /// Parses safetensors bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, LoadError> {
        Self::from_vec(bytes.to_vec())
    }

    /// Validates the header and every tensor's dtype, then keeps the bytes.
    fn from_vec(bytes: Vec<u8>) -> Result<Self, LoadError> {
        let file = SafeTensors::deserialize(&bytes).map_err(malformed)?;
        for (name, view) in file.tensors() {
            if ggml_type(view.dtype()).is_none() {
                return Err(LoadError::UnsupportedDtype { name, dtype: format!("{:?}", view.dtype()) });
            }
        }
        Ok(Self { bytes })
    }

    fn file(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("validated when opened")
    }
}

impl WeightSource for SafetensorsWeights {
    fn get(&self, name: &str) -> Result<HostTensor, LoadError> {
        let file = self.file();
        let view = file.tensor(name).map_err(|_| LoadError::MissingWeight(name.to_string()))?;
        let shape = view.shape().to_vec();
        let ty = ggml_type(view.dtype()).expect("dtypes validated when opened");
        let values = dequantize(ty, view.data(), shape.iter().product()).map_err(malformed)?;
        Ok(HostTensor { values, shape })
    }

    fn contains(&self, name: &str) -> bool {
        self.file().tensor(name).is_ok()
    }
}
