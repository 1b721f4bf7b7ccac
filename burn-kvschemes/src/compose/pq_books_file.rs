//! Reduced codebooks as a safetensors file.
//!
//! Tensors `layer.{l}.key` and `layer.{l}.value`, f32 `[subspaces, centroids, sub_dim]`. Header
//! metadata: `format` = `burn-kvcompress/zack-pq-codebooks`, `version` = `1`, `model_sha256`,
//! `rotations_sha256`, `ranks_sha256` (64 hex digits each), `config`
//! ([`ReducedPqConfig`]'s text form), `key_subspaces` and `value_subspaces` (per layer, comma
//! separated) and `calibration` (free text).

use std::path::Path;

use burn_kvcompress::{
    fingerprint::ModelFingerprint,
    tagged_file::{serialize_tagged, NamedTensor, TaggedFile},
};

use super::ComposeError;
use super::{ReducedCodebooks, ReducedPqConfig};

const FORMAT: &str = "burn-kvcompress/zack-pq-codebooks";
const VERSION: &str = "1";
const KINDS: [&str; 2] = ["key", "value"];

fn tensor_name(layer: usize, kind: &str) -> String {
    format!("layer.{layer}.{kind}")
}

fn list(counts: impl Iterator<Item = usize>) -> String {
    counts.map(|n| n.to_string()).collect::<Vec<_>>().join(",")
}

fn parse_list(text: &str, key: &str) -> Result<Vec<usize>, String> {
    text.split(',').map(|n| n.parse().map_err(|_| format!("metadata `{key}` is not a list of counts"))).collect()
}

impl ReducedCodebooks {
    /// Writes the codebooks to `path`.
    pub fn save(&self, path: &Path) -> Result<(), ComposeError> {
        let format_error = |reason: String| ComposeError::Format { path: path.to_path_buf(), reason };
        let layers = self.keys.len();
        let shapes: Vec<[[usize; 4]; 2]> = (0..layers).map(|l| self.shapes(l)).collect();
        let mut tensors = Vec::with_capacity(2 * layers);
        for (layer, shape) in shapes.iter().enumerate() {
            for ((kind, book), [_, m, c, s]) in
                KINDS.into_iter().zip([&self.keys[layer], &self.values[layer]]).zip(*shape)
            {
                tensors.push(NamedTensor {
                    name: tensor_name(layer, kind),
                    shape: vec![m, c, s],
                    values: book.clone(),
                });
            }
        }
        let metadata = vec![
            ("model_sha256", self.model.to_hex()),
            ("rotations_sha256", ModelFingerprint(self.rotations).to_hex()),
            ("ranks_sha256", ModelFingerprint(self.ranks).to_hex()),
            ("config", self.config.to_string()),
            ("key_subspaces", list(shapes.iter().map(|s| s[0][1]))),
            ("value_subspaces", list(shapes.iter().map(|s| s[1][1]))),
            ("calibration", self.calibration.clone()),
        ];
        let bytes = serialize_tagged(FORMAT, VERSION, metadata, &tensors).map_err(format_error)?;
        std::fs::write(path, bytes).map_err(|source| ComposeError::Io { path: path.to_path_buf(), source })
    }

    /// Reads codebooks written by [`save`](Self::save), checking every field and shape. Whether
    /// they fit a scheme is [`check_fits`](Self::check_fits)'s question.
    pub fn load(path: &Path) -> Result<Self, ComposeError> {
        let bytes = std::fs::read(path).map_err(|source| ComposeError::Io { path: path.to_path_buf(), source })?;
        Self::from_bytes(&bytes).map_err(|reason| ComposeError::Format { path: path.to_path_buf(), reason })
    }

    /// Parses a reduced codebook file's bytes (what [`load`](Self::load) reads), checking every
    /// field and shape; why they are refused, as text (`load` adds the path).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let file = TaggedFile::parse(bytes, FORMAT, VERSION)?;
        let digest = |key: &str| {
            ModelFingerprint::from_hex(file.get(key)?).ok_or_else(|| format!("metadata `{key}` is malformed"))
        };
        let config: ReducedPqConfig = file.get("config")?.parse().map_err(|e: ComposeError| e.to_string())?;
        let subspaces = [
            parse_list(file.get("key_subspaces")?, "key_subspaces")?,
            parse_list(file.get("value_subspaces")?, "value_subspaces")?,
        ];
        let layers = subspaces[0].len();
        if subspaces[1].len() != layers || layers > 4096 {
            return Err(format!("{} key and {} value subspace counts", layers, subspaces[1].len()));
        }
        let (c, s) = (config.centroids(), config.sub_dim);
        let mut books = [Vec::with_capacity(layers), Vec::with_capacity(layers)];
        for layer in 0..layers {
            for ((kind, counts), out) in KINDS.into_iter().zip(&subspaces).zip(books.iter_mut()) {
                out.push(file.f32_tensor(&tensor_name(layer, kind), &[counts[layer], c, s])?);
            }
        }
        let [keys, values] = books;
        Ok(Self {
            config,
            model: digest("model_sha256")?,
            rotations: digest("rotations_sha256")?.0,
            ranks: digest("ranks_sha256")?.0,
            calibration: file.get("calibration")?.to_string(),
            keys,
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn books() -> ReducedCodebooks {
        let book = |m: usize, seed: f32| (0..m * 4 * 2).map(|i| seed + i as f32 * 0.5).collect();
        ReducedCodebooks {
            config: ReducedPqConfig { sub_dim: 2, nbits: 2 },
            model: ModelFingerprint::of_bytes(b"model"),
            rotations: ModelFingerprint::of_bytes(b"rotations").0,
            ranks: ModelFingerprint::of_bytes(b"ranks").0,
            calibration: "unit test".into(),
            keys: vec![book(3, 1.0), book(2, 2.0)],
            values: vec![book(1, -1.0), book(4, -2.0)],
        }
    }

    #[test]
    fn round_trips_and_malformed_files_are_typed_errors() {
        let dir = std::env::temp_dir().join(format!("zack-pq-books-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("books.safetensors");
        let original = books();
        original.save(&path).unwrap();
        let loaded = ReducedCodebooks::load(&path).unwrap();
        assert_eq!(loaded, original);
        assert_eq!(loaded.digest(), original.digest());
        let good = std::fs::read(&path).unwrap();
        let reason = |bytes: &[u8]| ReducedCodebooks::from_bytes(bytes).expect_err("a malformed file was accepted");
        for cut in [0, 8, good.len() / 2, good.len() - 1] {
            assert!(reason(&good[..cut]).contains("safetensors"), "cut at {cut}");
        }
        let edit = |from: &str, to: &str| {
            assert_eq!(from.len(), to.len());
            let at = good.windows(from.len()).position(|w| w == from.as_bytes()).expect("pattern in the header");
            let mut bytes = good.clone();
            bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
            reason(&bytes)
        };
        assert!(edit("\"version\":\"1\"", "\"version\":\"7\"").contains("version 7"));
        assert!(edit("\"key_subspaces\":\"3,2\"", "\"key_subspaces\":\"2,2\"").contains("layer.0.key"));
        assert!(edit("\"value_subspaces\":\"1,4\"", "\"value_subspaces\":\"1,x\"").contains("list of counts"));
        assert!(edit("nbits=2", "nbits=3").contains("expected F32"));
        assert!(matches!(ReducedCodebooks::load(&dir.join("missing")), Err(ComposeError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
