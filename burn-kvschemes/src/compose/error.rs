//! Typed errors of the composed schemes.

use std::path::PathBuf;

use burn_million_pq::PqError;
use burn_zack::ZackError;

/// What can go wrong building a composed scheme, training its codebooks of the reduced
/// dimensions, or saving and loading them.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// The ZACK part failed (its rotations or ranks).
    #[error(transparent)]
    Zack(#[from] ZackError),
    /// Training codebooks of the reduced dimensions failed (too few calibration vectors).
    #[error(transparent)]
    Pq(#[from] PqError),
    /// A setting is out of range, or the two parts do not fit each other.
    #[error("composed scheme: {0}")]
    Config(String),
    /// Calibration recordings of the wrong count or shape.
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
    #[error("reduced codebooks file {path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}
