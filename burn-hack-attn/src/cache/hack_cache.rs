//! One layer's HACK cache.

use burn::tensor::Tensor;
use burn_kvcompress::{
    cache::{append_slots, AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};

use super::{append_codes, key_bytes_per_slot, key_group, key_partitions_fit, value_block_bytes, Codes};
use crate::{
    kernels::{CacheView, HackBackend, QuantizeSpec, RowLayout},
    quant::Rounder,
    HackConfig,
};

/// One layer's compressed K/V for a batch: key codes per slot, value codes per closed block of Π
/// slots, and the newest `< Π` values in f32 (the tail).
#[derive(Debug, Clone)]
pub struct HackCache<B: HackBackend> {
    pub(super) config: HackConfig,
    pub(super) layer: usize,
    pub(super) geometry: CacheGeometry,
    pub(super) keys: Option<Codes<B>>,
    pub(super) values: Option<Codes<B>>,
    /// `[batch, kv_heads, tail_len, head_dim]`, `tail_len < Π`.
    pub(super) tail: Option<Tensor<B, 4>>,
    pub(super) len: usize,
}

impl<B: HackBackend> HackCache<B> {
    /// An empty cache for layer `layer` (which seeds its stochastic rounding). A configuration or
    /// geometry HACK cannot run (see [`HackCache::check_supported`]) fails at the first append.
    pub fn new(config: HackConfig, layer: usize, geometry: CacheGeometry) -> Self {
        Self { config, layer, geometry, keys: None, values: None, tail: None, len: 0 }
    }

    /// Checks the configuration, and that the head dimension is a multiple of 16 and of Π (or
    /// smaller than Π).
    pub fn check_supported(&self) -> Result<(), CacheError> {
        self.config.validate().map_err(|e| CacheError::Unsupported(e.to_string()))?;
        let d = self.geometry.head_dim;
        if !key_partitions_fit(d, self.config.partition) {
            return Err(CacheError::Unsupported(format!(
                "HACK needs a head dimension that is a multiple of 16 and of Π (or smaller than Π); got {d} with Π = {}",
                self.config.partition
            )));
        }
        Ok(())
    }

    /// The configuration.
    pub fn config(&self) -> &HackConfig {
        &self.config
    }

    /// Closed (quantized) V blocks.
    pub fn blocks(&self) -> usize {
        self.values.as_ref().map_or(0, |v| v.rows() / self.geometry.head_dim)
    }

    /// Slots whose values are still in the f32 tail.
    pub fn tail_len(&self) -> usize {
        self.len - self.blocks() * self.config.partition
    }

    /// What attention reads (None while empty).
    pub fn view(&self) -> Option<CacheView<'_, B>> {
        Some(CacheView {
            bits: self.config.bits,
            partition: self.config.partition,
            head_dim: self.geometry.head_dim,
            keys: self.keys.as_ref()?,
            values: self.values.as_ref(),
            tail: self.tail.as_ref(),
        })
    }

    fn spec(&self, group: usize, tensor: u32, layout: RowLayout) -> QuantizeSpec {
        QuantizeSpec {
            bits: self.config.bits,
            group,
            head_dim: self.geometry.head_dim,
            partition: self.config.partition,
            rounder: Rounder::new(self.config.rounding, 2 * self.layer as u32 + tensor),
            layout,
        }
    }

    /// Quantizes every full block at the front of the tail and keeps the rest as the tail.
    fn close_blocks(&mut self, tail: Tensor<B, 4>) -> Result<(), CacheError> {
        let [batch, kv_heads, tail_len, d] = tail.dims();
        let pi = self.config.partition;
        let full = tail_len / pi;
        if full > 0 {
            let first_slot = self.blocks() * pi;
            let blocks = tail.clone().narrow(2, 0, full * pi).reshape([batch, kv_heads, full, pi, d]);
            let rows = blocks.swap_dims(3, 4).reshape([batch, kv_heads, full * d, pi]);
            let spec = self.spec(pi, 1, RowLayout::ValueBlocks { first_slot });
            let codes = B::hack_quantize(rows, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
            self.values = Some(append_codes(self.values.take(), codes));
        }
        let rest = tail_len - full * pi;
        self.tail = (rest > 0).then(|| tail.narrow(2, full * pi, rest));
        Ok(())
    }
}

impl<B: HackBackend> KvCache<B> for HackCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_supported()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        let new = k.dims()[2];
        let group = key_group(self.geometry.head_dim, self.config.partition);
        let spec = self.spec(group, 0, RowLayout::Keys { first_slot: self.len });
        let keys = B::hack_quantize(k, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
        let tail = append_slots(self.tail.take(), v);
        self.close_blocks(tail)?;
        self.keys = Some(append_codes(self.keys.take(), keys));
        self.len += new;
        Ok(())
    }

    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        let view = self.view().ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        B::hack_attention(q, &view, options)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the storage format: packed codes, fp16 min/scale and sums at their storage width
    /// (u8 or u16) for keys and closed value blocks, plus the tail at f32: what
    /// [`export_state`](burn_kvcompress::cache::TransferableCache::export_state) sends (tested).
    /// The device keeps min/scale as f32 values and sums as 32-bit integers, so its resident
    /// footprint is larger.
    fn memory_bytes(&self) -> usize {
        let (g, bits, pi) = (self.geometry, self.config.bits, self.config.partition);
        let per_stream = self.len * key_bytes_per_slot(g.head_dim, bits, pi)
            + self.blocks() * value_block_bytes(g.head_dim, bits, pi)
            + self.tail_len() * g.head_dim * 4;
        g.batch * g.kv_heads * per_stream
    }
}
