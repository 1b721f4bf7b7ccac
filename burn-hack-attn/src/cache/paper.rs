//! The paper's layout ([`Axes::Paper`](crate::Axes::Paper)): keys quantized per slot on append in
//! channel groups, values per channel in closed blocks of Π slots, the newest `< Π` values in f32
//! (requantization elimination).

use burn::tensor::Tensor;
use burn_kvcompress::{
    cache::{append_slots, AttendOptions, CacheGeometry},
    error::CacheError,
};

use super::{append_codes, key_bytes_per_slot, key_group, value_block_bytes, Codes};
use crate::{
    kernels::{CacheView, HackBackend, QuantizeSpec, RowLayout},
    quant::Rounder,
    HackConfig,
};

/// One layer's K/V in the paper's layout: key codes per slot, value codes per closed block of Π
/// slots, and the newest `< Π` values in f32 (the tail).
#[derive(Debug, Clone)]
pub struct PaperStore<B: HackBackend> {
    pub(super) keys: Option<Codes<B>>,
    pub(super) values: Option<Codes<B>>,
    /// `[batch, kv_heads, tail_len, head_dim]`, `tail_len < Π`.
    pub(super) tail: Option<Tensor<B, 4>>,
    pub(super) len: usize,
}

impl<B: HackBackend> PaperStore<B> {
    /// An empty store.
    pub fn new() -> Self {
        Self { keys: None, values: None, tail: None, len: 0 }
    }

    /// Closed (quantized) V blocks.
    pub fn blocks(&self, head_dim: usize) -> usize {
        self.values.as_ref().map_or(0, |v| v.rows() / head_dim)
    }

    /// What attention reads (None while empty).
    pub fn view(&self, config: &HackConfig, head_dim: usize) -> Option<CacheView<'_, B>> {
        Some(CacheView {
            bits: config.key_bits,
            partition: config.partition,
            head_dim,
            keys: self.keys.as_ref()?,
            values: self.values.as_ref(),
            tail: self.tail.as_ref(),
        })
    }

    /// Appends post-RoPE (and rotated) `k`, `v: [batch, kv_heads, new, head_dim]`: keys are
    /// quantized at once, values join the tail and every full block at its front is quantized.
    pub fn append(
        &mut self,
        config: &HackConfig,
        layer: usize,
        geometry: CacheGeometry,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
    ) -> Result<(), CacheError> {
        let new = k.dims()[2];
        let group = key_group(geometry.head_dim, config.partition);
        let spec = spec(config, layer, geometry, group, 0, RowLayout::Keys { first_slot: self.len });
        let keys = B::hack_quantize(k, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
        let tail = append_slots(self.tail.take(), v);
        self.close_blocks(config, layer, geometry, tail)?;
        self.keys = Some(append_codes(self.keys.take(), keys));
        self.len += new;
        Ok(())
    }

    /// Quantizes every full block at the front of the tail and keeps the rest as the tail.
    fn close_blocks(
        &mut self,
        config: &HackConfig,
        layer: usize,
        geometry: CacheGeometry,
        tail: Tensor<B, 4>,
    ) -> Result<(), CacheError> {
        let [batch, kv_heads, tail_len, d] = tail.dims();
        let pi = config.partition;
        let full = tail_len / pi;
        if full > 0 {
            let first_slot = self.blocks(d) * pi;
            let blocks = tail.clone().narrow(2, 0, full * pi).reshape([batch, kv_heads, full, pi, d]);
            let rows = blocks.swap_dims(3, 4).reshape([batch, kv_heads, full * d, pi]);
            let spec = spec(config, layer, geometry, pi, 1, RowLayout::ValueBlocks { first_slot });
            let codes = B::hack_quantize(rows, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
            self.values = Some(append_codes(self.values.take(), codes));
        }
        let rest = tail_len - full * pi;
        self.tail = (rest > 0).then(|| tail.narrow(2, full * pi, rest));
        Ok(())
    }

    /// HACK attention of `q` over the store.
    pub fn attend(
        &self,
        config: &HackConfig,
        head_dim: usize,
        q: Tensor<B, 4>,
        options: &AttendOptions,
    ) -> Result<Tensor<B, 4>, CacheError> {
        let view =
            self.view(config, head_dim).ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        B::hack_attention(q, &view, options)
    }

    /// Bytes of the storage format (see [`HackCache`](super::HackCache)'s `memory_bytes`).
    pub fn memory_bytes(&self, config: &HackConfig, geometry: CacheGeometry) -> usize {
        let (d, bits, pi) = (geometry.head_dim, config.key_bits, config.partition);
        let blocks = self.blocks(d);
        let per_stream = self.len * key_bytes_per_slot(d, bits, pi)
            + blocks * value_block_bytes(d, bits, pi)
            + (self.len - blocks * pi) * d * 4;
        geometry.batch * geometry.kv_heads * per_stream
    }
}

impl<B: HackBackend> Default for PaperStore<B> {
    fn default() -> Self {
        Self::new()
    }
}

/// The quantize call of `config`'s codes for `layer`: key codes draw their stochastic rounding
/// from stream `2 · layer`, value codes (`tensor = 1`) from `2 · layer + 1`.
pub(super) fn spec(
    config: &HackConfig,
    layer: usize,
    geometry: CacheGeometry,
    group: usize,
    tensor: u32,
    layout: RowLayout,
) -> QuantizeSpec {
    QuantizeSpec {
        bits: if tensor == 0 { config.key_bits } else { config.value_bits },
        group,
        head_dim: geometry.head_dim,
        partition: config.partition,
        rounder: Rounder::new(config.rounding, 2 * layer as u32 + tensor),
        clip: config.clip,
        layout,
    }
}
