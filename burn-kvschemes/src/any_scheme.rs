//! Schemes as values: a [`SchemeSpec`] resolved against a model ([`SchemeSpec::resolve`]: files
//! loaded and checked against the model), the model prepared for it ([`AnyScheme::prepare`]), and
//! generic code called with the concrete scheme ([`with_scheme!`](crate::with_scheme)).

use std::{path::Path, sync::Arc};

use anyhow::Context;
use burn::tensor::backend::Backend;
use burn_hack_attn::HackScheme;
use burn_kvcompress::{
    cache::{CacheGeometry, DenseScheme, HalfDenseScheme},
    fingerprint::ModelFingerprint,
    model::{CausalLm, ModelConfig},
};
use burn_million_pq::{cache::PqScheme, codebook::Codebooks};
use burn_zack::cache::ZackScheme;

use crate::{
    compose::{ReducedCodebooks, ZackHackScheme, ZackPqScheme},
    SchemeSpec,
};

/// A scheme ready to build caches: a [`SchemeSpec`] resolved against the loaded model.
#[derive(Debug, Clone)]
pub enum AnyScheme {
    /// Uncompressed K/V.
    Dense(DenseScheme),
    /// Uncompressed K/V stored in f16.
    HalfDense(HalfDenseScheme),
    /// HACK, with its learned rotations (if any) loaded and checked against the model.
    Hack(HackScheme),
    /// MILLION, with its codebooks loaded and checked against the model.
    Pq(PqScheme),
    /// ZACK, with its rotations loaded and checked against the model and ranks chosen.
    Zack(ZackScheme),
    /// ZACK followed by HACK quantization.
    ZackHack(ZackHackScheme),
    /// ZACK followed by product quantization, with its codebooks loaded and checked.
    ZackPq(ZackPqScheme),
}

impl AnyScheme {
    /// The model this scheme runs with: ZACK and HACK (with a rotation) fold their value/output
    /// rotations into `W_V` and `W_O`; every other scheme runs the model as loaded.
    pub fn prepare<B: Backend>(&self, model: CausalLm<B>) -> anyhow::Result<CausalLm<B>> {
        match self {
            Self::Zack(scheme) => Ok(scheme.fold(model)?),
            Self::ZackHack(scheme) => Ok(scheme.zack().fold(model)?),
            Self::ZackPq(scheme) => Ok(scheme.zack().fold(model)?),
            Self::Hack(scheme) => Ok(scheme.fold(model)?),
            Self::Dense(_) | Self::HalfDense(_) | Self::Pq(_) => Ok(model),
        }
    }
}

impl SchemeSpec {
    /// The concrete scheme for the model at `model_path` with hyper-parameters `config`.
    ///
    /// `pq` loads its codebook file and checks that it was calibrated on this model file (by
    /// SHA-256: `fingerprint` if the caller already has it, else the file is hashed here) and fits
    /// its geometry (layers, KV heads, head dimension); the error names the file and the mismatch.
    /// `zack` does the same with its rotation file and picks the ranks.
    pub fn resolve(
        &self,
        model_path: &Path,
        config: &ModelConfig,
        fingerprint: Option<ModelFingerprint>,
    ) -> anyhow::Result<AnyScheme> {
        Ok(match self {
            Self::Dense => AnyScheme::Dense(DenseScheme),
            Self::HalfDense => AnyScheme::HalfDense(HalfDenseScheme),
            Self::Hack(config) => {
                let scheme = HackScheme::new(config.clone())?;
                if let Some(trained_on) = scheme.rotations_model() {
                    let fingerprint = fingerprint_of(model_path, fingerprint)?;
                    anyhow::ensure!(
                        trained_on == fingerprint,
                        "the HACK rotations of `{config}` were trained on model {trained_on}, not on {} ({fingerprint})",
                        model_path.display()
                    );
                }
                AnyScheme::Hack(scheme)
            }
            Self::Zack(arg) => {
                let fingerprint = fingerprint_of(model_path, fingerprint)?;
                AnyScheme::Zack(
                    arg.resolve(config, fingerprint)
                        .with_context(|| format!("for the model {}", model_path.display()))?,
                )
            }
            Self::ZackHack(arg, hack) => {
                let mut arg = arg.clone();
                if arg.rule.multiple == 1 {
                    arg.rule.multiple = ZackHackScheme::rank_multiple(config.head_dim, hack);
                }
                let fingerprint = fingerprint_of(model_path, fingerprint)?;
                let zack = arg
                    .resolve(config, fingerprint)
                    .with_context(|| format!("for the model {}", model_path.display()))?;
                AnyScheme::ZackHack(ZackHackScheme::new(zack, hack.clone())?)
            }
            Self::ZackPq(arg, pq) => {
                let path = &pq.codebooks;
                let books = ReducedCodebooks::load(path)
                    .with_context(|| format!("loading reduced PQ codebooks {}", path.display()))?;
                let fingerprint = fingerprint_of(model_path, fingerprint)?;
                if books.model != fingerprint {
                    anyhow::bail!(
                        "the reduced PQ codebooks {} were calibrated on model {}, not on {} ({fingerprint})",
                        path.display(),
                        books.model,
                        model_path.display()
                    );
                }
                let mut arg = arg.clone();
                if arg.rule.multiple == 1 {
                    arg.rule.multiple = books.config.sub_dim;
                }
                let zack = arg
                    .resolve(config, fingerprint)
                    .with_context(|| format!("for the model {}", model_path.display()))?;
                let scheme = ZackPqScheme::new(zack, Arc::new(books), pq.window).with_context(|| {
                    format!("{} (give the zack part the rate and rule it was calibrated with)", path.display())
                })?;
                AnyScheme::ZackPq(scheme)
            }
            Self::Pq(arg) => {
                let path = &arg.codebooks;
                let books =
                    Codebooks::load(path).with_context(|| format!("loading PQ codebooks {}", path.display()))?;
                let fingerprint = fingerprint_of(model_path, fingerprint)?;
                let geometry = CacheGeometry {
                    batch: 1,
                    kv_heads: config.num_kv_heads,
                    heads: config.num_heads,
                    head_dim: config.head_dim,
                };
                books.check_model(fingerprint, config.num_layers, geometry).with_context(|| {
                    format!(
                        "the PQ codebooks {} (calibrated on: {}) do not fit the model {}",
                        path.display(),
                        books.calibration,
                        model_path.display()
                    )
                })?;
                AnyScheme::Pq(PqScheme::new(Arc::new(books), arg.window))
            }
        })
    }
}

