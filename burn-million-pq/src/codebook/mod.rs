//! Codebooks: what they hold, how they are trained (k-means on calibration samples) and how they
//! are stored (safetensors tagged with the model's fingerprint and the configuration).

mod book;
mod file;
mod kmeans;
mod nearest;
mod train;

pub use book::{CodebookGeometry, Codebooks, KvKind};
pub use kmeans::{kmeans, KmeansResult};
pub use nearest::nearest_centroid;
pub use train::{
    fit_subspaces, pooled_relative_error, train_codebooks, CalibrationSamples, SubspaceFit, TrainingReport,
};
