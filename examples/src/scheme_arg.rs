//! The `--kv` syntax: `dense` (f32 keys and values; `dense:storage=f16` stores them in half
//! precision, the baseline an fp16 model's transfer sends), `hack:bits=2,pi=64,round=stochastic,seed=0` (any subset of the
//! keys; see [`HackConfig`]'s text form) or `pq:codebooks=books.safetensors,window=64` (codebooks
//! from `calibrate`; `window` defaults to 64), `zack:rotations=rot.safetensors,rate=0.5`, or ZACK
//! followed by HACK quantization of the reduced dimensions, `zack:…+hack:bits=2,pi=64` (the
//! ranks then default to multiples that HACK's key partitions split; paths may not contain `+`),
//! or ZACK followed by product quantization of the reduced dimensions,
//! `zack:…+pq:codebooks=reduced.safetensors,window=64` (codebooks from `calibrate --scheme
//! zack-pq` for the same rotations and ranks; the ranks then default to multiples of their
//! `sub_dim`).
//!
//! A [`SchemeArg`] is only the parsed description; [`SchemeArg::resolve`] turns it into a
//! [`Scheme`] against the loaded model (PQ reads its codebook file and checks that it was
//! calibrated on this model), [`Scheme::prepare`] turns the loaded model into the one the scheme
//! runs with (ZACK folds its rotations into the weights), and [`with_scheme!`](crate::with_scheme)
//! calls a function generic over the scheme with the concrete type.

use std::{path::Path, path::PathBuf, str::FromStr, sync::Arc};

use anyhow::Context;
use burn::tensor::backend::Backend;
use burn_hack_attn::{HackConfig, HackScheme};
use burn_kvcompress::{
    cache::{CacheGeometry, DenseScheme, HalfDenseScheme},
    fingerprint::ModelFingerprint,
    model::{CausalLm, ModelConfig},
};
use burn_million_pq::{cache::PqScheme, codebook::Codebooks};
use burn_zack::{
    cache::ZackScheme,
    compose::{ReducedCodebooks, ZackHackScheme, ZackPqScheme},
};

use crate::zack_arg::ZackArg;

/// `pq:` parameters: the codebook file and the recent window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PqArg {
    /// Codebook file written by `calibrate` (required).
    pub codebooks: PathBuf,
    /// Recent slots kept in f32 (default [`PqArg::DEFAULT_WINDOW`]).
    pub window: usize,
}

impl PqArg {
    /// The recent window when `window` is not given.
    pub const DEFAULT_WINDOW: usize = 64;
}

impl FromStr for PqArg {
    type Err = String;

    /// `codebooks=PATH[,window=N]`, in any order (a path may not contain `,`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (mut codebooks, mut window) = (None, Self::DEFAULT_WINDOW);
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| format!("`{pair}` is not key=value"))?;
            match key {
                "codebooks" if value.is_empty() => return Err("`codebooks` needs a path".into()),
                "codebooks" => codebooks = Some(PathBuf::from(value)),
                "window" => window = value.parse().map_err(|_| format!("window `{value}` is not a number"))?,
                other => return Err(format!("unknown pq key `{other}` (codebooks, window)")),
            }
        }
        let codebooks = codebooks.ok_or("pq needs `codebooks=PATH` (a file written by `calibrate`)")?;
        Ok(Self { codebooks, window })
    }
}

/// A KV cache scheme chosen on the command line (parsed, not yet checked against a model).
#[derive(Debug, Clone, PartialEq)]
pub enum SchemeArg {
    /// Uncompressed K/V.
    Dense,
    /// Uncompressed K/V stored in f16.
    HalfDense,
    /// HACK: 2- or 4-bit K/V codes, attention on the codes.
    Hack(HackConfig),
    /// MILLION: product-quantized K/V with trained codebooks, lookup-table attention.
    Pq(PqArg),
    /// ZACK: K/V reduced along the head dimension by calibrated rotations, adaptive ranks.
    Zack(ZackArg),
    /// ZACK followed by HACK quantization of the reduced keys and values.
    ZackHack(ZackArg, HackConfig),
    /// ZACK followed by product quantization of the reduced keys and values.
    ZackPq(ZackArg, PqArg),
}

