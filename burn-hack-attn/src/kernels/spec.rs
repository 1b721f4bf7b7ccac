//! What a quantize call covers, how each element finds its stochastic-rounding index, and the
//! partition sizes of keys and values.

use crate::{quant::Rounder, HackConfig};

/// How the rows of a quantize call map to cache slots and channels. The rounding index of an
/// element depends only on its (slot, batch row, KV head, channel), never on the call that
/// quantized it, so the kernel and the reference draw the same numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLayout {
    /// Row `r` is the key of slot `first_slot + r`; element `z` is channel `z`.
    Keys {
        /// Slot of row 0.
        first_slot: usize,
    },
    /// Row `r` is channel `r % head_dim` of block `r / head_dim`; element `z` is that block's
    /// token `z`, at slot `first_slot + (r / head_dim) * Π + z`.
    ValueBlocks {
        /// Slot of the first token of block 0.
        first_slot: usize,
    },
}

/// One quantize call on `x: [batch, kv_heads, rows, z]`: partitions of `group` consecutive
/// elements along `z` (`z % group == 0`, `group % 16 == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantizeSpec {
    /// Bits per code (2 or 4).
    pub bits: u8,
    /// Elements per partition.
    pub group: usize,
    /// Head dimension of the cache (for [`RowLayout`] indices).
    pub head_dim: usize,
    /// Π of the cache (for [`RowLayout::ValueBlocks`]).
    pub partition: usize,
    /// Rounding of the codes.
    pub rounder: Rounder,
    /// Each partition's range clipped to the reconstruction's best
    /// ([`quantize_group_clipped`](crate::quant::quantize_group_clipped)), else its min/max.
    pub clip: bool,
    /// Where the rows sit in the cache.
    pub layout: RowLayout,
}

impl QuantizeSpec {
    /// `config`'s quantize call: `bits`-bit codes in partitions of `group`, rows of caches of
    /// `head_dim` channels placed by `layout`, stochastic rounding drawn from `stream` (each store
    /// of a model its own).
    pub fn of_config(
        config: &HackConfig,
        bits: u8,
        group: usize,
        head_dim: usize,
        stream: u32,
        layout: RowLayout,
    ) -> Self {
        Self {
            bits,
            group,
            head_dim,
            partition: config.partition,
            rounder: Rounder::new(config.rounding, stream),
            clip: config.clip,
            layout,
        }
    }

    /// 32-bit words per partition.
    pub fn words_per_group(&self) -> usize {
        self.group * self.bits as usize / 32
    }

    /// The global rounding index of element `z` of row `row` of (batch row `b`, KV head `h`), in a
    /// batch of `batch` rows and `kv_heads` heads: `((slot * batch + b) * kv_heads + h) * head_dim +
    /// channel`, wrapping at 2^32.
    pub fn index(&self, batch: usize, kv_heads: usize, b: usize, h: usize, row: usize, z: usize) -> u32 {
        let (slot, channel) = match self.layout {
            RowLayout::Keys { first_slot } => (first_slot + row, z),
            RowLayout::ValueBlocks { first_slot } => {
                (first_slot + (row / self.head_dim) * self.partition + z, row % self.head_dim)
            }
        };
        let slot = slot as u32;
        let b_h = (b * kv_heads + h) as u32;
        ((slot.wrapping_mul(batch as u32).wrapping_mul(kv_heads as u32)).wrapping_add(b_h))
            .wrapping_mul(self.head_dim as u32)
            .wrapping_add(channel as u32)
    }
}

/// Channels per key partition: Π, or the whole head when Π exceeds it.
pub fn key_group(head_dim: usize, partition: usize) -> usize {
    partition.min(head_dim)
}

/// Channels per value group of the channel layout: Π, or the whole head when Π exceeds it.
pub fn value_group(head_dim: usize, partition: usize) -> usize {
    partition.min(head_dim)
}
