//! Rotations as a safetensors file.
//!
//! Tensors `layer.{l}.{qk|vo}.basis` (f32 `[kv_heads, head_dim, head_dim]`, each head's basis
//! row-major), `layer.{l}.{qk|vo}.sigma` and `layer.{l}.{qk|vo}.mean` (f32 `[kv_heads,
//! head_dim]`: singular values, and the calibration mean of keys or values). Header metadata:
//! `format` = `burn-kvcompress/zack-rotations`, `version` = `1`, `model_sha256`, `config`
//! ([`RotationConfig`](super::RotationConfig)'s text form),
//! `layers`, `heads`, `kv_heads`, `head_dim` and `calibration` (free text).

use std::{collections::HashMap, path::Path};

use burn_kvcompress::fingerprint::ModelFingerprint;
use safetensors::{tensor::TensorView, Dtype, SafeTensors};

use super::{HeadRotation, Pair, RotationGeometry, Rotations};
use crate::ZackError;

const FORMAT: &str = "burn-kvcompress/zack-rotations";
const VERSION: &str = "1";

fn tensor_name(layer: usize, pair: Pair, what: &str) -> String {
    format!("layer.{layer}.{}.{what}", pair.name())
}

fn le_bytes<'a>(values: impl Iterator<Item = &'a f32>) -> Vec<u8> {
    values.flat_map(|x| x.to_le_bytes()).collect()
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
                let basis = le_bytes(heads.clone().flat_map(|h| &h.basis));
                let sigma = le_bytes(heads.clone().flat_map(|h| &h.singular_values));
                let mean = le_bytes(heads.flat_map(|h| &h.mean));
                tensors.push((tensor_name(layer, pair, "basis"), vec![g.kv_heads, g.head_dim, g.head_dim], basis));
                tensors.push((tensor_name(layer, pair, "sigma"), vec![g.kv_heads, g.head_dim], sigma));
                tensors.push((tensor_name(layer, pair, "mean"), vec![g.kv_heads, g.head_dim], mean));
            }
        }
        let views = tensors
            .iter()
            .map(|(name, shape, data)| Ok((name.clone(), TensorView::new(Dtype::F32, shape.clone(), data)?)))
            .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
            .map_err(|e| format_error(e.to_string()))?;
        let metadata = HashMap::from([
            ("format".to_string(), FORMAT.to_string()),
            ("version".to_string(), VERSION.to_string()),
            ("model_sha256".to_string(), self.model.to_hex()),
            ("config".to_string(), self.config.to_string()),
            ("layers".to_string(), g.layers.to_string()),
            ("heads".to_string(), g.heads.to_string()),
            ("kv_heads".to_string(), g.kv_heads.to_string()),
            ("head_dim".to_string(), g.head_dim.to_string()),
            ("calibration".to_string(), self.calibration.clone()),
        ]);
        let serialized = safetensors::serialize(views, Some(metadata)).map_err(|e| format_error(e.to_string()))?;
        std::fs::write(path, serialized).map_err(|source| ZackError::Io { path: path.to_path_buf(), source })
    }

    /// Reads rotations written by [`save`](Self::save), checking every field and shape.
    pub fn load(path: &Path) -> Result<Self, ZackError> {
        let bytes = std::fs::read(path).map_err(|source| ZackError::Io { path: path.to_path_buf(), source })?;
        Self::from_bytes(&bytes).map_err(|reason| ZackError::Format { path: path.to_path_buf(), reason })
    }

    fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
        let meta = header.metadata().clone().unwrap_or_default();
        let get = |key: &str| meta.get(key).map(String::as_str).ok_or_else(|| format!("metadata `{key}` is missing"));
        let number = |key: &str| get(key)?.parse::<usize>().map_err(|_| format!("metadata `{key}` is not a number"));
        if get("format")? != FORMAT {
            return Err(format!("format `{}` is not `{FORMAT}`", get("format")?));
        }
        if get("version")? != VERSION {
            return Err(format!("version {} is not supported (this build reads {VERSION})", get("version")?));
        }
        let model = ModelFingerprint::from_hex(get("model_sha256")?).ok_or("metadata `model_sha256` is malformed")?;
        let config = get("config")?.parse().map_err(|e: ZackError| e.to_string())?;
        let geometry = RotationGeometry {
            layers: number("layers")?,
            heads: number("heads")?,
            kv_heads: number("kv_heads")?,
            head_dim: number("head_dim")?,
        };
        let g = geometry;
        let plausible = |n: usize| (1..=4096).contains(&n);
        let fits = [g.layers, g.heads, g.kv_heads, g.head_dim].into_iter().all(plausible);
        if !fits || !g.heads.is_multiple_of(g.kv_heads) {
            return Err(format!("implausible geometry {g}"));
        }
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
        let read = |name: String, shape: &[usize]| -> Result<Vec<f32>, String> {
            let view = tensors.tensor(&name).map_err(|_| format!("tensor `{name}` is missing"))?;
            if view.dtype() != Dtype::F32 || view.shape() != shape {
                return Err(format!(
                    "tensor `{name}` is {:?} {:?}, expected F32 {shape:?}",
                    view.dtype(),
                    view.shape()
                ));
            }
            Ok(view.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect())
        };
        let mut pairs: [Vec<Vec<HeadRotation>>; 2] = [Vec::new(), Vec::new()];
        for layer in 0..g.layers {
            for (pair, layers) in Pair::ALL.into_iter().zip(pairs.iter_mut()) {
                let basis = read(tensor_name(layer, pair, "basis"), &[g.kv_heads, g.head_dim, g.head_dim])?;
                let sigma = read(tensor_name(layer, pair, "sigma"), &[g.kv_heads, g.head_dim])?;
                let mean = read(tensor_name(layer, pair, "mean"), &[g.kv_heads, g.head_dim])?;
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
        let rotations =
            Self { geometry, model, config, calibration: get("calibration")?.to_string(), query_key, value_output };
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
