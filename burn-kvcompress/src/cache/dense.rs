//! The dense cache: keys and values kept as they are. Prefill-then-decode through it equals one
//! full forward pass up to float summation order (tested within 1e-5 per logit).

use burn::tensor::{backend::Backend, Tensor};
use serde::{Deserialize, Serialize};

use super::{
    attention_reference, AttendOptions, CacheGeometry, KvCache, KvScheme, LayerState, StateTensor, TransferableCache,
    TransferableScheme,
};
use crate::error::CacheError;

/// The scheme that compresses nothing (`--kv dense`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenseScheme;

/// Uncompressed K/V of one layer, `[batch, kv_heads, len, head_dim]` each.
#[derive(Debug, Clone)]
pub struct DenseCache<B: Backend> {
    geometry: CacheGeometry,
    k: Option<Tensor<B, 4>>,
    v: Option<Tensor<B, 4>>,
}

impl<B: Backend> DenseCache<B> {
    /// An empty cache for the given geometry.
    pub fn new(geometry: CacheGeometry) -> Self {
        Self { geometry, k: None, v: None }
    }

    /// The cached keys and values, `[batch, kv_heads, len, head_dim]` each (None while empty).
    pub fn keys_values(&self) -> Option<(Tensor<B, 4>, Tensor<B, 4>)> {
        Some((self.k.clone()?, self.v.clone()?))
    }
}

/// `new` appended to `old` along the slot axis (axis 2), or `new` alone when `old` is None.
pub fn append_slots<B: Backend>(old: Option<Tensor<B, 4>>, new: Tensor<B, 4>) -> Tensor<B, 4> {
    match old {
        Some(old) => Tensor::cat(vec![old, new], 2),
        None => new,
    }
}

impl<B: Backend> KvCache<B> for DenseCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.geometry.check_append(k.dims(), v.dims())?;
        self.k = Some(append_slots(self.k.take(), k));
        self.v = Some(append_slots(self.v.take(), v));
        Ok(())
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        let (k, v) = self.keys_values().ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        attention_reference(q, k, v, options)
    }

    fn len(&self) -> usize {
        self.k.as_ref().map_or(0, |k| k.dims()[2])
    }

    fn memory_bytes(&self) -> usize {
        let g = self.geometry;
        2 * g.batch * g.kv_heads * self.len() * g.head_dim * std::mem::size_of::<f32>()
    }
}

impl<B: Backend> KvScheme<B> for DenseScheme {
    type Cache = DenseCache<B>;

    fn new_cache(&self, _layer: usize, geometry: CacheGeometry, _device: &B::Device) -> Self::Cache {
        DenseCache::new(geometry)
    }

    fn name(&self) -> String {
        "dense".into()
    }
}

impl<B: Backend> TransferableCache<B> for DenseCache<B> {
    /// Tensors `k` and `v`, `[batch, kv_heads, len, head_dim]` f32 each (none while empty).
    fn export_state(&self) -> LayerState {
        let tensors = match self.keys_values() {
            Some((k, v)) => vec![StateTensor::from_float("k", &k), StateTensor::from_float("v", &v)],
            None => Vec::new(),
        };
        LayerState { tokens: self.len(), tensors }
    }
}

impl<B: Backend> TransferableScheme<B> for DenseScheme {
    fn import_state(
        &self,
        _layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<DenseCache<B>, CacheError> {
        let mut cache = DenseCache::new(geometry);
        if state.tokens == 0 {
            return Ok(cache);
        }
        let k = state.get("k")?.to_float::<B, 4>(device)?;
        let v = state.get("v")?.to_float::<B, 4>(device)?;
        if k.dims()[2] != state.tokens {
            return Err(CacheError::State(format!("`k` holds {} slots, the state says {}", k.dims()[2], state.tokens)));
        }
        cache.append(k, v).map_err(|e| CacheError::State(e.to_string()))?;
        Ok(cache)
    }
}