impl FromStr for SchemeArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((first, second)) = s.split_once('+') {
            return match (first.parse()?, second.parse()?) {
                (Self::Zack(zack), Self::Hack(hack)) => Ok(Self::ZackHack(zack, hack)),
                (Self::Zack(zack), Self::Pq(pq)) => Ok(Self::ZackPq(zack, pq)),
                _ => Err(format!("`{s}`: the compositions supported are `zack:…+hack:…` and `zack:…+pq:…`")),
            };
        }
        if let Some(preset) = HackConfig::preset(s) {
            return Ok(Self::Hack(preset));
        }
        let (name, params) = s.split_once(':').unwrap_or((s, ""));
        match name {
            "dense" => match params {
                "" | "storage=f32" => Ok(Self::Dense),
                "storage=f16" => Ok(Self::HalfDense),
                other => Err(format!("`dense` takes only `storage=f32` or `storage=f16` (got `{other}`)")),
            },
            "hack" => params.parse().map(Self::Hack).map_err(|e| e.to_string()),
            "pq" => params.parse().map(Self::Pq),
            "zack" => params.parse().map(Self::Zack),
            other => {
                Err(format!("unknown KV scheme `{other}` (available: dense, hack, hack2, hack3, hack4, pq, zack)"))
            }
        }
    }
}

