//! The channel layout's block quantizer: one cube per (stream, block of Π slots) quantizes the
//! block along one axis and packs its codes along the other, the transposition that
//! [`quantize_blocks_reference`](super::quantize_blocks_reference) does with tensor ops after the
//! row quantizer (`quantize_kernel`).
//!
//! Keys (partitions along slots): one partition per channel over the block's Π slots, the words a
//! row per slot. Values (partitions along channels): one partition per slot and group of
//! channels, the words a row per channel. Each partition's range, clipping and codes are the row
//! quantizer's, element for element in the same order, so both give the same bits.

use cubecl::prelude::*;

use super::rows_kernel::{code_of, fitted_range, PartitionPlace, RangeFit};
use crate::kernels::params_word::params_word;

/// Layout constants of one launch (comptime: one compiled kernel per cache geometry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockQuantizeGeometry {
    /// How each partition is fitted: along slots (keys; `group` = Π) or along channels (values;
    /// `group` channels).
    pub fit: RangeFit,
    /// Channels per head.
    pub head_dim: u32,
    /// Π: slots per block.
    pub partition: u32,
    /// Units per cube.
    pub units: u32,
}

impl BlockQuantizeGeometry {
    /// Partitions per block.
    pub fn partitions(&self) -> u32 {
        match self.fit.along_slots {
            true => self.head_dim,
            false => self.partition * (self.head_dim / self.fit.group),
        }
    }

    /// Packed words per block: Π · head_dim codes either way.
    pub fn words(&self) -> u32 {
        self.partition * self.head_dim * self.fit.bits / 32
    }
}

/// `x`: `[streams, blocks · Π, head_dim]` (contiguous); cube `(block, stream)`. Writes the block's
/// (min, scale) words at `params[(stream · blocks + block) · partitions + p]` and its packed words
/// at `words[(stream · blocks + block) · words + w]`: a row of `head_dim · bits / 32` words per
/// slot along slots, of `Π · bits / 32` words per channel along channels.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn quantize_blocks_kernel(
    x: &Array<f32>,
    words: &mut Array<u32>,
    params: &mut Array<u32>,
    blocks: u32,
    streams: u32,
    first_slot: u32,
    rounding_stream: u32,
    #[comptime] geo: BlockQuantizeGeometry,
) {
    let (block, stream) = (CUBE_POS_X, CUBE_POS_Y);
    let (d, pi) = comptime!((geo.head_dim, geo.partition));
    let partitions = comptime!(geo.partitions());
    let block_index = stream * blocks + block;
    let base = (block_index * pi * d) as usize;
    let block_slot = first_slot + block * pi;

    let fit = comptime!(geo.fit);
    let mut mins = SharedMemory::<f32>::new(comptime!(geo.partitions() as usize));
    let mut scales = SharedMemory::<f32>::new(comptime!(geo.partitions() as usize));
    let mut p = UNIT_POS;
    while p < partitions {
        let (start, stride, place) = partition_place(p, block_slot, stream, streams, rounding_stream, geo);
        let (min, scale) = fitted_range(x, base + start as usize, stride, &place, d, fit);
        mins[p as usize] = min;
        scales[p as usize] = scale;
        params[(block_index * partitions + p) as usize] = params_word(min, scale);
        p += geo.units;
    }
    sync_cube();

    let levels = f32::cast_from((1u32 << fit.bits) - 1);
    let per_word = comptime!(32 / fit.bits);
    let block_words = comptime!(geo.words());
    let groups = comptime!(geo.head_dim / fit.group);
    let mut w = UNIT_POS;
    while w < block_words {
        let mut word = 0u32;
        for j in 0..per_word {
            // Word `w` packs along the axis the partitions do not run along.
            let code_index = w * per_word + j;
            let (slot, channel) = if comptime![geo.fit.along_slots] {
                (code_index / d, code_index % d)
            } else {
                (code_index % pi, code_index / pi)
            };
            // The code's partition, and its place in it.
            let (part, i) = if comptime![geo.fit.along_slots] {
                (channel, slot)
            } else {
                (slot * groups + channel / fit.group, channel % fit.group)
            };
            let (_, _, place) = partition_place(part, block_slot, stream, streams, rounding_stream, geo);
            let offset = place.offset(i, d, fit);
            let x_i = x[base + (slot * d + channel) as usize];
            let code = code_of(x_i, mins[part as usize], scales[part as usize], offset, levels);
            word |= code << (j * fit.bits);
        }
        words[(block_index * block_words + w) as usize] = word;
        w += geo.units;
    }
}

/// Partition `p` of the block whose first slot is `block_slot`: its first element's offset in the
/// block, the step between its elements, and its place in the cache.
#[cube]
fn partition_place(
    p: u32,
    block_slot: u32,
    stream: u32,
    streams: u32,
    rounding_stream: u32,
    #[comptime] geo: BlockQuantizeGeometry,
) -> (u32, u32, PartitionPlace) {
    let mut start = p;
    let mut stride = 1u32;
    let mut slot = 0u32;
    let mut channel = p;
    if comptime![geo.fit.along_slots] {
        stride = geo.head_dim;
    } else {
        let groups = comptime!(geo.head_dim / geo.fit.group);
        slot = p / groups;
        channel = (p % groups) * geo.fit.group;
        start = slot * geo.head_dim + channel;
    }
    (start, stride, PartitionPlace { slot0: block_slot + slot, channel0: channel, stream, streams, rounding_stream })
}
