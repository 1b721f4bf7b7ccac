//! A ZACK + HACK cache as a [`LayerState`] and back: the codes, metadata, sums and tail exactly
//! as held. Tensors: `k{h}_words`, `k{h}_params`, `k{h}_sums` per KV head `h`; `v_words`,
//! `v_params`, `v_sums` once a value block has closed; `v_tail` while the tail
//! is not empty, at the widths HACK's state gives them ([`export_codes`]). Rotations and ranks do
//! not travel (the scheme's name carries their digests).

use burn_hack_attn::{
    cache::{export_codes, import_codes},
    kernels::HackBackend,
};
use burn_kvcompress::{
    cache::{CacheGeometry, KvScheme, LayerState, StateTensor, TransferableCache, TransferableScheme},
    error::CacheError,
};

use super::{ZackHackCache, ZackHackScheme};
use burn_zack::kernels::ZackBackend;

impl<B: ZackBackend + HackBackend> TransferableCache<B> for ZackHackCache<B> {
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        for (h, codes) in self.keys.iter().enumerate() {
            export_codes(&format!("k{h}"), codes, self.config.key_bits, &mut tensors);
        }
        if let Some(values) = &self.values {
            export_codes("v", values, self.config.key_bits, &mut tensors);
        }
        if let Some(tail) = &self.tail {
            tensors.push(StateTensor::from_float("v_tail", tail));
        }
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
        let (bits, pi) = (self.hack().key_bits as usize, self.hack().partition);
        let one_head = CacheGeometry { kv_heads: 1, ..geometry };
        for (h, &rank) in cache.layout.qk_ranks.iter().enumerate() {
            let (words, parts) = (rank * bits / 32, rank / cache.key_group(h));
            cache.keys.push(import_codes(&format!("k{h}"), &uploaded, len, words, parts, one_head)?);
        }
        let (blocks, width) = (len / pi, cache.layout.value_width());
        if blocks > 0 {
            cache.values = Some(import_codes("v", &uploaded, blocks * width, pi * bits / 32, 1, one_head)?);
        }
        let tail_len = len - blocks * pi;
        if tail_len > 0 {
            let tail = uploaded.to_float::<3>("v_tail")?;
            if tail.dims() != [geometry.batch, tail_len, width] {
                return Err(CacheError::State(format!(
                    "`v_tail` has shape {:?}, expected [{}, {tail_len}, {width}]",
                    tail.dims(),
                    geometry.batch
                )));
            }
            cache.tail = Some(tail);
        }
        cache.len = len;
        Ok(cache)
    }
}
