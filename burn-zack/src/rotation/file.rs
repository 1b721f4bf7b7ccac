//! Rotations as a safetensors file.
//!
//! Tensors `layer.{l}.{qk|vo}.basis` (f32 `[kv_heads, head_dim, head_dim]`, each head's basis
//! row-major), `layer.{l}.{qk|vo}.sigma` and `layer.{l}.{qk|vo}.mean` (f32 `[kv_heads,
//! head_dim]`: singular values, and the calibration mean of keys or values). Header metadata:
//! `format` = `burn-kvcompress/zack-rotations`, `version` = `1`, `model_sha256`, `config`
//! ([`RotationConfig`](super::RotationConfig)'s text form),
//! `layers`, `heads`, `kv_heads`, `head_dim` and `calibration` (free text).

use std::path::Path;

use burn_kvcompress::{
    fingerprint::ModelFingerprint,
    tagged_file::{serialize_tagged, NamedTensor, TaggedFile},
};

use super::{HeadRotation, Pair, RotationGeometry, Rotations};
use crate::{
    file_io::{read_file, write_file},
    ZackError,
};

const FORMAT: &str = "burn-kvcompress/zack-rotations";
const VERSION: &str = "1";

fn tensor_name(layer: usize, pair: Pair, what: &str) -> String {
    format!("layer.{layer}.{}.{what}", pair.name())
}

impl Rotations {
    /// Writes the rotations to `path`.
    pub fn save(&self, path: &Path) -> Result<(), ZackError> {
        let format_error = |reason: String| ZackError::Format { path: path.to_path_buf(), reason };
        self.check_shapes().map_err(format_error)?;
        let g = self.geometry;
        let mut tensors = Vec::new();
        for layer in 0..g.layers {
            for pair in Pair::ALL {
                let heads = (0..g.kv_heads).map(|h| self.head(pair, layer, h));
                let mut push = |what: &str, shape: Vec<usize>, field: fn(&HeadRotation) -> &Vec<f32>| {
                    let values = heads.clone().flat_map(|h| field(h).iter().copied()).collect();
                    tensors.push(NamedTensor { name: tensor_name(layer, pair, what), shape, values });
                };
                push("basis", vec![g.kv_heads, g.head_dim, g.head_dim], |h| &h.basis);
                push("sigma", vec![g.kv_heads, g.head_dim], |h| &h.singular_values);
                push("mean", vec![g.kv_heads, g.head_dim], |h| &h.mean);
            }
        }
        let metadata = vec![
            ("model_sha256", self.model.to_hex()),
            ("config", self.config.to_string()),
            ("layers", g.layers.to_string()),
            ("heads", g.heads.to_string()),
            ("kv_heads", g.kv_heads.to_string()),
            ("head_dim", g.head_dim.to_string()),
            ("calibration", self.calibration.clone()),
        ];
        let bytes = serialize_tagged(FORMAT, VERSION, metadata, &tensors).map_err(format_error)?;
        write_file(path, bytes)
    }

    /// Reads rotations written by [`save`](Self::save), checking every field and shape.
    pub fn load(path: &Path) -> Result<Self, ZackError> {
        read_file(path, Self::from_bytes)
    }

