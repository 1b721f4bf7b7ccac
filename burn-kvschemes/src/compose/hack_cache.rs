//! [`ZackHackCache`]: one layer's reduced keys and values as HACK codes.

use burn::tensor::Tensor;
use burn_hack_attn::{
    cache::{append_codes, key_bytes_per_slot, key_group, value_block_bytes, Codes},
    kernels::{HackBackend, QuantizeSpec, RowLayout},
    quant::Rounder,
    HackConfig,
};
use burn_kvcompress::{
    cache::{append_slots, AttendOptions, CacheGeometry, KvCache},
    error::CacheError,
};

use burn_zack::{
    cache::{reduce_keys, reduce_values, HeadLayout},
    kernels::ZackBackend,
};

/// One layer's ZACK + HACK cache for a batch.
///
/// - keys: per KV head `h`, `[batch, 1, slots, ·]` codes of its `k_qk` reduced coordinates in
///   partitions of `min(Π, k_qk)` channels;
/// - values: `[batch, 1, blocks · Σ k_vo, ·]` codes, one row per (closed block of Π slots,
///   channel of the packed reduced values);
/// - tail: the newest `< Π` slots' reduced values in f32, `[batch, tail_len, Σ k_vo]`.
#[derive(Debug)]
pub struct ZackHackCache<B: ZackBackend + HackBackend> {
    pub(super) config: HackConfig,
    pub(super) layer: usize,
    pub(super) geometry: CacheGeometry,
    pub(super) layout: HeadLayout,
    /// `[head_dim, Σ k_qk]`.
    pub(super) basis: Tensor<B, 2>,
    /// Per KV head (empty while the cache is).
    pub(super) keys: Vec<Codes<B>>,
    pub(super) values: Option<Codes<B>>,
    pub(super) tail: Option<Tensor<B, 3>>,
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
        Self { config, layer, geometry, layout, basis, keys: Vec::new(), values: None, tail: None, len: 0, problem }
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
        self.values.as_ref().map_or(0, |v| v.rows() / self.layout.value_width())
    }

    /// Slots whose reduced values are still in the f32 tail.
    pub fn tail_len(&self) -> usize {
        self.len - self.blocks() * self.config.partition
    }

    /// The key partition width of KV head `head`.
    pub(super) fn key_group(&self, head: usize) -> usize {
        key_group(self.layout.qk_ranks[head], self.config.partition)
    }

    fn spec(&self, group: usize, head_dim: usize, stream: u32, layout: RowLayout) -> QuantizeSpec {
        let (bits, partition) = (self.config.key_bits, self.config.partition);
        QuantizeSpec {
            bits,
            group,
            head_dim,
            partition,
            rounder: Rounder::new(self.config.rounding, stream),
            clip: self.config.clip,
            layout,
        }
    }

    /// Quantizes every full block at the front of `tail` (`[batch, n, Σ k_vo]`) and keeps the rest.
    fn close_blocks(&mut self, tail: Tensor<B, 3>) -> Result<(), CacheError> {
        let [batch, tail_len, width] = tail.dims();
        let pi = self.config.partition;
        let full = tail_len / pi;
        if full > 0 {
            let first_slot = self.blocks() * pi;
            let blocks = tail.clone().narrow(1, 0, full * pi).reshape([batch, full, pi, width]);
            let rows = blocks.swap_dims(2, 3).reshape([batch, 1, full * width, pi]);
            let spec = self.spec(pi, width, 2 * self.layer as u32 + 1, RowLayout::ValueBlocks { first_slot });
            let codes = B::hack_quantize(rows, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
            self.values = Some(append_codes(self.values.take(), codes));
        }
        let rest = tail_len - full * pi;
        self.tail = (rest > 0).then(|| tail.narrow(1, full * pi, rest));
        Ok(())
    }

    /// The dequantized reduced keys `[batch, slots, Σ k_qk]` and values `[batch, slots, Σ k_vo]`.
    pub fn dequantized(&self) -> Option<(Tensor<B, 3>, Tensor<B, 3>)> {
        let (batch, bits, width) = (self.geometry.batch, self.config.key_bits, self.layout.value_width());
        let keys: Vec<Tensor<B, 3>> = (self.keys.iter().enumerate())
            .map(|(h, codes)| {
                codes.dequantize(bits, self.key_group(h)).reshape([batch, self.len, self.layout.qk_ranks[h]])
            })
            .collect();
        let blocks = self.values.as_ref().map(|v| {
            let (n, pi) = (self.blocks(), self.config.partition);
            v.dequantize(bits, pi).reshape([batch, n, width, pi]).swap_dims(2, 3).reshape([batch, n * pi, width])
        });
        let values: Vec<Tensor<B, 3>> = blocks.into_iter().chain(self.tail.clone()).collect();
        (!keys.is_empty()).then(|| (Tensor::cat(keys, 2), Tensor::cat(values, 1)))
    }
}

impl<B: ZackBackend + HackBackend> KvCache<B> for ZackHackCache<B> {
    fn append(&mut self, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Result<(), CacheError> {
        self.check_usable()?;
        self.geometry.check_append(k.dims(), v.dims())?;
        let (batch, new) = (k.dims()[0], k.dims()[2]);
        let reduced = reduce_keys(k, &self.basis, &self.layout);
        let kv_heads = self.layout.kv_heads();
        let mut keys = Vec::with_capacity(kv_heads);
        for h in 0..kv_heads {
            let columns = self.layout.key_columns(h);
            let head = reduced.clone().narrow(2, columns.start, columns.len()).reshape([batch, 1, new, columns.len()]);
            let stream = 2 * (self.layer * kv_heads + h) as u32;
            let spec = self.spec(self.key_group(h), columns.len(), stream, RowLayout::Keys { first_slot: self.len });
            keys.push(B::hack_quantize(head, &spec).map_err(|e| CacheError::Request(e.to_string()))?);
        }
        let tail = append_slots(self.tail.take(), reduce_values(v, &self.layout));
        self.close_blocks(tail)?;
        self.keys = match self.keys.is_empty() {
            true => keys,
            false => self.keys.drain(..).zip(keys).map(|(old, more)| old.append(more)).collect(),
        };
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
        let (bits, pi) = (self.config.key_bits, self.config.partition);
        let width = self.layout.value_width();
        let keys: usize = self.layout.qk_ranks.iter().map(|&r| self.len * key_bytes_per_slot(r, bits, pi)).sum();
        let values = self.blocks() * value_block_bytes(width, bits, pi) + self.tail_len() * width * 4;
        self.geometry.batch * (keys + values)
    }
}
