//! A HACK cache as a [`LayerState`] and back: the codes, metadata, sums and tail exactly as held,
//! so a cache rebuilt on the decode side attends exactly as the prefill side's.
//!
//! Tensors: `k_words`, `k_params`, `k_sums` (keys, one row per slot); `v_words`, `v_params`,
//! `v_sums` (closed blocks, present once a block has closed); `v_tail` (present while the tail is
//! not empty). Shapes as in [`Codes`]. The state holds the format's widths, which [`HackCache`]'s
//! `memory_bytes` counts: packed words and each partition's fp16 (min, scale) word as 32-bit
//! integers, code sums as `u8` or `u16` ([`sum_bytes`]; the device holds them as 32-bit
//! integers), the tail in f32.

use burn_kvcompress::{
    cache::{CacheGeometry, LayerState, StateDType, StateTensor, TransferableCache, TransferableScheme},
    error::CacheError,
};

use super::{sum_bytes, Codes, HackCache};
use crate::{kernels::HackBackend, HackConfig};

/// Appends `codes` of `bits`-bit codes to `out` as `{prefix}_words`, `{prefix}_params` and
/// `{prefix}_sums` (at the width [`sum_bytes`] gives their partitions).
pub fn export_codes<B: HackBackend>(prefix: &str, codes: &Codes<B>, bits: u8, out: &mut Vec<StateTensor>) {
    let (words, parts) = (codes.words.dims()[3], codes.sums.dims()[3]);
    let group = words * 32 / (bits as usize * parts);
    let sums = match sum_bytes(bits, group) {
        1 => StateDType::U8,
        _ => StateDType::U16,
    };
    out.push(StateTensor::from_int(&format!("{prefix}_words"), &codes.words));
    out.push(StateTensor::from_int(&format!("{prefix}_params"), &codes.params));
    out.push(
        StateTensor::from_int_as(&format!("{prefix}_sums"), &codes.sums, sums)
            .expect("a partition's code sum fits the width sum_bytes gives it"),
    );
}

/// Reads the codes [`export_codes`] wrote under `prefix`, checking that they hold `rows` rows of
/// `words` packed words and `parts` partitions for `geometry`'s batch and KV heads.
pub fn import_codes<B: HackBackend>(
    prefix: &str,
    state: &LayerState,
    rows: usize,
    words: usize,
    parts: usize,
    geometry: CacheGeometry,
    device: &B::Device,
) -> Result<Codes<B>, CacheError> {
    let get = |name: &str| state.get(&format!("{prefix}_{name}"));
    let codes = Codes {
        words: get("words")?.to_int::<B, 4>(device)?,
        params: get("params")?.to_int::<B, 4>(device)?,
        sums: get("sums")?.to_int::<B, 4>(device)?,
    };
    let (b, h) = (geometry.batch, geometry.kv_heads);
    let expected = ([b, h, rows, words], [b, h, rows, parts]);
    let found = (codes.words.dims(), [codes.params.dims(), codes.sums.dims()]);
    if found.0 != expected.0 || found.1.iter().any(|d| *d != expected.1) {
        return Err(CacheError::State(format!(
            "`{prefix}` codes have shapes {:?} / {:?}, expected {:?} / {:?}",
            found.0, found.1, expected.0, expected.1
        )));
    }
    Ok(codes)
}

impl<B: HackBackend> TransferableCache<B> for HackCache<B> {
    fn export_state(&self) -> LayerState {
        let mut tensors = Vec::new();
        if let Some(keys) = &self.keys {
            export_codes("k", keys, self.config.bits, &mut tensors);
        }
        if let Some(values) = &self.values {
            export_codes("v", values, self.config.bits, &mut tensors);
        }
        if let Some(tail) = &self.tail {
            tensors.push(StateTensor::from_float("v_tail", tail));
        }
        LayerState { tokens: self.len, tensors }
    }
}

impl<B: HackBackend> TransferableScheme<B> for HackConfig {
    fn import_state(
        &self,
        layer: usize,
        geometry: CacheGeometry,
        state: &LayerState,
        device: &B::Device,
    ) -> Result<HackCache<B>, CacheError> {
        let mut cache = HackCache::new(*self, layer, geometry);
        cache.check_supported()?;
        let len = state.tokens;
        if len == 0 {
            return Ok(cache);
        }
        let (d, bits, pi) = (geometry.head_dim, self.bits as usize, self.partition);
        let group = super::key_group(d, pi);
        cache.keys = Some(import_codes("k", state, len, d * bits / 32, d / group, geometry, device)?);
        let blocks = len / pi;
        if blocks > 0 {
            cache.values = Some(import_codes("v", state, blocks * d, pi * bits / 32, 1, geometry, device)?);
        }
        let tail_len = len - blocks * pi;
        if tail_len > 0 {
            let tail = state.get("v_tail")?.to_float::<B, 4>(device)?;
            if tail.dims() != [geometry.batch, geometry.kv_heads, tail_len, d] {
                return Err(CacheError::State(format!("`v_tail` has shape {:?}", tail.dims())));
            }
            cache.tail = Some(tail);
        }
        cache.len = len;
        Ok(cache)
    }
}
