//! [`Codebooks`]: every layer's key and value centroids for one model.

use burn_kvcompress::{cache::CacheGeometry, fingerprint::ModelFingerprint};
use sha2::{Digest, Sha256};

use crate::{PqConfig, PqError};

/// Keys or values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KvKind {
    /// Post-RoPE keys.
    Key,
    /// Values.
    Value,
}

impl KvKind {
    /// `key` or `value` (tensor names in files).
    pub fn name(self) -> &'static str {
        match self {
            Self::Key => "key",
            Self::Value => "value",
        }
    }
}

/// The model dimensions codebooks are trained for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CodebookGeometry {
    /// Transformer layers.
    pub layers: usize,
    /// KV heads per layer.
    pub kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
}

impl std::fmt::Display for CodebookGeometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} layers x {} KV heads x head dim {}", self.layers, self.kv_heads, self.head_dim)
    }
}

/// Every layer's key and value codebooks.
///
/// One layer's codebook of one kind is `[groups, subspaces, centroids, sub_dim]` row-major, with
/// `groups` = [`CodebookScope::groups`](crate::CodebookScope::groups).
#[derive(Debug, Clone, PartialEq)]
pub struct Codebooks {
    /// The quantizer.
    pub config: PqConfig,
    /// The model dimensions.
    pub geometry: CodebookGeometry,
    /// The model they were calibrated on.
    pub model: ModelFingerprint,
    /// What they were calibrated on, in words (e.g. `gpl-3.txt, 8192 tokens`).
    pub calibration: String,
    /// Per layer, the key codebook.
    pub keys: Vec<Vec<f32>>,
    /// Per layer, the value codebook.
    pub values: Vec<Vec<f32>>,
}

impl Codebooks {
    /// Codebooks per layer and kind.
    pub fn groups(&self) -> usize {
        self.config.scope.groups(self.geometry.kv_heads)
    }

    /// The shape of one layer's codebook of one kind, `[groups, subspaces, centroids, sub_dim]`.
    pub fn shape(&self) -> [usize; 4] {
        let c = &self.config;
        [self.groups(), c.subspaces, c.centroids(), c.sub_dim(self.geometry.head_dim)]
    }

    /// Layer `layer`'s codebook of `kind`.
    pub fn layer(&self, layer: usize, kind: KvKind) -> &[f32] {
        match kind {
            KvKind::Key => &self.keys[layer],
            KvKind::Value => &self.values[layer],
        }
    }

    /// Bytes of one layer's key and value codebooks in f32.
    pub fn layer_bytes(&self) -> usize {
        2 * self.shape().iter().product::<usize>() * 4
    }

    /// Checks that every layer holds codebooks of [`shape`](Self::shape).
    pub fn check_shapes(&self) -> Result<(), String> {
        self.config.validate(self.geometry.head_dim).map_err(|e| e.to_string())?;
        let len = self.shape().iter().product::<usize>();
        for (kind, books) in [(KvKind::Key, &self.keys), (KvKind::Value, &self.values)] {
            if books.len() != self.geometry.layers {
                return Err(format!("{} {} codebooks for {} layers", books.len(), kind.name(), self.geometry.layers));
            }
            if let Some(layer) = books.iter().position(|b| b.len() != len) {
                return Err(format!("layer {layer}'s {} codebook has the wrong size (expected {len})", kind.name()));
            }
            if books.iter().flatten().any(|x| !x.is_finite()) {
                return Err(format!("a {} codebook holds a non-finite value", kind.name()));
            }
        }
        Ok(())
    }

    /// Checks that these codebooks belong to `model` and fit a layer cache's geometry.
    pub fn check_model(&self, model: ModelFingerprint, layers: usize, geometry: CacheGeometry) -> Result<(), PqError> {
        if model != self.model {
            return Err(PqError::ModelMismatch { expected: model, found: self.model });
        }
        let expected = CodebookGeometry { layers, kv_heads: geometry.kv_heads, head_dim: geometry.head_dim };
        if expected != self.geometry {
            return Err(PqError::GeometryMismatch { expected: expected.to_string(), found: self.geometry.to_string() });
        }
        Ok(())
    }

    /// SHA-256 of the configuration and every centroid: two processes whose codebooks differ in
    /// any bit have different digests (the scheme's name carries its first bytes).
    pub fn digest(&self) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.config.to_string().as_bytes());
        for x in self.keys.iter().chain(&self.values).flatten() {
            hasher.update(x.to_le_bytes());
        }
        hasher.finalize().into()
    }
}
