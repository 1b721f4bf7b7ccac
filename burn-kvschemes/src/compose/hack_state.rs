//! A ZACK + HACK cache as a [`LayerState`] and back: the codes, metadata, sums and tail exactly
//! as held. Tensors: `k{h}_words`, `k{h}_params`, `k{h}_sums` per KV head `h`
//! ([`PaperKeys::export`]); `v_words`, `v_params`, `v_sums` once a value block has closed and
//! `v_tail` (`[batch, 1, tail_len, Σ k_vo]`) while the tail is not empty
//! ([`PaperValues::export`]). Rotations and ranks do not travel (the scheme's name carries their
//! digests).

use burn_hack_attn::{
    cache::{PaperKeys, PaperValues},
    kernels::HackBackend,
};
use burn_kvcompress::{
    cache::{CacheGeometry, KvScheme, LayerState, TransferableCache, TransferableScheme},
    error::CacheError,
};

use super::{ZackHackCache, ZackHackScheme};
use burn_zack::kernels::ZackBackend;

impl<B: ZackBackend + HackBackend> TransferableCache<B> for ZackHackCache<B> {
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        for (h, keys) in self.keys.iter().enumerate() {
            keys.export(&format!("k{h}"), &self.config, &mut tensors);
        }
        self.values.export("v", &self.config, &mut tensors);
        LayerState { tokens: self.len, tensors }
    }
}

impl<B: ZackBackend + HackBackend> TransferableScheme<B> for ZackHackScheme {
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<ZackHackCache<B>, CacheError> {
        let mut cache: ZackHackCache<B> = self.new_cache(layer, geometry, device);
        cache.check_usable()?;
        let len = state.tokens;
        if len == 0 {
            return Ok(cache);
        }
        let uploaded = state.upload::<B>(device);
        let (hack, one_stream) = (self.hack(), CacheGeometry { kv_heads: 1, ..geometry });
        for (h, keys) in cache.keys.iter_mut().enumerate() {
            let rank = cache.layout.qk_ranks[h];
            *keys = PaperKeys::import(rank, &format!("k{h}"), hack, &uploaded, one_stream, len)?;
        }
        cache.values = PaperValues::import(cache.layout.value_width(), "v", hack, &uploaded, one_stream, len)?;
        cache.len = len;
        Ok(cache)
    }
}
