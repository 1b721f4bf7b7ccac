//! The channel layout ([`Axes::Channel`](crate::Axes::Channel)): float sinks, closed blocks of Π
//! slots with keys quantized per channel and values per token, and a float tail.
//!
//! Slots `0 .. sinks` stay in float for good (attention sinks). The slots after them form blocks
//! of Π; a block is quantized when all its slots are older than the newest `window` — checked
//! *before* an append adds its tokens, so the tokens of an append are always attended in float
//! by the call that appended them. A prompt's prefill therefore quantizes nothing and attends as
//! the dense f16 cache does (on its tensor-core kernel where that applies: queries and weights
//! rounded to f16), and its blocks close at the next append (or when the state is exported).
//! Float slots hold f16 values, the format's width for them: in f16 where the backend has it
//! (appended in place, [`SlotBuffer`](burn_kvcompress::cache::SlotBuffer)), else in f32 rounded to f16 on append.

use burn::tensor::{backend::Backend, DType, Tensor, TensorData};
use burn_kvcompress::{
    cache::{dense_attention, half_attention, AttendOptions, CacheGeometry},
    error::CacheError,
};

use super::PARAMS_BYTES;
use crate::{
    kernels::{value_group, ChannelView, FloatSlots, HackBackend, PackedRows, QuantizeSpec, RowLayout},
    HackConfig,
};

/// One layer's K/V in the channel layout.
#[derive(Debug, Clone)]
pub struct ChannelStore<B: HackBackend> {
    pub(super) sinks: Option<FloatSlots<B>>,
    /// Closed blocks' keys: one row of `head_dim` codes per slot, (min, scale) per (block,
    /// channel).
    pub(super) keys: Option<PackedRows<B>>,
    /// Closed blocks' values: one row of Π codes per (block, channel), (min, scale) per slot and
    /// group of [`value_group`](ChannelView::value_group) channels.
    pub(super) values: Option<PackedRows<B>>,
    pub(super) tail: Option<FloatSlots<B>>,
    pub(super) len: usize,
    /// The float slots' type: f16, or f32 where the backend lacks f16.
    pub(super) float_dtype: DType,
}

impl<B: HackBackend> ChannelStore<B> {
    /// An empty store whose float slots live on `device`.
    pub fn new(device: &B::Device) -> Self {
        Self { sinks: None, keys: None, values: None, tail: None, len: 0, float_dtype: float_slot_dtype::<B>(device) }
    }
}

/// The float slots' type on `device`: f16 where the backend has it, else f32.
pub fn float_slot_dtype<B: Backend>(device: &B::Device) -> DType {
    match B::supports_dtype(device, DType::F16) {
        true => DType::F16,
        false => DType::F32,
    }
}

/// `x` as the float slots hold it in `dtype`: cast to f16, or (in f32, where the backend lacks
/// f16) rounded to the nearest f16 (ties to even) through the host.
fn to_float_slots<B: Backend>(x: Tensor<B, 4>, dtype: DType) -> Tensor<B, 4> {
    if dtype == DType::F16 {
        return x.cast(DType::F16);
    }
    let (device, shape) = (x.device(), x.dims());
    let values: Vec<f32> = x.into_data().convert::<f32>().into_vec().expect("f32 data");
    let rounded: Vec<f32> = values.into_iter().map(|v| half::f16::from_f32(v).to_f32()).collect();
    Tensor::from_data(TensorData::new(rounded, shape), &device)
}

impl<B: HackBackend> ChannelStore<B> {
    /// Closed blocks.
    pub fn blocks(&self, head_dim: usize) -> usize {
        self.keys.as_ref().map_or(0, |k| k.param_rows() / head_dim)
    }

    /// Slots in the float tail.
    pub fn tail_len(&self) -> usize {
        self.tail.as_ref().map_or(0, FloatSlots::len)
    }

    /// Slots in the float sinks.
    pub fn sinks_len(&self) -> usize {
        self.sinks.as_ref().map_or(0, FloatSlots::len)
    }

