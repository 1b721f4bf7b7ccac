//! Per-head rotations: for every layer and KV head, an orthogonal `head_dim × head_dim` basis
//! for the query/key pair and one for the value/output-projection pair, with the singular values
//! that rank its directions.
//!
//! - `gram`: what calibration accumulates (Gram matrices of post-RoPE Q, K and of V).
//! - [`file`]: rotations as safetensors tagged with the model's fingerprint.

mod calibrate;
mod config;
mod file;
mod gram;

pub use calibrate::calibrate_rotations;
pub use config::{BlockWeighting, Centering, RotationConfig, ValueSamples};
pub use gram::{GramAccumulator, Moments};

use std::fmt;

use burn_kvcompress::{fingerprint::ModelFingerprint, model::ModelConfig};
use sha2::{Digest, Sha256};

use crate::ZackError;

/// The model dimensions rotations are computed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotationGeometry {
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (one rotation per KV head and pair).
    pub kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
}

impl RotationGeometry {
    /// The geometry of a model.
    pub fn of_model(config: &ModelConfig) -> Self {
        Self {
            layers: config.num_layers,
            heads: config.num_heads,
            kv_heads: config.num_kv_heads,
            head_dim: config.head_dim,
        }
    }

    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

impl fmt::Display for RotationGeometry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} layers x {} query / {} KV heads x head_dim {}",
            self.layers, self.heads, self.kv_heads, self.head_dim
        )
    }
}

/// Which pair of tensors a rotation serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pair {
    /// Queries and keys (applied online after RoPE: `q̃ = q R̃`, `k̃ = k R̃`).
    QueryKey,
    /// Values and the output projection (folded into `W_V` and `W_O`).
    ValueOutput,
}

impl Pair {
    /// Both pairs.
    pub const ALL: [Pair; 2] = [Pair::QueryKey, Pair::ValueOutput];

    /// Short name used in files and reports: `qk` or `vo`.
    pub fn name(self) -> &'static str {
        match self {
            Self::QueryKey => "qk",
            Self::ValueOutput => "vo",
        }
    }
}

/// One head's rotation for one pair.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadRotation {
    /// `head_dim × head_dim`, row-major; column `j` is the `j`-th direction (orthonormal columns,
    /// sorted by singular value, largest first).
    pub basis: Vec<f32>,
    /// The `head_dim` singular values of the (weighted) stacked samples, descending.
    pub singular_values: Vec<f32>,
    /// The calibration mean, `head_dim` long in the original coordinates, of the keys (query/key
    /// pair) or of the value samples (value/output pair; see
    /// [`ValueSamples`]). Folding sets the dropped value coordinates of attention outputs to it
    /// through the output projection's bias.
    pub mean: Vec<f32>,
}

impl HeadRotation {
    /// Dimension of the head.
    pub fn head_dim(&self) -> usize {
        self.singular_values.len()
    }

    /// The first `rank` columns of the basis, `head_dim × rank` row-major: `R̃` of the paper.
    pub fn truncated_basis(&self, rank: usize) -> Vec<f32> {
        let d = self.head_dim();
        assert!(rank <= d, "rank {rank} beyond head_dim {d}");
        self.basis.chunks_exact(d).flat_map(|row| row[..rank].iter().copied()).collect()
    }

    /// The share of the singular-value sum that keeping `rank` directions removes (Eq. 6 of the
    /// paper, on σ rather than σ²): `Σ_{j ≥ rank} σ_j / Σ_j σ_j` (0 when all σ are 0).
    pub fn removed_share(&self, rank: usize) -> f64 {
        let total: f64 = self.singular_values.iter().map(|&s| f64::from(s)).sum();
        if total <= 0.0 {
            return 0.0;
        }
        self.singular_values[rank..].iter().map(|&s| f64::from(s)).sum::<f64>() / total
    }
}

/// Rotations for a whole model, as calibration produced them.
#[derive(Debug, Clone, PartialEq)]
pub struct Rotations {
    /// The model dimensions.
    pub geometry: RotationGeometry,
    /// The model they were calibrated on.
    pub model: ModelFingerprint,
    /// How the stacked sample matrices were weighted and centered.
    pub config: RotationConfig,
    /// What they were calibrated on (free text).
    pub calibration: String,
    /// `[layer][kv_head]` rotations of the query/key pair.
    pub query_key: Vec<Vec<HeadRotation>>,
    /// `[layer][kv_head]` rotations of the value/output pair.
    pub value_output: Vec<Vec<HeadRotation>>,
}

impl Rotations {
    /// The rotation of `pair` for (`layer`, `kv_head`).
    pub fn head(&self, pair: Pair, layer: usize, kv_head: usize) -> &HeadRotation {
        match pair {
            Pair::QueryKey => &self.query_key[layer][kv_head],
            Pair::ValueOutput => &self.value_output[layer][kv_head],
        }
    }

    /// SHA-256 over the configuration and every basis and singular value: the identity that caches
    /// and transfers check.
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.config.to_string().as_bytes());
        for layer in self.query_key.iter().chain(&self.value_output) {
            for head in layer {
                for x in head.basis.iter().chain(&head.singular_values).chain(&head.mean) {
                    hasher.update(x.to_le_bytes());
                }
            }
        }
        hasher.finalize().into()
    }

    /// Checks that these rotations were calibrated on `model` with `config`'s dimensions.
    pub fn check_model(&self, model: ModelFingerprint, config: &ModelConfig) -> Result<(), ZackError> {
        if self.model != model {
            return Err(ZackError::ModelMismatch { expected: model, found: self.model });
        }
        let expected = RotationGeometry::of_model(config);
        if self.geometry != expected {
            return Err(ZackError::GeometryMismatch {
                expected: expected.to_string(),
                found: self.geometry.to_string(),
            });
        }
        Ok(())
    }

    /// Checks that every head has a `head_dim²` basis and `head_dim` singular values, for every
    /// layer and KV head of the geometry.
    pub(crate) fn check_shapes(&self) -> Result<(), String> {
        let g = self.geometry;
        if g.kv_heads == 0 || !g.heads.is_multiple_of(g.kv_heads) || g.head_dim == 0 {
            return Err(format!("invalid geometry {g}"));
        }
        for pair in Pair::ALL {
            let layers = match pair {
                Pair::QueryKey => &self.query_key,
                Pair::ValueOutput => &self.value_output,
            };
            if layers.len() != g.layers || layers.iter().any(|l| l.len() != g.kv_heads) {
                return Err(format!("{} rotations do not cover {g}", pair.name()));
            }
            for head in layers.iter().flatten() {
                if head.basis.len() != g.head_dim * g.head_dim
                    || head.singular_values.len() != g.head_dim
                    || head.mean.len() != g.head_dim
                {
                    return Err(format!("a {} rotation is not {0}x{0}", g.head_dim));
                }
            }
        }
        Ok(())
    }
}
