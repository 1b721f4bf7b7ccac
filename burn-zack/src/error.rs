//! Typed errors of the ZACK crate.

use std::path::PathBuf;

use burn_kvcompress::fingerprint::ModelFingerprint;

/// What can go wrong calibrating, saving, loading or applying ZACK rotations.
#[derive(Debug, thiserror::Error)]
pub enum ZackError {
    /// Fine-tuning cannot run on these samples or settings.
    #[error(transparent)]
    Finetune(#[from] burn_kvcompress::finetune::FinetuneError),
    /// A setting is out of range or does not fit the model.
    #[error("ZACK configuration: {0}")]
    Config(String),
    /// Calibration produced too little data, or data of the wrong shape.
    #[error("calibration: {0}")]
    Calibration(String),
    /// Reading or writing a rotation file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A rotation file is malformed.
    #[error("ZACK file {path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The rotations were calibrated on another model.
    #[error("rotations were calibrated on model {found}, not on this model ({expected})")]
    ModelMismatch {
        /// The model in use.
        expected: ModelFingerprint,
        /// The model the file names.
        found: ModelFingerprint,
    },
    /// The rotations do not fit the model's geometry (layers, heads, head dimension).
    #[error("rotations are for {found}, the model has {expected}")]
    GeometryMismatch {
        /// The model's geometry, in words.
        expected: String,
        /// The file's geometry, in words.
        found: String,
    },
}
