//! The paper's layout ([`Axes::Paper`](crate::Axes::Paper)): keys quantized per slot on append in
//! channel groups ([`PaperKeys`]), values per channel in closed blocks of Π slots, the newest `< Π`
//! values in f32 ([`PaperValues`], requantization elimination).

use burn::tensor::Tensor;
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, DeviceState, StateTensor},
    error::CacheError,
};

use super::{PaperKeys, PaperValues};
use crate::{
    kernels::{CacheView, HackBackend},
    HackConfig,
};

/// One layer's K/V in the paper's layout, one stream per KV head.
#[derive(Debug, Clone)]
pub struct PaperStore<B: HackBackend> {
    keys: PaperKeys<B>,
    values: PaperValues<B>,
}

impl<B: HackBackend> PaperStore<B> {
    /// An empty store of heads of `head_dim` channels.
    pub fn new(head_dim: usize) -> Self {
        Self { keys: PaperKeys::new(head_dim), values: PaperValues::new(head_dim) }
    }

    /// Slots held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Closed (quantized) V blocks.
    pub fn blocks(&self) -> usize {
        self.values.closed_blocks()
    }

    /// What attention reads (None while empty).
    pub fn view(&self, config: &HackConfig, head_dim: usize) -> Option<CacheView<'_, B>> {
        Some(CacheView {
            bits: config.key_bits,
            partition: config.partition,
            head_dim,
            keys: self.keys.codes()?,
            values: self.values.block_codes(),
            tail: self.values.tail(),
        })
    }

    /// Appends post-RoPE (and rotated) `k`, `v: [batch, kv_heads, new, head_dim]`: keys are
    /// quantized at once, values join the tail and every full block at its front is quantized.
    /// Stochastic rounding draws key codes from stream `2 · layer`, value codes from `2 · layer + 1`.
    pub fn append(
        &mut self,
        config: &HackConfig,
        layer: usize,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
    ) -> Result<(), CacheError> {
        let stream = 2 * layer as u32;
        self.keys.append(config, stream, k)?;
        self.values.append(config, stream + 1, v)
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
        let per_stream = self.keys.bytes_per_stream(config) + self.values.bytes_per_stream(config);
        geometry.batch * geometry.kv_heads * per_stream
    }

    /// The state tensors: `k_words`, `k_params`, `k_sums` (keys, one row per slot); `v_words`,
    /// `v_params`, `v_sums` (closed blocks, once a block has closed); `v_tail` (while the tail
    /// is not empty).
    pub(super) fn export(&self, config: &HackConfig, out: &mut Vec<StateTensor>) {
        self.keys.export("k", config, out);
        self.values.export("v", config, out);
    }

    /// Reads what [`export`](Self::export) wrote.
    pub(super) fn import(
        config: &HackConfig,
        geometry: CacheGeometry,
        state: &DeviceState<B>,
    ) -> Result<Self, CacheError> {
        let (len, d) = (state.state().tokens, geometry.head_dim);
        Ok(Self {
            keys: PaperKeys::import(d, "k", config, state, geometry, len)?,
            values: PaperValues::import(d, "v", config, state, geometry, len)?,
        })
    }
}
