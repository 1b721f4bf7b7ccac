//! Layer-wise streaming without touching the model: a scheme wrapper whose caches publish their
//! exported state right after each append. During prefill the model appends to layer 0's cache,
//! then layer 1's, ..., so each layer is published while later layers still compute. It is meant
//! for a one-shot prefill (one append per layer): the server refuses a layer published twice.

use burn::tensor::{backend::Backend, FloatDType, Tensor};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, KvCache, KvScheme, LayerState, TransferableCache},
    error::CacheError,
};

/// Where published states go: `(layer, state)`.
pub type Publish<'a> = &'a dyn Fn(usize, LayerState);

/// Wraps a scheme so its caches publish their state after every append.
pub struct PublishingScheme<'a, S> {
    /// The wrapped scheme.
    pub inner: &'a S,
    /// The sink.
    pub publish: Publish<'a>,
}

/// A cache that publishes its state after every append. It forwards every method of the cache it
/// wraps, the rotated ones included: a model that rotates keys and queries itself (in its RoPE
/// launch) must do so on the prefill side too, or the published state differs from the one the
/// same prompt leaves in the wrapped cache alone (on CUDA, rotated in f32 before the cast to f16
/// rather than after).
pub struct PublishingCache<'a, C> {
    /// The wrapped cache.
    pub inner: C,
    layer: usize,
    publish: Publish<'a>,
}

impl<B: Backend, C: TransferableCache<B>> KvCache<B> for PublishingCache<'_, C> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.inner.append(k, v)?;
        (self.publish)(self.layer, self.inner.export_state());
        Ok(())
    }

    fn append_rotated(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.inner.append_rotated(k, v)?;
        (self.publish)(self.layer, self.inner.export_state());
        Ok(())
    }

    fn attend_rotated(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.inner.attend_rotated(q, options)
    }

    fn key_rotation(&self) -> Option<Tensor<B, 3>> {
        self.inner.key_rotation()
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.inner.attend(q, options)
    }

    fn len(&self) -> usize {
        self.inner.len()
    }

    fn memory_bytes(&self) -> usize {
        self.inner.memory_bytes()
    }

    fn input_dtype(&self) -> FloatDType {
        self.inner.input_dtype()
    }
}

impl<'a, B: Backend, S: KvScheme<B>> KvScheme<B> for PublishingScheme<'a, S>
where
    S::Cache: TransferableCache<B>,
{
    type Cache = PublishingCache<'a, S::Cache>;

    fn new_cache(&self, layer: usize, geometry: CacheGeometry, device: &B::Device) -> Self::Cache {
        PublishingCache { inner: self.inner.new_cache(layer, geometry, device), layer, publish: self.publish }
    }

    fn name(&self) -> String {
        self.inner.name()
    }
}
