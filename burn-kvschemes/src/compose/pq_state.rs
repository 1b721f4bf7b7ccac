//! A ZACK + PQ cache as a [`LayerState`] and back: `k_codes`, `v_codes` (i32 words `[batch, 1,
//! coded, words]`, present once a slot is coded) and `k_recent`, `v_recent` (f32 `[batch,
//! recent, Σ k]`, present while the window holds slots). Rotations, ranks and codebooks do not
//! travel: the scheme's name carries their digests.

use burn_kvcompress::{
    cache::{CacheGeometry, KvScheme, LayerState, StateTensor, TransferableCache, TransferableScheme},
    error::CacheError,
};
use burn_million_pq::kernels::PqBackend;

use super::{ZackPqCache, ZackPqScheme};
use burn_zack::kernels::ZackBackend;

impl<B: ZackBackend + PqBackend> TransferableCache<B> for ZackPqCache<B> {
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        if let Some([k, v]) = &self.codes {
            tensors.push(StateTensor::from_int("k_codes", k));
            tensors.push(StateTensor::from_int("v_codes", v));
        }
        if let Some([k, v]) = &self.recent {
            tensors.push(StateTensor::from_float("k_recent", k));
            tensors.push(StateTensor::from_float("v_recent", v));
        }
        LayerState { tokens: self.len, tensors }
    }
}

impl<B: ZackBackend + PqBackend> TransferableScheme<B> for ZackPqScheme {
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<ZackPqCache<B>, CacheError> {
        let mut cache: ZackPqCache<B> = self.new_cache(layer, geometry, device);
        cache.check_usable()?;
        let uploaded = state.upload::<B>(device);
        let batch = geometry.batch;
        let has = |name: &str| state.tensors.iter().any(|t| t.name == name);
        let shape_error = |name: &str, found: &[usize], expected: String| {
            CacheError::State(format!("`{name}` has shape {found:?}, expected {expected}"))
        };
        let mut coded = 0;
        if has("k_codes") || has("v_codes") {
            let codes = [uploaded.to_int::<4>("k_codes")?, uploaded.to_int::<4>("v_codes")?];
            coded = codes[0].dims()[2];
            for ((name, tensor), config) in ["k_codes", "v_codes"].into_iter().zip(&codes).zip(&cache.configs) {
                let words = config.words_per_vector();
                if tensor.dims() != [batch, 1, coded, words] || coded == 0 {
                    return Err(shape_error(name, &tensor.dims(), format!("[{batch}, 1, {coded} (>= 1), {words}]")));
                }
            }
            cache.codes = Some(codes);
        }
        let mut recent = 0;
        if has("k_recent") || has("v_recent") {
            let tensors = [uploaded.to_float::<3>("k_recent")?, uploaded.to_float::<3>("v_recent")?];
            recent = tensors[0].dims()[1];
            let widths = [cache.layout.key_width(), cache.layout.value_width()];
            for ((name, tensor), width) in ["k_recent", "v_recent"].into_iter().zip(&tensors).zip(widths) {
                if tensor.dims() != [batch, recent, width] || recent == 0 {
                    return Err(shape_error(name, &tensor.dims(), format!("[{batch}, {recent} (>= 1), {width}]")));
                }
            }
            cache.recent = Some(tensors);
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
