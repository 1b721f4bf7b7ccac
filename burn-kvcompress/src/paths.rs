//! Where downloaded models live on disk.

use std::path::PathBuf;

/// File name of the default model, SmolLM2-135M-Instruct quantized to Q4_1.
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The directory that holds downloaded models: `$KVC_CACHE_DIR`, else
/// `$HOME/.cache/burn-kvcompress/models`. It is outside the repository on purpose: model weights
/// are never committed.
pub fn model_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KVC_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("burn-kvcompress").join("models")
}

/// The default model file: `$KVC_MODEL` if set, else [`DEFAULT_MODEL_FILE`] in
/// [`model_cache_dir`]. `cargo xtask fetch-model` puts it there.
pub fn default_model_path() -> PathBuf {
    match std::env::var_os("KVC_MODEL") {
        Some(path) => PathBuf::from(path),
        None => model_cache_dir().join(DEFAULT_MODEL_FILE),
    }
}