    /// What attention reads.
    pub fn view(&self, config: &HackConfig, geometry: CacheGeometry) -> ChannelView<'_, B> {
        ChannelView {
            key_bits: config.key_bits,
            value_bits: config.value_bits,
            partition: config.partition,
            batch: geometry.batch,
            kv_heads: geometry.kv_heads,
            head_dim: geometry.head_dim,
            len: self.len,
            sinks: self.sinks.as_ref(),
            keys: self.keys.as_ref(),
            values: self.values.as_ref(),
            tail: self.tail.as_ref(),
        }
    }

    /// Closes the blocks that the window has left, then appends `k`, `v: [batch, kv_heads, new,
    /// head_dim]` (post-RoPE, keys rotated) to the sinks while they are not full and to the tail.
    pub fn append(
        &mut self,
        config: &HackConfig,
        layer: usize,
        geometry: CacheGeometry,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
    ) -> Result<(), CacheError> {
        self.close_blocks(config, layer, geometry)?;
        let new = k.dims()[2];
        let [k, v] = [k, v].map(|x| to_float_slots(x, self.float_dtype));
        let to_sinks = config.sinks.saturating_sub(self.len).min(new);
        if to_sinks > 0 {
            let [k, v] = [&k, &v].map(|x| x.clone().narrow(2, 0, to_sinks));
            self.sinks = Some(FloatSlots::append(self.sinks.take(), k, v));
        }
        if new > to_sinks {
            let [k, v] = [k, v].map(|x| x.narrow(2, to_sinks, new - to_sinks));
            self.tail = Some(FloatSlots::append(self.tail.take(), k, v));
        }
        self.len += new;
        Ok(())
    }

    /// Blocks at the front of the tail whose slots are all older than the newest `window`.
    pub fn closable_blocks(&self, config: &HackConfig) -> usize {
        self.tail_len().saturating_sub(config.window) / config.partition
    }

    /// Quantizes the blocks that [`Self::closable_blocks`] counts: keys per channel over the
    /// block's Π slots, values per slot in channel groups.
    pub fn close_blocks(
        &mut self,
        config: &HackConfig,
        layer: usize,
        geometry: CacheGeometry,
    ) -> Result<(), CacheError> {
        let full = self.closable_blocks(config);
        if full == 0 {
            return Ok(());
        }
        let Some(tail) = self.tail.take() else {
            return Ok(());
        };
        let (tail_len, d) = (tail.len(), geometry.head_dim);
        let pi = config.partition;
        let first_slot = self.sinks_len() + self.blocks(d) * pi;
        // The quantizer takes f32 (f16 values, exactly).
        let [closing_k, closing_v] = tail.narrow(0, full * pi).map(|x| x.cast(DType::F32));
        // Key codes draw their stochastic rounding from stream `2 · layer`, value codes from the next.
        let stream = 2 * layer as u32;
        let (key_layout, value_layout) = (RowLayout::ValueBlocks { first_slot }, RowLayout::Keys { first_slot });
        let key_spec = QuantizeSpec::of_config(config, config.key_bits, pi, d, stream, key_layout);
        let value_spec =
            QuantizeSpec::of_config(config, config.value_bits, value_group(d, pi), d, stream + 1, value_layout);
        let quantize = |x, spec| B::hack_quantize_blocks(x, spec).map_err(|e| CacheError::Request(e.to_string()));
        let keys = quantize(closing_k, &key_spec)?;
        let values = quantize(closing_v, &value_spec)?;
        self.keys = Some(PackedRows::append(self.keys.take(), keys));
        self.values = Some(PackedRows::append(self.values.take(), values));
        let rest = tail_len - full * pi;
        self.tail = (rest > 0).then(|| {
            let [k, v] = tail.narrow(full * pi, rest);
            FloatSlots::new(k, v)
        });
        Ok(())
    }

    /// HACK attention of `q` (rotated) over the store.
    pub fn attend(
        &self,
        config: &HackConfig,
        geometry: CacheGeometry,
        q: Tensor<B, 4>,
        options: &AttendOptions,
    ) -> Result<Tensor<B, 4>, CacheError> {
        if self.len == 0 {
            return Err(CacheError::Request("attention over an empty cache".into()));
        }
        if self.blocks(geometry.head_dim) == 0 {
            // Every slot is in float (a prompt's prefill): the dense f16 cache's attention on
            // them (their values are f16's), whose tensor-core kernel a prompt of 32K tokens at
            // batch 8 needs: the plain product of its scores would take a terabyte.
            let parts: Vec<[Tensor<B, 4>; 2]> =
                [&self.sinks, &self.tail].into_iter().flatten().map(FloatSlots::filled).collect();
            let [k, v] = [0, 1].map(|x| Tensor::cat(parts.iter().map(|kv| kv[x].clone()).collect(), 2));
            if self.float_dtype != DType::F16 {
                return dense_attention(q, k, v, options);
            }
            return half_attention(q, k, v, self.len, options);
        }
        B::hack_channel_attention(q, &self.view(config, geometry), options)
    }

    /// Bytes of the format: packed codes, one (min, scale) word per key channel of a block and per
    /// value group of a slot, and the float slots at 2 bytes an element. The device keeps the float
    /// slots in f32 where the backend lacks f16.
    pub fn memory_bytes(&self, config: &HackConfig, geometry: CacheGeometry) -> usize {
        let d = geometry.head_dim;
        let per_stream = channel_bytes(config, d, self.sinks_len() + self.tail_len(), self.blocks(d));
        geometry.batch * geometry.kv_heads * per_stream
    }
}

/// Bytes per KV head of `float_slots` float slots and `blocks` closed blocks of `config`'s channel
/// layout at head dimension `d`.
pub fn channel_bytes(config: &HackConfig, d: usize, float_slots: usize, blocks: usize) -> usize {
    let pi = config.partition;
    let key_block = d * (pi * config.key_bits as usize / 8 + PARAMS_BYTES);
    let value_block = pi * (d * config.value_bits as usize / 8 + d / value_group(d, pi) * PARAMS_BYTES);
    float_slots * 2 * d * 2 + blocks * (key_block + value_block)
}
