//! The prefill engine of a real model and KV scheme.

use burn::tensor::backend::Backend;
use burn_kvcompress::{
    cache::{LayerState, TransferableCache, TransferableScheme},
    model::{logits_to_host, CausalLm},
};

use super::{PrefillEngine, PublishingScheme};
use crate::descriptor::{ModelFingerprint, SchemeDescriptor};
use crate::wire::ModelShape;

/// Prefills prompts with `model` into caches of `scheme`, publishing each layer as it is done.
pub struct ModelPrefill<B: Backend, S> {
    model: CausalLm<B>,
    scheme: S,
    fingerprint: ModelFingerprint,
    device: B::Device,
}

impl<B: Backend, S> ModelPrefill<B, S> {
    /// An engine for a model whose file has `fingerprint`.
    pub fn new(model: CausalLm<B>, scheme: S, fingerprint: ModelFingerprint, device: B::Device) -> Self {
        Self { model, scheme, fingerprint, device }
    }
}

impl<B, S> PrefillEngine for ModelPrefill<B, S>
where
    B: Backend,
    CausalLm<B>: Send,
    S: TransferableScheme<B> + Send + 'static,
    S::Cache: TransferableCache<B>,
{
    fn descriptor(&self) -> SchemeDescriptor {
        SchemeDescriptor { scheme: self.scheme.name(), model: self.fingerprint }
    }

    fn shape(&self) -> ModelShape {
        ModelShape::of(self.model.config())
    }

    fn prefill(&mut self, tokens: &[u32], publish: &dyn Fn(usize, LayerState)) -> Result<Vec<f32>, String> {
        let scheme = PublishingScheme { inner: &self.scheme, publish };
        let mut caches = self.model.new_cache(&scheme, 1, &self.device);
        let logits = self.model.prefill_padded(&[tokens.to_vec()], &mut caches, 0).map_err(|e| e.to_string())?;
        logits_to_host(logits).pop().ok_or_else(|| "prefill returned no logits".to_string())
    }
}