/// `known`, or the model file's SHA-256.
fn fingerprint_of(model_path: &Path, known: Option<ModelFingerprint>) -> anyhow::Result<ModelFingerprint> {
    match known {
        Some(f) => Ok(f),
        None => {
            ModelFingerprint::of_path(model_path).with_context(|| format!("hashing the model {}", model_path.display()))
        }
    }
}

/// Calls `$run($scheme_value, ...)` with the concrete scheme an [`AnyScheme`] holds; `$run` is a
/// path, so it may carry generic arguments: `with_scheme!(scheme, run::<B, _>, (x, y))`.
#[macro_export]
macro_rules! with_scheme {
    ($scheme:expr, $run:path, ( $($a:expr),* )) => {{
        use $crate::AnyScheme;
        match $scheme {
            AnyScheme::Dense(scheme) => $run(scheme, $($a),*),
            AnyScheme::HalfDense(scheme) => $run(scheme, $($a),*),
            AnyScheme::Hack(scheme) => $run(scheme, $($a),*),
            AnyScheme::Pq(scheme) => $run(scheme, $($a),*),
            AnyScheme::Zack(scheme) => $run(scheme, $($a),*),
            AnyScheme::ZackHack(scheme) => $run(scheme, $($a),*),
            AnyScheme::ZackPq(scheme) => $run(scheme, $($a),*),
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_config(num_layers: usize) -> ModelConfig {
        ModelConfig {
            architecture: burn_kvcompress::model::Architecture::Llama,
            vocab_size: 8,
            hidden_size: 8,
            intermediate_size: 8,
            num_layers,
            num_heads: 2,
            num_kv_heads: 1,
            head_dim: 4,
            rope_theta: 10000.0,
            rms_norm_eps: 1e-5,
            tie_embeddings: true,
            sliding_window: None,
            max_position: 16,
        }
    }

    #[test]
    fn resolving_pq_checks_the_file_the_model_and_the_geometry() {
        let dir = std::env::temp_dir().join(format!("scheme-arg-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (model, other_model, books_path) =
            (dir.join("model.gguf"), dir.join("other.gguf"), dir.join("books.safetensors"));
        std::fs::write(&model, b"model weights").unwrap();
        std::fs::write(&other_model, b"other weights").unwrap();
        let config: burn_million_pq::PqConfig = "m=2,nbits=2".parse().unwrap();
        let books = Codebooks {
            config,
            geometry: burn_million_pq::codebook::CodebookGeometry { layers: 2, kv_heads: 1, head_dim: 4 },
            model: ModelFingerprint::of_path(&model).unwrap(),
            calibration: "unit test".into(),
            keys: vec![vec![0.5; 2 * 4 * 2]; 2],
            values: vec![vec![-0.5; 2 * 4 * 2]; 2],
        };
        books.save(&books_path).unwrap();
        let arg: SchemeSpec = format!("pq:codebooks={},window=8", books_path.display()).parse().unwrap();
        let message = |result: anyhow::Result<AnyScheme>| format!("{:#}", result.unwrap_err());

        match arg.resolve(&model, &tiny_config(2), None).unwrap() {
            AnyScheme::Pq(scheme) => assert_eq!((scheme.window, &*scheme.codebooks), (8, &books)),
            other => panic!("resolved to {other:?}"),
        }
        let wrong_model = message(arg.resolve(&other_model, &tiny_config(2), None));
        assert!(wrong_model.contains("books.safetensors") && wrong_model.contains("other.gguf"), "{wrong_model}");
        assert!(wrong_model.contains("calibrated on model"), "{wrong_model}");
        let wrong_geometry = message(arg.resolve(&model, &tiny_config(3), None));
        assert!(wrong_geometry.contains("3 layers"), "{wrong_geometry}");
        let missing: SchemeSpec = "pq:codebooks=/nonexistent/books.safetensors".parse().unwrap();
        let missing = message(missing.resolve(&model, &tiny_config(2), None));
        assert!(missing.contains("/nonexistent/books.safetensors"), "{missing}");
        assert!(matches!(SchemeSpec::Dense.resolve(&model, &tiny_config(2), None), Ok(AnyScheme::Dense(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
