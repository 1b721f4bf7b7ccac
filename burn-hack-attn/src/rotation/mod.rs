//! HACK's rotations: one orthogonal matrix per layer and KV head for the queries and keys
//! (applied after RoPE, in the cache) and one for the values (folded into `W_V` and `W_O`).
//!
//! A rotation spreads an outlier channel's energy over every channel, so the channel groups of
//! per-token codes (values, and the paper's keys) no longer spend their range on it, and the
//! per-channel key ranges become alike. `q kᵀ = (q R)(k R)ᵀ` exactly, so only quantization sees
//! the difference.

mod file;
mod hadamard;

/// Rotation per KV head of queries, keys or values in heads (the model crate's, which applies HACK's
/// rotation of queries and keys with RoPE).
pub use burn_kvcompress::model::rotate_heads;
pub use file::{RotationFile, RotationFileError};
pub use hadamard::{hadamard_rotation, is_power_of_two};

use burn::tensor::{backend::Backend, Tensor, TensorData};
use burn_kvcompress::finetune::{orthogonality_error, SampleShape};

/// Which of a head's two rotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationRole {
    /// Queries and keys (after RoPE).
    Key,
    /// Values (folded into the weights).
    Value,
}

/// The shape of a model's attention, as far as its rotations go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RotationShape {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads per layer.
    pub kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
}

impl From<SampleShape> for RotationShape {
    /// The shape of the model that recorded fine-tuning samples of `shape`.
    fn from(shape: SampleShape) -> Self {
        Self { layers: shape.layers, kv_heads: shape.kv_heads, head_dim: shape.head_dim }
    }
}

impl std::fmt::Display for RotationShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} layers × {} KV heads × {} channels", self.layers, self.kv_heads, self.head_dim)
    }
}

/// Every layer's and KV head's key and value rotation, row-major `head_dim × head_dim` matrices
/// (`x ↦ x R`).
#[derive(Debug, Clone, PartialEq)]
pub struct HackRotations {
    /// The shape they are for.
    pub shape: RotationShape,
    /// Per layer, `[kv_heads, head_dim, head_dim]` flattened: the query/key rotations.
    pub keys: Vec<Vec<f32>>,
    /// Per layer, the same for the values.
    pub values: Vec<Vec<f32>>,
}

impl HackRotations {
    /// Randomized Walsh–Hadamard rotations for `shape` from `seed` (`head_dim` a power of two).
    pub fn hadamard(shape: RotationShape, seed: u64) -> Option<Self> {
        let per_layer = |role| -> Option<Vec<Vec<f32>>> {
            (0..shape.layers)
                .map(|layer| {
                    let heads = (0..shape.kv_heads).map(|h| hadamard_rotation(shape.head_dim, seed, layer, h, role));
                    heads.collect::<Option<Vec<Vec<f32>>>>().map(|m| m.concat())
                })
                .collect()
        };
        Some(Self { shape, keys: per_layer(RotationRole::Key)?, values: per_layer(RotationRole::Value)? })
    }

    /// Layer `layer`'s rotations of `role` as a `[kv_heads, head_dim, head_dim]` tensor.
    pub fn tensor<B: Backend>(&self, role: RotationRole, layer: usize, device: &B::Device) -> Tensor<B, 3> {
        let RotationShape { kv_heads, head_dim, .. } = self.shape;
        let data = match role {
            RotationRole::Key => &self.keys[layer],
            RotationRole::Value => &self.values[layer],
        };
        Tensor::from_data(TensorData::new(data.clone(), [kv_heads, head_dim, head_dim]), device)
    }

    /// The largest `|Rᵀ R − I|` entry over every matrix (0 up to rounding for rotations).
    pub fn orthogonality_error(&self) -> f64 {
        let d = self.shape.head_dim;
        let matrices = self.keys.iter().chain(&self.values).flat_map(|layer| layer.chunks_exact(d * d));
        matrices.map(|r| orthogonality_error(r, d)).fold(0.0, f64::max)
    }
}
