//! [`PaperKeys`]: keys in the paper's layout, every slot quantized on append in channel groups.

use burn::tensor::Tensor;
use burn_kvcompress::{
    cache::{CacheGeometry, DeviceState, StateTensor},
    error::CacheError,
};

use super::{append_codes, export_codes, import_codes, key_bytes_per_slot, key_group, Codes};
use crate::{
    kernels::{HackBackend, QuantizeSpec, RowLayout},
    HackConfig,
};

/// Keys of `width` channels per stream, every slot quantized on append in partitions of
/// [`key_group`]`(width, Π)` channels: [`Codes`] of one row per slot, `[batch, streams, slots, ·]`.
///
/// One half of [`PaperStore`](super::PaperStore) (one stream per KV head); also the store of keys
/// quantized the same way after another transform (a ZACK head's reduced keys, one stream).
#[derive(Debug, Clone)]
pub struct PaperKeys<B: HackBackend> {
    width: usize,
    codes: Option<Codes<B>>,
}

impl<B: HackBackend> PaperKeys<B> {
    /// An empty store of keys of `width` channels.
    pub fn new(width: usize) -> Self {
        Self { width, codes: None }
    }

    /// Slots held.
    pub fn len(&self) -> usize {
        self.codes.as_ref().map_or(0, Codes::rows)
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.codes.is_none()
    }

    /// The codes (None while empty).
    pub fn codes(&self) -> Option<&Codes<B>> {
        self.codes.as_ref()
    }

    /// Channels per partition.
    pub fn group(&self, config: &HackConfig) -> usize {
        key_group(self.width, config.partition)
    }

    /// Quantizes `k: [batch, streams, new, width]` and appends it; stochastic rounding draws from
    /// `stream` (each store of a model its own).
    pub fn append(&mut self, config: &HackConfig, stream: u32, k: Tensor<B, 4>) -> Result<(), CacheError> {
        let layout = RowLayout::Keys { first_slot: self.len() };
        let spec = QuantizeSpec::of_config(config, config.key_bits, self.group(config), self.width, stream, layout);
        let codes = B::hack_quantize(k, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
        self.codes = Some(append_codes(self.codes.take(), codes));
        Ok(())
    }

    /// The values the codes stand for, `[batch, streams, slots, width]` (None while empty).
    pub fn dequantize(&self, config: &HackConfig) -> Option<Tensor<B, 4>> {
        Some(self.codes.as_ref()?.dequantize(config.key_bits, self.group(config)))
    }

    /// Bytes of the format per stream: packed codes, fp16 (min, scale) and code sums.
    pub fn bytes_per_stream(&self, config: &HackConfig) -> usize {
        self.len() * key_bytes_per_slot(self.width, config.key_bits, config.partition)
    }

    /// Appends the codes to `out` as `{prefix}_words`, `{prefix}_params`, `{prefix}_sums`.
    pub fn export(&self, prefix: &str, config: &HackConfig, out: &mut Vec<StateTensor>) {
        if let Some(codes) = &self.codes {
            export_codes(prefix, codes, config.key_bits, out);
        }
    }

    /// Reads `len` slots of keys of `width` channels that [`export`](Self::export) wrote under
    /// `prefix`, for `geometry`'s batch and `geometry.kv_heads` streams.
    pub fn import(
        width: usize,
        prefix: &str,
        config: &HackConfig,
        state: &DeviceState<B>,
        geometry: CacheGeometry,
        len: usize,
    ) -> Result<Self, CacheError> {
        let mut keys = Self::new(width);
        if len > 0 {
            let (words, parts) = (width * config.key_bits as usize / 32, width / keys.group(config));
            keys.codes = Some(import_codes(prefix, state, len, words, parts, geometry)?);
        }
        Ok(keys)
    }
}
