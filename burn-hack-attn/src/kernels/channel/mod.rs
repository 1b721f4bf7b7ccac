//! Attention on the channel layout ([`Axes::Channel`](crate::Axes::Channel)): what it reads
//! ([`ChannelView`]), the reference ([`channel_attention_reference`]) and, on CubeCL backends,
//! the decode kernels: portable (`channel_decode_launch`) and on tensor cores where the device
//! has integer warp products (`channel_mma_decode_launch`).

#[cfg(any(feature = "wgpu", feature = "cuda"))]
// `#[cube]` expands the kernel into undocumented helper items.
#[allow(missing_docs)]
mod decode;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod float_slots;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod float_warp;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_block;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_decode;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
mod mma_launch;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(missing_docs)]
mod mma_operands;
mod reference;

#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use decode::ChannelDecodeGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use launch::{block_splits, channel_decode_geometry, channel_decode_launch};
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_decode::ChannelMmaGeometry;
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub use mma_launch::{channel_mma_decode_launch, channel_mma_geometry};

pub use reference::{channel_attention_reference, symmetric_codes, weight_codes_of, QUERY_LEVELS, WEIGHT_LEVELS};

use burn::tensor::backend::Backend;

use crate::cache::{FloatSlots, PackedRows};

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
        crate::cache::value_group(self.head_dim, self.partition)
    }
}
