//! [`PaperValues`]: values in the paper's layout, quantized per channel in closed blocks of Π
//! slots, the newest `< Π` slots in f32 (requantization elimination).

use burn::tensor::Tensor;
use burn_kvcompress::{
    cache::{append_slots, CacheGeometry, DeviceState, StateTensor},
    error::CacheError,
};

use super::{append_codes, export_codes, import_codes, value_block_bytes, Codes};
use crate::{
    kernels::{HackBackend, QuantizeSpec, RowLayout},
    HackConfig,
};

/// Values of `width` channels per stream: [`Codes`] of one row per (closed block of Π slots,
/// channel), `[batch, streams, blocks · width, ·]`, and the tail, the newest `< Π` slots in f32,
/// `[batch, streams, tail_len, width]`.
///
/// One half of [`PaperStore`](super::PaperStore) (one stream per KV head); also the store of values
/// quantized the same way after another transform (ZACK's packed reduced values, one stream).
#[derive(Debug, Clone)]
pub struct PaperValues<B: HackBackend> {
    width: usize,
    blocks: Option<Codes<B>>,
    tail: Option<Tensor<B, 4>>,
}

impl<B: HackBackend> PaperValues<B> {
    /// An empty store of values of `width` channels.
    pub fn new(width: usize) -> Self {
        Self { width, blocks: None, tail: None }
    }

    /// Closed (quantized) blocks.
    pub fn closed_blocks(&self) -> usize {
        self.blocks.as_ref().map_or(0, |v| v.rows() / self.width)
    }

    /// Slots in the f32 tail.
    pub fn tail_len(&self) -> usize {
        self.tail.as_ref().map_or(0, |t| t.dims()[2])
    }

    /// The closed blocks' codes (None before the first block closes).
    pub fn block_codes(&self) -> Option<&Codes<B>> {
        self.blocks.as_ref()
    }

    /// The tail (None while empty).
    pub fn tail(&self) -> Option<&Tensor<B, 4>> {
        self.tail.as_ref()
    }

    /// Appends `v: [batch, streams, new, width]` to the tail and quantizes every full block at its
    /// front; stochastic rounding draws from `stream`.
    pub fn append(&mut self, config: &HackConfig, stream: u32, v: Tensor<B, 4>) -> Result<(), CacheError> {
        let tail = append_slots(self.tail.take(), v);
        let [batch, streams, tail_len, width] = tail.dims();
        let pi = config.partition;
        let full = tail_len / pi;
        if full > 0 {
            let blocks = tail.clone().narrow(2, 0, full * pi).reshape([batch, streams, full, pi, width]);
            let rows = blocks.swap_dims(3, 4).reshape([batch, streams, full * width, pi]);
            let layout = RowLayout::ValueBlocks { first_slot: self.closed_blocks() * pi };
            let spec = QuantizeSpec::of_config(config, config.value_bits, pi, width, stream, layout);
            let codes = B::hack_quantize(rows, &spec).map_err(|e| CacheError::Request(e.to_string()))?;
            self.blocks = Some(append_codes(self.blocks.take(), codes));
        }
        let rest = tail_len - full * pi;
        self.tail = (rest > 0).then(|| tail.narrow(2, full * pi, rest));
        Ok(())
    }

    /// The values held, the closed blocks dequantized and the tail as it is:
    /// `[batch, streams, slots, width]` (None while empty).
    pub fn dequantize(&self, config: &HackConfig) -> Option<Tensor<B, 4>> {
        let (n, pi, width) = (self.closed_blocks(), config.partition, self.width);
        let blocks = self.blocks.as_ref().map(|v| {
            let [batch, streams, ..] = v.words.dims();
            let rows = v.dequantize(config.value_bits, pi).reshape([batch, streams, n, width, pi]);
            rows.swap_dims(3, 4).reshape([batch, streams, n * pi, width])
        });
        let parts: Vec<Tensor<B, 4>> = blocks.into_iter().chain(self.tail.clone()).collect();
        (!parts.is_empty()).then(|| Tensor::cat(parts, 2))
    }

    /// Bytes of the format per stream: each closed block's packed codes, fp16 (min, scale) and
    /// code sums, and the tail at f32.
    pub fn bytes_per_stream(&self, config: &HackConfig) -> usize {
        self.closed_blocks() * value_block_bytes(self.width, config.value_bits, config.partition)
            + self.tail_len() * self.width * 4
    }

    /// Appends the blocks to `out` as `{prefix}_words`, `{prefix}_params`, `{prefix}_sums` (once
    /// a block has closed) and the tail as `{prefix}_tail` (while it is not empty).
    pub fn export(&self, prefix: &str, config: &HackConfig, out: &mut Vec<StateTensor>) {
        if let Some(blocks) = &self.blocks {
            export_codes(prefix, blocks, config.value_bits, out);
        }
        if let Some(tail) = &self.tail {
            out.push(StateTensor::from_float(&format!("{prefix}_tail"), tail));
        }
    }

    /// Reads `len` slots of values of `width` channels that [`export`](Self::export) wrote under
    /// `prefix`, for `geometry`'s batch and `geometry.kv_heads` streams.
    pub fn import(
        width: usize,
        prefix: &str,
        config: &HackConfig,
        state: &DeviceState<B>,
        geometry: CacheGeometry,
        len: usize,
    ) -> Result<Self, CacheError> {
        let mut values = Self::new(width);
        let (bits, pi) = (config.value_bits as usize, config.partition);
        let blocks = len / pi;
        if blocks > 0 {
            values.blocks = Some(import_codes(prefix, state, blocks * width, pi * bits / 32, 1, geometry)?);
        }
        let tail_len = len - blocks * pi;
        if tail_len > 0 {
            let name = format!("{prefix}_tail");
            let tail = state.to_float::<4>(&name)?;
            let expected = [geometry.batch, geometry.kv_heads, tail_len, width];
            if tail.dims() != expected {
                return Err(CacheError::State(format!("`{name}` has shape {:?}, expected {expected:?}", tail.dims())));
            }
            values.tail = Some(tail);
        }
        Ok(values)
    }
}
