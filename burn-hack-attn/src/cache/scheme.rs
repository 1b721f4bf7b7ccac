//! [`HackScheme`]: a [`HackConfig`] with its rotations, the [`KvScheme`] that builds one
//! [`HackCache`] per layer.

use std::sync::Arc;

use burn::tensor::{backend::Backend, Tensor, TensorData};
use burn_kvcompress::{
    cache::{CacheGeometry, KvScheme},
    fingerprint::ModelFingerprint,
    model::{fold_value_rotation, CausalLm},
};

use super::{rotation_memo::RotationMemo, HackCache};
use crate::{
    kernels::HackBackend,
    rotation::{hadamard_rotation, HackRotations, RotationFile, RotationFileError, RotationRole, RotationShape},
    HackConfig, HackConfigError, RotationSpec,
};

/// A HACK scheme cannot be built or applied to a model.
#[derive(Debug, thiserror::Error)]
pub enum HackSchemeError {
    /// The configuration is not supported.
    #[error(transparent)]
    Config(#[from] HackConfigError),
    /// The learned rotations could not be read.
    #[error(transparent)]
    Rotations(#[from] RotationFileError),
    /// The rotations do not fit the model.
    #[error("rotations for {expected} do not fit the model: {found}")]
    Shape {
        /// What the rotations need.
        expected: String,
        /// What the model has.
        found: String,
    },
    /// Fine-tuning the rotations cannot run.
    #[error("fine-tuning: {0}")]
    Finetune(String),
}

impl From<burn_kvcompress::finetune::FinetuneError> for HackSchemeError {
    fn from(e: burn_kvcompress::finetune::FinetuneError) -> Self {
        Self::Finetune(e.to_string())
    }
}

/// HACK as a [`KvScheme`]: the configuration and, for learned rotations, the file's matrices.
/// Each layer's key rotation is built on a device once and shared by every cache the scheme (or a
/// clone of it) builds there.
#[derive(Debug, Clone)]
pub struct HackScheme {
    config: HackConfig,
    learned: Option<Arc<RotationFile>>,
    key_rotations: Arc<RotationMemo>,
}

impl HackScheme {
    /// The scheme of `config`, validated; learned rotations are read from their file.
    pub fn new(config: HackConfig) -> Result<Self, HackSchemeError> {
        config.validate()?;
        let learned = match &config.rotation {
            RotationSpec::Learned { path } => Some(Arc::new(RotationFile::load(path)?)),
            _ => None,
        };
        Ok(Self { config, learned, key_rotations: Arc::default() })
    }

    /// The scheme of `config` with learned rotations given directly (its `rotation` setting is
    /// replaced by `file`'s, named `path` in the scheme's name).
    pub fn with_rotations(
        mut config: HackConfig,
        path: std::path::PathBuf,
        file: RotationFile,
    ) -> Result<Self, HackSchemeError> {
        config.rotation = RotationSpec::Learned { path };
        config.validate()?;
        Ok(Self { config, learned: Some(Arc::new(file)), key_rotations: Arc::default() })
    }

    /// The configuration.
    pub fn config(&self) -> &HackConfig {
        &self.config
    }

    /// The model the learned rotations were trained on (None without them).
    pub fn rotations_model(&self) -> Option<ModelFingerprint> {
        self.learned.as_ref().map(|f| f.model)
    }

    /// Layer `layer`'s rotation of `role` for `kv_heads` heads of `head_dim` channels, `[kv_heads,
    /// head_dim, head_dim]` (None without rotation), or why it cannot be built.
    pub fn rotation<B: Backend>(
        &self,
        role: RotationRole,
        layer: usize,
        kv_heads: usize,
        head_dim: usize,
        device: &B::Device,
    ) -> Result<Option<Tensor<B, 3>>, HackSchemeError> {
        let matrices = self.matrices(role, layer, kv_heads, head_dim)?;
        Ok(matrices.map(|m| Tensor::from_data(TensorData::new(m, [kv_heads, head_dim, head_dim]), device)))
    }

    /// [`Self::rotation`] on the host, the matrices row-major one after the other.
    fn matrices(
        &self,
        role: RotationRole,
        layer: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Result<Option<Vec<f32>>, HackSchemeError> {
        Ok(Some(match (&self.config.rotation, &self.learned) {
            (RotationSpec::None, _) => return Ok(None),
            (RotationSpec::Hadamard { seed }, _) => (0..kv_heads)
                .map(|h| hadamard_rotation(head_dim, *seed, layer, h, role))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| HackSchemeError::Shape {
                    expected: "a Hadamard transform (a power-of-two head dimension)".into(),
                    found: format!("head dimension {head_dim}"),
                })?
                .concat(),
            (RotationSpec::Learned { .. }, Some(file)) => {
                let shape = file.rotations.shape;
                if (shape.kv_heads, shape.head_dim) != (kv_heads, head_dim) || layer >= shape.layers {
                    return Err(HackSchemeError::Shape {
                        expected: shape.to_string(),
                        found: format!("layer {layer} of {kv_heads} KV heads × {head_dim} channels"),
                    });
                }
                match role {
                    RotationRole::Key => file.rotations.keys[layer].clone(),
                    RotationRole::Value => file.rotations.values[layer].clone(),
                }
            }
            (RotationSpec::Learned { path }, None) => unreachable!("HackScheme::new loads {}", path.display()),
        }))
    }

    /// Every layer's rotations for a model of `shape` (None without rotation): the start of
    /// [`finetune_hack_rotations`](crate::finetune::finetune_hack_rotations).
    pub fn rotations(&self, shape: RotationShape) -> Result<Option<HackRotations>, HackSchemeError> {
        let role = |role| -> Result<Option<Vec<Vec<f32>>>, HackSchemeError> {
            (0..shape.layers).map(|layer| self.matrices(role, layer, shape.kv_heads, shape.head_dim)).collect()
        };
        Ok(match (role(RotationRole::Key)?, role(RotationRole::Value)?) {
            (Some(keys), Some(values)) => Some(HackRotations { shape, keys, values }),
            _ => None,
        })
    }

    /// `model` with every layer's value rotation folded into `W_V` and `W_O` (unchanged without
    /// rotation): run this model with caches of this scheme. Its outputs equal the original's up
    /// to rounding; only the values the caches quantize differ.
    pub fn fold<B: Backend>(&self, mut model: CausalLm<B>) -> Result<CausalLm<B>, HackSchemeError> {
        for (layer, decoder) in model.layers.iter_mut().enumerate() {
            let attention = &mut decoder.attention;
            let device = attention.v_proj.weight.device();
            let (kv_heads, head_dim) = (attention.num_kv_heads, attention.head_dim);
            if let Some(r) = self.rotation::<B>(RotationRole::Value, layer, kv_heads, head_dim, &device)? {
                fold_value_rotation(attention, r);
            }
        }
        Ok(model)
    }
}

impl<B: HackBackend> KvScheme<B> for HackScheme {
    type Cache = HackCache<B>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> HackCache<B> {
        let (kv_heads, head_dim) = (geometry.kv_heads, geometry.head_dim);
        let rotation = self.key_rotations.get_or_build(layer, kv_heads, head_dim, device, || {
            self.rotation(RotationRole::Key, layer, kv_heads, head_dim, device).map_err(|e| e.to_string())
        });
        HackCache::new(self.config.clone(), layer, geometry, rotation, device)
    }

    /// The configuration's text form, e.g. `hack:bits=2,pi=64,round=stochastic,seed=0`.
    fn name(&self) -> String {
        self.config.to_string()
    }
}

impl From<HackConfig> for HackScheme {
    /// The scheme of a configuration without learned rotations (panics on learned ones, which
    /// need [`HackScheme::new`] to read their file).
    fn from(config: HackConfig) -> Self {
        assert!(
            !matches!(config.rotation, RotationSpec::Learned { .. }),
            "learned rotations are read by HackScheme::new"
        );
        Self { config, learned: None, key_rotations: Arc::default() }
    }
}
