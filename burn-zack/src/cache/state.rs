//! A ZACK cache as a [`LayerState`] and back: `keys` `[batch, slots, Σ k_qk]` and `values`
//! `[batch, slots, Σ k_vo]`, in the cache's storage (f32 or f16). Rotations and ranks do not
//! travel: both sides load the same rotation file and pick the same ranks, which the scheme's
//! name (with both digests) makes the transfer handshake check.

use crate::kernels::ZackBackend;
use burn_kvcompress::{
    cache::{CacheGeometry, KvCache, KvScheme, LayerState, StateTensor, TransferableCache, TransferableScheme},
    error::CacheError,
};

use super::{ZackCache, ZackScheme};

impl<B: ZackBackend> TransferableCache<B> for ZackCache<B> {
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        if let Some((k, v)) = self.keys_values() {
            tensors.push(StateTensor::from_float("keys", &k));
            tensors.push(StateTensor::from_float("values", &v));
        }
        LayerState { tokens: self.len(), tensors }
    }
}

impl<B: ZackBackend> TransferableScheme<B> for ZackScheme {
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<ZackCache<B>, CacheError> {
        let mut cache: ZackCache<B> = self.new_cache(layer, geometry, device);
        cache.check_usable()?;
        if state.tokens == 0 {
            return if state.tensors.is_empty() {
                Ok(cache)
            } else {
                Err(CacheError::State("an empty ZACK state carries tensors".into()))
            };
        }
        let uploaded = state.upload::<B>(device);
        let (k, v) = (uploaded.to_float::<3>("keys")?, uploaded.to_float::<3>("values")?);
        let (b, n) = (geometry.batch, state.tokens);
        let (kw, vw) = (cache.layout.key_width(), cache.layout.value_width());
        if k.dims() != [b, n, kw] || v.dims() != [b, n, vw] {
            return Err(CacheError::State(format!(
                "ZACK state of shapes {:?} and {:?}, expected [{b}, {n}, {kw}] and [{b}, {n}, {vw}]",
                k.dims(),
                v.dims()
            )));
        }
        let dtype = cache.storage.dtype();
        cache.keys = Some(k.cast(dtype));
        cache.values = Some(v.cast(dtype));
        Ok(cache)
    }
}
