//! A PQ cache as a [`LayerState`] and back: `k_codes`, `v_codes` (i32 words, present once a slot
//! is coded) and `k_recent`, `v_recent` (f32, present while the window holds slots). Codebooks do
//! not travel: both sides load the same file, which the scheme's name (with the codebooks'
//! digest) makes the transfer handshake check.

use burn_kvcompress::{
    cache::{CacheGeometry, KvScheme, LayerState, StateTensor, TransferableCache, TransferableScheme},
    error::CacheError,
};

use super::{PqCache, PqScheme};
use crate::kernels::PqBackend;

impl<B: PqBackend> TransferableCache<B> for PqCache<B> {
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        if let Some((k, v)) = &self.codes {
            tensors.push(StateTensor::from_int("k_codes", k));
            tensors.push(StateTensor::from_int("v_codes", v));
        }
        if let Some((k, v)) = &self.recent {
            tensors.push(StateTensor::from_float("k_recent", k));
            tensors.push(StateTensor::from_float("v_recent", v));
        }
        LayerState { tokens: self.len, tensors }
    }
}

impl<B: PqBackend> TransferableScheme<B> for PqScheme {
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<PqCache<B>, CacheError> {
        let mut cache: PqCache<B> = self.new_cache(layer, geometry, device);
        cache.check_usable()?;
        let uploaded = state.upload::<B>(device);
        let (b, h, d) = (geometry.batch, geometry.kv_heads, geometry.head_dim);
        let has = |name: &str| state.tensors.iter().any(|t| t.name == name);
        let shape_error = |name: &str, found: [usize; 4], expected: String| {
            CacheError::State(format!("`{name}` has shape {found:?}, expected {expected}"))
        };
        let mut coded = 0;
        if has("k_codes") {
            let (k, v) = (uploaded.to_int::<4>("k_codes")?, uploaded.to_int::<4>("v_codes")?);
            let words = cache.config.words_per_vector();
            coded = k.dims()[2];
            for (name, dims) in [("k_codes", k.dims()), ("v_codes", v.dims())] {
                if dims != [b, h, coded, words] || coded == 0 {
                    return Err(shape_error(name, dims, format!("[{b}, {h}, >=1, {words}] for both")));
                }
            }
            cache.codes = Some((k, v));
        }
        let mut recent = 0;
        if has("k_recent") {
            let (k, v) = (uploaded.to_float::<4>("k_recent")?, uploaded.to_float::<4>("v_recent")?);
            recent = k.dims()[2];
            for (name, dims) in [("k_recent", k.dims()), ("v_recent", v.dims())] {
                if dims != [b, h, recent, d] || recent == 0 {
                    return Err(shape_error(name, dims, format!("[{b}, {h}, >=1, {d}] for both")));
                }
            }
            cache.recent = Some((k, v));
        }
        if coded + recent != state.tokens {
            return Err(CacheError::State(format!(
                "{coded} coded + {recent} recent slots for a state of {} tokens",
                state.tokens
            )));
        }
        cache.len = state.tokens;
        Ok(cache)
    }
}
