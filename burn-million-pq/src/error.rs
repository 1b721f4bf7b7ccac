//! Typed errors of the PQ crate.

use std::path::PathBuf;

use burn_kvcompress::fingerprint::ModelFingerprint;

/// What can go wrong configuring, training, saving or loading product quantizers.
#[derive(Debug, thiserror::Error)]
pub enum PqError {
    /// Fine-tuning cannot run on these samples or settings.
    #[error(transparent)]
    Finetune(#[from] burn_kvcompress::finetune::FinetuneError),
    /// The configuration is invalid or does not fit the model.
    #[error("PQ configuration: {0}")]
    Config(String),
    /// Calibration produced too little data, or data of the wrong shape.
    #[error("calibration: {0}")]
    Calibration(String),
    /// Reading or writing a codebook file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A codebook file is malformed.
    #[error("codebook file {path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The codebooks were calibrated on another model.
    #[error("codebooks were calibrated on model {found}, not on this model ({expected})")]
    ModelMismatch {
        /// The model in use.
        expected: ModelFingerprint,
        /// The model the file names.
        found: ModelFingerprint,
    },
    /// The codebooks do not fit the model's geometry (layers, KV heads, head dimension).
    #[error("codebooks are for {found}, the model has {expected}")]
    GeometryMismatch {
        /// The model's geometry, in words.
        expected: String,
        /// The file's geometry, in words.
        found: String,
    },
}
