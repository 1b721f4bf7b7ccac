//! What channel-layout attention reads: the cache as a [`ChannelView`], its float slots as
//! [`FloatSlots`] (the closed blocks are [`PackedRows`]).

use burn::tensor::{backend::Backend, Tensor};
use burn_kvcompress::cache::SlotBuffer;

use crate::kernels::{value_group, PackedRows};

/// A channel-layout cache as attention reads it. Slot order: the sinks, then the closed blocks
/// (block `b`'s slot `t` at `sinks + b · Π + t`), then the tail.
#[derive(Debug, Clone, Copy)]
pub struct ChannelView<'a, B: Backend> {
    /// Key code width (2 or 4).
    pub key_bits: u8,
    /// Value code width (2 or 4).
    pub value_bits: u8,
    /// Π: slots per block.
    pub partition: usize,
    /// Sequences in the batch.
    pub batch: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Slots held.
    pub len: usize,
    /// The first slots in float.
    pub sinks: Option<&'a FloatSlots<B>>,
    /// Closed blocks' keys: `[batch, kv_heads, blocks · Π, head_dim · key_bits / 32]` words, a
    /// row per slot, and `[batch, kv_heads, blocks · head_dim, 1]` (min, scale) words, a row per
    /// block and channel.
    pub keys: Option<&'a PackedRows<B>>,
    /// Closed blocks' values: `[batch, kv_heads, blocks · head_dim, Π · value_bits / 32]` words, a
    /// row per block and channel, and `[batch, kv_heads, blocks · Π, head_dim / value_group]`
    /// (min, scale) words, a row per slot.
    pub values: Option<&'a PackedRows<B>>,
    /// The newest slots in float.
    pub tail: Option<&'a FloatSlots<B>>,
}

impl<B: Backend> ChannelView<'_, B> {
    /// Closed blocks.
    pub fn blocks(&self) -> usize {
        self.keys.map_or(0, |k| k.param_rows() / self.head_dim)
    }

    /// Slots in the sinks.
    pub fn sinks_len(&self) -> usize {
        self.sinks.map_or(0, FloatSlots::len)
    }

    /// Slots in the tail.
    pub fn tail_len(&self) -> usize {
        self.tail.map_or(0, FloatSlots::len)
    }

    /// Channels per value group.
    pub fn value_group(&self) -> usize {
        value_group(self.head_dim, self.partition)
    }
}

/// Keys and values of the same slots in float, `[batch, kv_heads, slots, head_dim]` each, in
/// buffers with room for more slots (the store's float type).
#[derive(Debug, Clone)]
pub struct FloatSlots<B: Backend> {
    /// Keys (post-RoPE, rotated).
    pub k: SlotBuffer<B>,
    /// Values.
    pub v: SlotBuffer<B>,
}

impl<B: Backend> FloatSlots<B> {
    /// Slots held.
    pub fn len(&self) -> usize {
        self.k.len()
    }

    /// Whether no slot is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys and values `[batch, kv_heads, n, head_dim]` in buffers of their float type.
    pub fn new(k: Tensor<B, 4>, v: Tensor<B, 4>) -> Self {
        Self { k: SlotBuffer::new(k), v: SlotBuffer::new(v) }
    }

    /// `this` with keys and values `[batch, kv_heads, n, head_dim]` (the buffers' float type)
    /// after its slots.
    pub(crate) fn append(this: Option<Self>, k: Tensor<B, 4>, v: Tensor<B, 4>) -> Self {
        match this {
            None => Self::new(k, v),
            Some(this) => {
                let [k, v] = SlotBuffer::appended_pair([this.k, this.v], [k, v]);
                Self { k, v }
            }
        }
    }

    /// Keys and values of slots `start .. start + len`.
    pub(crate) fn narrow(&self, start: usize, len: usize) -> [Tensor<B, 4>; 2] {
        self.filled().map(|x| x.narrow(2, start, len))
    }

    /// Keys and values of every slot held.
    pub(crate) fn filled(&self) -> [Tensor<B, 4>; 2] {
        [&self.k, &self.v].map(SlotBuffer::filled)
    }
}
