//! Parameter files as safetensors with a tagged header: f32 tensors, a `format` name and a
//! `version` in the metadata beside free `key = value` entries. Calibrated parameters (PQ
//! codebooks, ZACK rotations, codebooks of ZACK's reduced dimensions) are stored this way; each
//! names its own format, so one is never read as another.
//!
//! Both directions report problems as text; the caller wraps it with the file's path in its own
//! typed error.

use std::collections::HashMap;

use safetensors::{tensor::TensorView, Dtype, SafeTensors};

/// One f32 tensor to write: its name, shape and row-major values.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedTensor {
    /// The tensor's name in the file.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its values, row-major (`shape`'s product of them).
    pub values: Vec<f32>,
}

/// The bytes of a file holding `tensors` with `format`, `version` and `metadata` in its header.
pub fn serialize_tagged(
    format: &str,
    version: &str,
    metadata: Vec<(&str, String)>,
    tensors: &[NamedTensor],
) -> Result<Vec<u8>, String> {
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|t| t.values.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|(t, data)| Ok((t.name.clone(), TensorView::new(Dtype::F32, t.shape.clone(), data)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()
        .map_err(|e| e.to_string())?;
    let mut header =
        HashMap::from([("format".to_string(), format.to_string()), ("version".to_string(), version.to_string())]);
    header.extend(metadata.into_iter().map(|(key, value)| (key.to_string(), value)));
    safetensors::serialize(views, Some(header)).map_err(|e| e.to_string())
}

/// A parsed file of [`serialize_tagged`]'s form whose format and version were checked.
pub struct TaggedFile<'a> {
    metadata: HashMap<String, String>,
    tensors: SafeTensors<'a>,
}

impl<'a> TaggedFile<'a> {
    /// Parses `bytes`, requiring the header's `format` and `version` to be these.
    pub fn parse(bytes: &'a [u8], format: &str, version: &str) -> Result<Self, String> {
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
        let metadata = header.metadata().clone().unwrap_or_default();
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
        let file = Self { metadata, tensors };
        if file.get("format")? != format {
            return Err(format!("format `{}` is not `{format}`", file.get("format")?));
        }
        if file.get("version")? != version {
            return Err(format!("version {} is not supported (this build reads {version})", file.get("version")?));
        }
        Ok(file)
    }

    /// The metadata entry `key`.
    pub fn get(&self, key: &str) -> Result<&str, String> {
        self.metadata.get(key).map(String::as_str).ok_or_else(|| format!("metadata `{key}` is missing"))
    }

    /// The metadata entry `key` as a count.
    pub fn number(&self, key: &str) -> Result<usize, String> {
        self.get(key)?.parse::<usize>().map_err(|_| format!("metadata `{key}` is not a number"))
    }

    /// The f32 tensor `name`, which must have `shape`; its values row-major.
    pub fn f32_tensor(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, String> {
        let view = self.tensors.tensor(name).map_err(|_| format!("tensor `{name}` is missing"))?;
        if view.dtype() != Dtype::F32 || view.shape() != shape {
            return Err(format!("tensor `{name}` is {:?} {:?}, expected F32 {shape:?}", view.dtype(), view.shape()));
        }
        Ok(view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> Vec<u8> {
        let tensors = [
            NamedTensor { name: "a".into(), shape: vec![2, 3], values: (0..6).map(|i| i as f32 * 0.5).collect() },
            NamedTensor { name: "b".into(), shape: vec![1], values: vec![-1.25] },
        ];
        serialize_tagged("test/format", "1", vec![("layers", "7".into()), ("note", "x".into())], &tensors).unwrap()
    }

    #[test]
    fn round_trips_metadata_and_tensors() {
        let bytes = file();
        let parsed = TaggedFile::parse(&bytes, "test/format", "1").unwrap();
        assert_eq!(parsed.number("layers").unwrap(), 7);
        assert_eq!(parsed.get("note").unwrap(), "x");
        assert_eq!(parsed.f32_tensor("a", &[2, 3]).unwrap(), vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        assert_eq!(parsed.f32_tensor("b", &[1]).unwrap(), vec![-1.25]);
    }

    #[test]
    fn wrong_format_version_keys_and_shapes_are_reported() {
        let bytes = file();
        let error = |format, version| TaggedFile::parse(&bytes, format, version).err().unwrap();
        assert!(error("other/format", "1").contains("format `test/format`"));
        assert!(error("test/format", "2").contains("version 1"));
        let parsed = TaggedFile::parse(&bytes, "test/format", "1").unwrap();
        assert!(parsed.get("missing").unwrap_err().contains("`missing`"));
        assert!(parsed.number("note").unwrap_err().contains("not a number"));
        assert!(parsed.f32_tensor("a", &[3, 2]).unwrap_err().contains("expected F32 [3, 2]"));
        assert!(parsed.f32_tensor("c", &[1]).unwrap_err().contains("`c` is missing"));
        for cut in [0, 8, bytes.len() / 2, bytes.len() - 1] {
            assert!(TaggedFile::parse(&bytes[..cut], "test/format", "1").err().unwrap().contains("safetensors"));
        }
    }
}