/// A scheme ready to build caches: a [`SchemeArg`] resolved against the loaded model.
#[derive(Debug, Clone)]
pub enum Scheme {
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

impl Scheme {
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

impl SchemeArg {
    /// Mean bits per cached element at a context of `context` tokens for `config`'s model, every
    /// piece of metadata and every float slot amortized, where the scheme's format gives it in
    /// closed form (dense and HACK); None for the others (their tables give the bits measured at
    /// the end of a window).
    pub fn mean_bits_per_element(&self, config: &ModelConfig, context: usize) -> Option<f64> {
        match self {
            Self::Dense => Some(32.0),
            Self::HalfDense => Some(16.0),
            Self::Hack(hack) => Some(burn_hack_attn::cache::mean_bits_per_element(hack, config.head_dim, context)),
            Self::Pq(_) | Self::Zack(_) | Self::ZackHack(..) | Self::ZackPq(..) => None,
        }
    }

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
    ) -> anyhow::Result<Scheme> {
        Ok(match self {
            Self::Dense => Scheme::Dense(DenseScheme),
            Self::HalfDense => Scheme::HalfDense(HalfDenseScheme),
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
                Scheme::Hack(scheme)
            }
            Self::Zack(arg) => {
                let fingerprint = fingerprint_of(model_path, fingerprint)?;
                Scheme::Zack(
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
                Scheme::ZackHack(ZackHackScheme::new(zack, hack.clone())?)
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
                Scheme::ZackPq(scheme)
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
                Scheme::Pq(PqScheme::new(Arc::new(books), arg.window))
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

/// Calls `$run($scheme_value, ...)` with the concrete scheme a [`Scheme`] holds; `$run` is a
/// path, so it may carry generic arguments: `with_scheme!(scheme, run::<B, _>, (x, y))`.
#[macro_export]
macro_rules! with_scheme {
    ($scheme:expr, $run:path, ( $($a:expr),* )) => {{
        use $crate::scheme_arg::Scheme;
        match $scheme {
            Scheme::Dense(scheme) => $run(scheme, $($a),*),
            Scheme::HalfDense(scheme) => $run(scheme, $($a),*),
            Scheme::Hack(scheme) => $run(scheme, $($a),*),
            Scheme::Pq(scheme) => $run(scheme, $($a),*),
            Scheme::Zack(scheme) => $run(scheme, $($a),*),
            Scheme::ZackHack(scheme) => $run(scheme, $($a),*),
            Scheme::ZackPq(scheme) => $run(scheme, $($a),*),
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dense_hack_and_rejects_unknown() {
        assert_eq!("dense".parse::<SchemeArg>(), Ok(SchemeArg::Dense));
        assert_eq!("dense:storage=f32".parse::<SchemeArg>(), Ok(SchemeArg::Dense));
        assert_eq!("dense:storage=f16".parse::<SchemeArg>(), Ok(SchemeArg::HalfDense));
        assert!("dense:bits=2".parse::<SchemeArg>().is_err());
        assert!("dense:storage=bf16".parse::<SchemeArg>().unwrap_err().contains("storage=f16"));
        assert!("zip".parse::<SchemeArg>().unwrap_err().contains("unknown KV scheme"));
        let hack = "hack:bits=4,pi=32,round=nearest".parse::<SchemeArg>().unwrap();
        assert_eq!(hack, SchemeArg::Hack("bits=4,pi=32,round=nearest".parse().unwrap()));
        assert!("hack:bits=3".parse::<SchemeArg>().unwrap_err().contains("bit width"));
        let composed = "zack:rotations=r.safetensors,rate=0.25+hack:bits=2,pi=32".parse::<SchemeArg>().unwrap();
        let zack = "rotations=r.safetensors,rate=0.25".parse().unwrap();
        assert_eq!(composed, SchemeArg::ZackHack(zack, "bits=2,pi=32".parse().unwrap()));
        assert!("hack:bits=2+zack:rotations=r".parse::<SchemeArg>().unwrap_err().contains("zack:…+hack:…"));
        let composed = "zack:rotations=r,rate=0.25+pq:codebooks=b,window=8".parse::<SchemeArg>().unwrap();
        let pq = PqArg { codebooks: PathBuf::from("b"), window: 8 };
        assert_eq!(composed, SchemeArg::ZackPq("rotations=r,rate=0.25".parse().unwrap(), pq));
        assert!("zack:rotations=r+pq:window=8".parse::<SchemeArg>().unwrap_err().contains("codebooks=PATH"));
        assert!("zack:rotations=r+hack:bits=5".parse::<SchemeArg>().unwrap_err().contains("bit width"));
    }

    #[test]
    fn parses_pq_and_rejects_bad_parameters() {
        let pq = |s: &str| s.parse::<SchemeArg>();
        let arg = |path: &str, window| SchemeArg::Pq(PqArg { codebooks: PathBuf::from(path), window });
        assert_eq!(pq("pq:codebooks=/tmp/b.safetensors,window=16"), Ok(arg("/tmp/b.safetensors", 16)));
        assert_eq!(pq("pq:window=0,codebooks=b.safetensors"), Ok(arg("b.safetensors", 0)));
        assert_eq!(pq("pq:codebooks=b.safetensors"), Ok(arg("b.safetensors", 64)));
        assert!(pq("pq").unwrap_err().contains("codebooks=PATH"));
        assert!(pq("pq:window=8").unwrap_err().contains("codebooks=PATH"));
        assert!(pq("pq:codebooks=").unwrap_err().contains("needs a path"));
        assert!(pq("pq:codebooks=b,window=x").unwrap_err().contains("not a number"));
        assert!(pq("pq:codebooks=b,window=-1").unwrap_err().contains("not a number"));
        assert!(pq("pq:codebooks=b,m=32").unwrap_err().contains("unknown pq key `m`"));
        assert!(pq("pq:codebooks").unwrap_err().contains("not key=value"));
    }

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
        let arg: SchemeArg = format!("pq:codebooks={},window=8", books_path.display()).parse().unwrap();
        let message = |result: anyhow::Result<Scheme>| format!("{:#}", result.unwrap_err());

        match arg.resolve(&model, &tiny_config(2), None).unwrap() {
            Scheme::Pq(scheme) => assert_eq!((scheme.window, &*scheme.codebooks), (8, &books)),
            other => panic!("resolved to {other:?}"),
        }
        let wrong_model = message(arg.resolve(&other_model, &tiny_config(2), None));
        assert!(wrong_model.contains("books.safetensors") && wrong_model.contains("other.gguf"), "{wrong_model}");
        assert!(wrong_model.contains("calibrated on model"), "{wrong_model}");
        let wrong_geometry = message(arg.resolve(&model, &tiny_config(3), None));
        assert!(wrong_geometry.contains("3 layers"), "{wrong_geometry}");
        let missing: SchemeArg = "pq:codebooks=/nonexistent/books.safetensors".parse().unwrap();
        let missing = message(missing.resolve(&model, &tiny_config(2), None));
        assert!(missing.contains("/nonexistent/books.safetensors"), "{missing}");
        assert!(matches!(SchemeArg::Dense.resolve(&model, &tiny_config(2), None), Ok(Scheme::Dense(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
