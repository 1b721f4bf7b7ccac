//! Codebooks as a safetensors file.
//!
//! Tensors `layer.{l}.key` and `layer.{l}.value`, f32, `[groups, subspaces, centroids, sub_dim]`.
//! Header metadata: `format` = `burn-kvcompress/pq-codebooks`, `version` = `1`, `model_sha256`
//! (64 hex digits), `config` ([`PqConfig`]'s text form), `layers`, `kv_heads`, `head_dim`, and
//! `calibration` (free text: what the codebooks were trained on).

use std::path::Path;

use burn_kvcompress::{
    fingerprint::ModelFingerprint,
    tagged_file::{serialize_tagged, NamedTensor, TaggedFile},
};

use super::{CodebookGeometry, Codebooks, KvKind};
use crate::{PqConfig, PqError};

const FORMAT: &str = "burn-kvcompress/pq-codebooks";
const VERSION: &str = "1";

fn tensor_name(layer: usize, kind: KvKind) -> String {
    format!("layer.{layer}.{}", kind.name())
}

impl Codebooks {
    /// Writes the codebooks to `path`.
    pub fn save(&self, path: &Path) -> Result<(), PqError> {
        let format_error = |reason: String| PqError::Format { path: path.to_path_buf(), reason };
        self.check_shapes().map_err(format_error)?;
        let shape = self.shape().to_vec();
        let tensors: Vec<NamedTensor> = (0..self.geometry.layers)
            .flat_map(|layer| [KvKind::Key, KvKind::Value].map(|kind| (layer, kind)))
            .map(|(layer, kind)| NamedTensor {
                name: tensor_name(layer, kind),
                shape: shape.clone(),
                values: self.layer(layer, kind).to_vec(),
            })
            .collect();
        let metadata = vec![
            ("model_sha256", self.model.to_hex()),
            ("config", self.config.to_string()),
            ("layers", self.geometry.layers.to_string()),
            ("kv_heads", self.geometry.kv_heads.to_string()),
            ("head_dim", self.geometry.head_dim.to_string()),
            ("calibration", self.calibration.clone()),
        ];
        let bytes = serialize_tagged(FORMAT, VERSION, metadata, &tensors).map_err(format_error)?;
        std::fs::write(path, bytes).map_err(|source| PqError::Io { path: path.to_path_buf(), source })
    }

    /// Reads codebooks written by [`save`](Self::save), checking every field and shape.
    pub fn load(path: &Path) -> Result<Self, PqError> {
        let bytes = std::fs::read(path).map_err(|source| PqError::Io { path: path.to_path_buf(), source })?;
        Self::from_bytes(&bytes).map_err(|reason| PqError::Format { path: path.to_path_buf(), reason })
    }

    /// Parses a codebook file's bytes (what [`load`](Self::load) reads), checking every field
    /// and shape; why they are refused, as text (`load` adds the path).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let file = TaggedFile::parse(bytes, FORMAT, VERSION)?;
        let model =
            ModelFingerprint::from_hex(file.get("model_sha256")?).ok_or("metadata `model_sha256` is malformed")?;
        let config: PqConfig = file.get("config")?.parse().map_err(|e: PqError| e.to_string())?;
        let geometry = CodebookGeometry {
            layers: file.number("layers")?,
            kv_heads: file.number("kv_heads")?,
            head_dim: file.number("head_dim")?,
        };
        config.validate(geometry.head_dim).map_err(|e| e.to_string())?;
        if geometry.layers == 0 || geometry.kv_heads == 0 || geometry.layers > 4096 || geometry.kv_heads > 4096 {
            return Err(format!("implausible geometry {geometry}"));
        }
        let mut books = Self {
            config,
            geometry,
            model,
            calibration: file.get("calibration")?.to_string(),
            keys: Vec::new(),
            values: Vec::new(),
        };
        let shape = books.shape();
        for layer in 0..geometry.layers {
            books.keys.push(file.f32_tensor(&tensor_name(layer, KvKind::Key), &shape)?);
            books.values.push(file.f32_tensor(&tensor_name(layer, KvKind::Value), &shape)?);
        }
        books.check_shapes()?;
        Ok(books)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CodebookScope;

    fn books() -> Codebooks {
        let config = PqConfig { subspaces: 2, nbits: 2, scope: CodebookScope::LayerHead };
        let geometry = CodebookGeometry { layers: 2, kv_heads: 3, head_dim: 4 };
        let len = 3 * 2 * 4 * 2;
        Codebooks {
            config,
            geometry,
            model: ModelFingerprint::of_bytes(b"tiny"),
            calibration: "unit test".into(),
            keys: (0..2).map(|l| (0..len).map(|i| (l * 100 + i) as f32 * 0.5).collect()).collect(),
            values: (0..2).map(|l| (0..len).map(|i| -((l * 100 + i) as f32)).collect()).collect(),
        }
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = std::env::temp_dir().join(format!("pq-books-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("books.safetensors");
        let original = books();
        original.save(&path).unwrap();
        assert_eq!(Codebooks::load(&path).unwrap(), original);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_files_are_typed_errors() {
        let good = {
            let b = books();
            let dir = std::env::temp_dir().join(format!("pq-books-bad-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("b.safetensors");
            b.save(&path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            std::fs::remove_dir_all(&dir).unwrap();
            bytes
        };
        assert!(Codebooks::from_bytes(&good).is_ok());
        // Truncated anywhere: an error, never a panic.
        for cut in [0, 4, 8, 50, good.len() / 2, good.len() - 1] {
            assert!(Codebooks::from_bytes(&good[..cut]).is_err(), "cut at {cut}");
        }
        // Edited metadata.
        // Same-length edits of the header text, so the tensor offsets stay valid.
        let edit = |from: &str, to: &str| {
            assert_eq!(from.len(), to.len());
            let at = good.windows(from.len()).position(|w| w == from.as_bytes()).expect("pattern in the header");
            let mut bytes = good.clone();
            bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
            Codebooks::from_bytes(&bytes).unwrap_err()
        };
        assert!(edit("\"version\":\"1\"", "\"version\":\"9\"").contains("version 9"));
        assert!(edit("pq-codebooks", "pq-codebookz").contains("format"));
        assert!(edit("nbits=2", "nbits=3").contains("expected F32"));
        assert!(edit("\"head_dim\":\"4\"", "\"head_dim\":\"5\"").contains("divide"));
        let missing = Codebooks::load(Path::new("/nonexistent/books.safetensors")).unwrap_err();
        assert!(matches!(missing, PqError::Io { .. }));
    }
}
