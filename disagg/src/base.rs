//! [`BaseModel`]: the model a process loads once and prepares for each scheme it runs.

use burn_kvschemes::{AnyScheme, SchemeSpec};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use burn_kvcompress::{
    loading::{load_model, LoadedModel},
    model::{CausalLm, ModelOps},
    paths::default_model_path,
    tokenizer::Tokenizer,
};
use burn_kvtransfer::ModelFingerprint;
use kvcompress_cli::backend_choice::KernelBackend;

use crate::ModelSource;

/// A loaded model with what names it (a path, or a random model's label) and its fingerprint.
pub struct BaseModel<B: KernelBackend> {
    loaded: LoadedModel<B>,
    label: PathBuf,
    /// What both sides of a transfer must agree on.
    pub fingerprint: ModelFingerprint,
}

impl<B: KernelBackend> BaseModel<B> {
    /// Loads `source` onto `device` with weights of `source.weights`' type, its products, norms
    /// and rotary embedding run by the backend's kernels (unless `source.plain_ops`), saying on
    /// stderr how long it took.
    pub fn load(source: &ModelSource, device: &B::Device) -> anyhow::Result<Self> {
        let started = Instant::now();
        let base = match source.random_model {
            Some(shape) => {
                let seed = source.weights_seed;
                Self {
                    loaded: shape.load::<B>(seed, device)?,
                    label: shape.label(seed),
                    fingerprint: shape.fingerprint(seed),
                }
            }
            None => {
                let path = source.model.clone().unwrap_or_else(default_model_path);
                let fingerprint =
                    ModelFingerprint::of_path(&path).with_context(|| format!("hashing {}", path.display()))?;
                let loaded = load_model::<B>(&path, device).with_context(|| {
                    format!("loading {} (run `cargo xtask fetch-model` for the default model)", path.display())
                })?;
                Self { loaded, label: path, fingerprint }
            }
        };
        let Self { loaded: LoadedModel { model, tokenizer }, label, fingerprint } = base;
        let mut model = model.with_weights_as(source.weights.dtype())?;
        if !source.plain_ops {
            model = model.with_ops(ModelOps::of_backend::<B>());
        }
        let base = Self { loaded: LoadedModel { model, tokenizer }, label, fingerprint };
        eprintln!(
            "[{} loaded with {} weights in {:.1} s]",
            base.label.display(),
            source.weights.name(),
            started.elapsed().as_secs_f64()
        );
        Ok(base)
    }

    /// The `--kv` scheme `kv` resolved against this model, and the model it runs with (ZACK folds
    /// rotations into a copy of the weights; the other schemes share the loaded ones).
    pub fn prepared(&self, kv: &str) -> anyhow::Result<(CausalLm<B>, AnyScheme)> {
        let arg: SchemeSpec = kv.parse().map_err(anyhow::Error::msg)?;
        let scheme = arg.resolve(&self.label, self.loaded.model.config(), Some(self.fingerprint))?;
        Ok((scheme.prepare(self.loaded.model.clone())?, scheme))
    }

    /// The model's tokenizer, if its files define one.
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.loaded.tokenizer.as_ref()
    }
}