    /// Parses a rotation file's bytes (what [`load`](Self::load) reads), checking every field
    /// and shape; why they are refused, as text (`load` adds the path).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let file = TaggedFile::parse(bytes, FORMAT, VERSION)?;
        let model =
            ModelFingerprint::from_hex(file.get("model_sha256")?).ok_or("metadata `model_sha256` is malformed")?;
        let config = file.get("config")?.parse().map_err(|e: ZackError| e.to_string())?;
        let geometry = RotationGeometry {
            layers: file.number("layers")?,
            heads: file.number("heads")?,
            kv_heads: file.number("kv_heads")?,
            head_dim: file.number("head_dim")?,
        };
        let g = geometry;
        let plausible = |n: usize| (1..=4096).contains(&n);
        let fits = [g.layers, g.heads, g.kv_heads, g.head_dim].into_iter().all(plausible);
        if !fits || !g.heads.is_multiple_of(g.kv_heads) {
            return Err(format!("implausible geometry {g}"));
        }
        let mut pairs: [Vec<Vec<HeadRotation>>; 2] = [Vec::new(), Vec::new()];
        for layer in 0..g.layers {
            for (pair, layers) in Pair::ALL.into_iter().zip(pairs.iter_mut()) {
                let basis =
                    file.f32_tensor(&tensor_name(layer, pair, "basis"), &[g.kv_heads, g.head_dim, g.head_dim])?;
                let sigma = file.f32_tensor(&tensor_name(layer, pair, "sigma"), &[g.kv_heads, g.head_dim])?;
                let mean = file.f32_tensor(&tensor_name(layer, pair, "mean"), &[g.kv_heads, g.head_dim])?;
                layers.push(
                    (0..g.kv_heads)
                        .map(|h| {
                            let vector = |v: &[f32]| v[h * g.head_dim..(h + 1) * g.head_dim].to_vec();
                            HeadRotation {
                                basis: basis[h * g.head_dim * g.head_dim..(h + 1) * g.head_dim * g.head_dim].to_vec(),
                                singular_values: vector(&sigma),
                                mean: vector(&mean),
                            }
                        })
                        .collect(),
                );
            }
        }
        let [query_key, value_output] = pairs;
        let calibration = file.get("calibration")?.to_string();
        let rotations = Self { geometry, model, config, calibration, query_key, value_output };
        rotations.check_shapes()?;
        Ok(rotations)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rotation::{BlockWeighting, Centering, RotationConfig};

    fn rotations() -> Rotations {
        let geometry = RotationGeometry { layers: 2, heads: 4, kv_heads: 2, head_dim: 3 };
        let head = |seed: f32| HeadRotation {
            basis: (0..9).map(|i| seed + i as f32 * 0.25).collect(),
            singular_values: vec![seed + 3.0, seed + 2.0, seed],
            mean: vec![seed, -seed, 0.5],
        };
        Rotations {
            geometry,
            model: ModelFingerprint::of_bytes(b"tiny"),
            config: RotationConfig {
                weighting: BlockWeighting::Concatenate,
                centering: Centering::None,
                value_samples: crate::rotation::ValueSamples::Values,
            },
            calibration: "unit test".into(),
            query_key: vec![vec![head(1.0), head(2.0)], vec![head(3.0), head(4.0)]],
            value_output: vec![vec![head(-1.0), head(-2.0)], vec![head(-3.0), head(-4.0)]],
        }
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = std::env::temp_dir().join(format!("zack-rotations-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rot.safetensors");
        let original = rotations();
        original.save(&path).unwrap();
        let loaded = Rotations::load(&path).unwrap();
        assert_eq!(loaded, original);
        assert_eq!(loaded.digest(), original.digest());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_files_are_typed_errors() {
        let dir = std::env::temp_dir().join(format!("zack-rotations-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("rot.safetensors");
        rotations().save(&path).unwrap();
        let good = std::fs::read(&path).unwrap();
        let reason = |bytes: &[u8]| match Rotations::from_bytes(bytes) {
            Err(reason) => reason,
            Ok(_) => panic!("accepted a malformed file"),
        };
        assert!(reason(&good[..good.len() / 2]).contains("safetensors"), "truncated");
        assert!(reason(b"garbage").contains("safetensors"));
        // Same-length edits of the header, so that its declared size stays right.
        let edit = |from: &str, to: &str| {
            assert_eq!(from.len(), to.len());
            let at = good.windows(from.len()).position(|w| w == from.as_bytes()).expect("pattern in the header");
            let mut bytes = good.clone();
            bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
            bytes
        };
        assert!(reason(&edit("\"version\":\"1\"", "\"version\":\"9\"")).contains("version 9"));
        assert!(reason(&edit("weighting=concatenate", "weighting=concatenatx")).contains("weighting"));
        assert!(reason(&edit("\"kv_heads\":\"2\"", "\"kv_heads\":\"3\"")).contains("geometry"));
        assert!(reason(&edit("\"head_dim\":\"3\"", "\"head_dim\":\"4\"")).contains("layer.0.qk.basis"));
        assert!(matches!(Rotations::load(&dir.join("missing")), Err(ZackError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
