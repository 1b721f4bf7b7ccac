//! [`ZackHackCache`]: one layer's reduced keys and values as HACK codes.

use burn::tensor::Tensor;
use burn_hack_attn::{
    cache::{PaperKeys, PaperValues},
    kernels::HackBackend,
    HackConfig,
};
use burn_kvcompress::{
    cache::{AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};

use burn_zack::{
    cache::{reduce_keys, reduce_values, HeadLayout},
    kernels::ZackBackend,
};

/// One layer's ZACK + HACK cache for a batch: HACK's paper layout on the reduced coordinates.
///
/// - keys: per KV head `h`, its `k_qk` reduced coordinates quantized per slot in partitions of
///   `min(Π, k_qk)` channels ([`PaperKeys`], one stream);
/// - values: the packed reduced values (`Σ k_vo` channels) quantized per channel in closed blocks
///   of Π slots, the newest `< Π` slots in f32 ([`PaperValues`], one stream).
#[derive(Debug)]
pub struct ZackHackCache<B: ZackBackend + HackBackend> {
    pub(super) config: HackConfig,
    pub(super) layer: usize,
    pub(super) geometry: CacheGeometry,
    pub(super) layout: HeadLayout,
    /// `[head_dim, Σ k_qk]`.
    pub(super) basis: Tensor<B, 2>,
    /// One per KV head.
    pub(super) keys: Vec<PaperKeys<B>>,
    pub(super) values: PaperValues<B>,
    pub(super) len: usize,
    /// Set when the scheme cannot serve this geometry; every call then fails with it.
    problem: Option<String>,
}

impl<B: ZackBackend + HackBackend> ZackHackCache<B> {
    pub(super) fn new(
        config: HackConfig,
        layer: usize,
        geometry: CacheGeometry,
        parts: Result<(HeadLayout, Tensor<B, 2>), String>,
        device: &B::Device,
    ) -> Self {
        let (layout, basis, problem) = match parts {
            Ok((layout, basis)) => (layout, basis, None),
            Err(problem) => {
                let layout = HeadLayout { head_dim: geometry.head_dim, qk_ranks: Vec::new(), vo_ranks: Vec::new() };
                (layout, Tensor::zeros([geometry.head_dim, 0], device), Some(problem))
            }
        };
        let keys = layout.qk_ranks.iter().map(|&rank| PaperKeys::new(rank)).collect();
        let values = PaperValues::new(layout.value_width());
        Self { config, layer, geometry, layout, basis, keys, values, len: 0, problem }
    }

    pub(super) fn check_usable(&self) -> Result<(), CacheError> {
        self.problem.as_ref().map_or(Ok(()), |p| Err(CacheError::Request(p.clone())))
    }

    /// This layer's ranks and packing.
    pub fn layout(&self) -> &HeadLayout {
        &self.layout
    }

    /// Closed (quantized) value blocks.
    pub fn blocks(&self) -> usize {
        self.values.closed_blocks()
    }

    /// Slots whose reduced values are still in the f32 tail.
    pub fn tail_len(&self) -> usize {
        self.values.tail_len()
    }

    /// The dequantized reduced keys `[batch, slots, Σ k_qk]` and values `[batch, slots, Σ k_vo]`
    /// (None while empty).
    pub fn dequantized(&self) -> Option<(Tensor<B, 3>, Tensor<B, 3>)> {
        if self.len == 0 {
            return None;
        }
        let keys: Vec<Tensor<B, 4>> = self.keys.iter().map(|k| k.dequantize(&self.config)).collect::<Option<_>>()?;
        let values = self.values.dequantize(&self.config)?;
        Some((Tensor::cat(keys, 3).squeeze_dim(1), values.squeeze_dim(1)))
    }
}

impl<B: ZackBackend + HackBackend> KvCache<B> for ZackHackCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_usable()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        let (batch, new) = (k.dims()[0], k.dims()[2]);
        let reduced = reduce_keys(k, &self.basis, &self.layout);
        let kv_heads = self.layout.kv_heads();
        for (h, keys) in self.keys.iter_mut().enumerate() {
            let columns = self.layout.key_columns(h);
            let head = reduced.clone().narrow(2, columns.start, columns.len()).reshape([batch, 1, new, columns.len()]);
            // Each head's keys draw their stochastic rounding from a stream of their own.
            keys.append(&self.config, 2 * (self.layer * kv_heads + h) as u32, head)?;
        }
        let values = reduce_values(v, &self.layout).unsqueeze_dim(1);
        self.values.append(&self.config, 2 * self.layer as u32 + 1, values)?;
        self.len += new;
        Ok(())
    }

    /// ZACK attention on the dequantized reduced keys and values.
    fn attend(&self, q: Tensor<B, 4>, options: &AttendOptions) -> Result<Tensor<B, 4>, CacheError> {
        self.check_usable()?;
        let (k, v) = self.dequantized().ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
        B::zack_attention(q, self.basis.clone(), k, v, &self.layout, options)
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Bytes of the storage format, as HACK counts them: packed codes, fp16 min/scale and code
    /// sums at their storage width for every head's keys and the closed value blocks, plus the
    /// tail at f32. The basis is per-layer model state, like the weights, and is not counted.
    fn memory_bytes(&self) -> usize {
        let keys: usize = self.keys.iter().map(|k| k.bytes_per_stream(&self.config)).sum();
        self.geometry.batch * (keys + self.values.bytes_per_stream(&self.config))
    }
}
