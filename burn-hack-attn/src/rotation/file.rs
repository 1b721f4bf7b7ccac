//! Learned rotations as a safetensors file.
//!
//! Tensors `layer.{l}.key` and `layer.{l}.value` (f32 `[kv_heads, head_dim, head_dim]`, each
//! head's matrix row-major). Header metadata: `format` = `burn-kvcompress/hack-rotations`,
//! `version` = `1`, `model_sha256`, `layers`, `kv_heads`, `head_dim` and `training` (free text:
//! how they were made).

use std::path::{Path, PathBuf};

use burn_kvcompress::{
    fingerprint::ModelFingerprint,
    tagged_file::{serialize_tagged, NamedTensor, TaggedFile},
};

use super::{HackRotations, RotationShape};

const FORMAT: &str = "burn-kvcompress/hack-rotations";
const VERSION: &str = "1";
/// The largest `|Rᵀ R − I|` entry a file's matrices may have: f32 rounding of trained
/// orthogonal matrices stays far below it, anything above is not a rotation.
const ORTHOGONALITY_TOLERANCE: f64 = 1e-3;

/// A rotation file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RotationFileError {
    /// The file system refused.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a rotation file of this format, or its contents are inconsistent.
    #[error("{path}: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Learned rotations with the model they were trained on and how.
#[derive(Debug, Clone, PartialEq)]
pub struct RotationFile {
    /// The rotations.
    pub rotations: HackRotations,
    /// The model's fingerprint.
    pub model: ModelFingerprint,
    /// How they were trained (free text).
    pub training: String,
}

fn tensor_name(layer: usize, role: &str) -> String {
    format!("layer.{layer}.{role}")
}

impl RotationFile {
    /// Writes the file to `path`.
    pub fn save(&self, path: &Path) -> Result<(), RotationFileError> {
        let s = self.rotations.shape;
        let shape = vec![s.kv_heads, s.head_dim, s.head_dim];
        let tensors: Vec<NamedTensor> = (0..s.layers)
            .flat_map(|l| {
                [("key", &self.rotations.keys[l]), ("value", &self.rotations.values[l])].map(|(role, values)| {
                    NamedTensor { name: tensor_name(l, role), shape: shape.clone(), values: values.clone() }
                })
            })
            .collect();
        let metadata = vec![
            ("model_sha256", self.model.to_hex()),
            ("layers", s.layers.to_string()),
            ("kv_heads", s.kv_heads.to_string()),
            ("head_dim", s.head_dim.to_string()),
            ("training", self.training.clone()),
        ];
        let format_error = |reason| RotationFileError::Format { path: path.to_path_buf(), reason };
        let bytes = serialize_tagged(FORMAT, VERSION, metadata, &tensors).map_err(format_error)?;
        std::fs::write(path, bytes).map_err(|source| RotationFileError::Io { path: path.to_path_buf(), source })
    }

    /// Reads a file written by [`save`](Self::save), checking every field, shape and that each
    /// matrix is orthogonal.
    pub fn load(path: &Path) -> Result<Self, RotationFileError> {
        let bytes = std::fs::read(path).map_err(|source| RotationFileError::Io { path: path.to_path_buf(), source })?;
        Self::from_bytes(&bytes).map_err(|reason| RotationFileError::Format { path: path.to_path_buf(), reason })
    }

    /// Parses a rotation file's bytes (what [`load`](Self::load) reads), checking every field,
    /// shape and orthogonality; why they are refused, as text (`load` adds the path).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let file = TaggedFile::parse(bytes, FORMAT, VERSION)?;
        let model =
            ModelFingerprint::from_hex(file.get("model_sha256")?).ok_or("metadata `model_sha256` is malformed")?;
        let shape = RotationShape {
            layers: file.number("layers")?,
            kv_heads: file.number("kv_heads")?,
            head_dim: file.number("head_dim")?,
        };
        if ![shape.layers, shape.kv_heads, shape.head_dim].into_iter().all(|n| (1..=4096).contains(&n)) {
            return Err(format!("implausible shape {shape}"));
        }
        let dims = [shape.kv_heads, shape.head_dim, shape.head_dim];
        let role = |role: &str| -> Result<Vec<Vec<f32>>, String> {
            (0..shape.layers).map(|l| file.f32_tensor(&tensor_name(l, role), &dims)).collect()
        };
        let rotations = HackRotations { shape, keys: role("key")?, values: role("value")? };
        let error = rotations.orthogonality_error();
        if error.is_nan() || error > ORTHOGONALITY_TOLERANCE {
            return Err(format!("the matrices are not orthogonal (|R Rᵀ − I| up to {error})"));
        }
        Ok(Self { rotations, model, training: file.get("training")?.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> RotationFile {
        let shape = RotationShape { layers: 2, kv_heads: 2, head_dim: 16 };
        RotationFile {
            rotations: HackRotations::hadamard(shape, 5).unwrap(),
            model: ModelFingerprint::of_bytes(b"model"),
            training: "test".into(),
        }
    }

    #[test]
    fn round_trips_and_refuses_what_is_not_a_rotation() {
        let dir = std::env::temp_dir().join(format!("hack-rot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rot.safetensors");
        let original = file();
        original.save(&path).unwrap();
        assert_eq!(RotationFile::load(&path).unwrap(), original);

        let mut skewed = original.clone();
        skewed.rotations.keys[1][3] += 0.1;
        skewed.save(&path).unwrap();
        assert!(matches!(RotationFile::load(&path), Err(RotationFileError::Format { .. })));
        std::fs::write(&path, b"not safetensors").unwrap();
        assert!(matches!(RotationFile::load(&path), Err(RotationFileError::Format { .. })));
        assert!(matches!(RotationFile::load(&dir.join("missing")), Err(RotationFileError::Io { .. })));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
