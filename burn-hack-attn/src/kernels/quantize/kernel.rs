//! The quantize + pack kernel: one unit per partition. It finds the partition's min/max, rounds
//! min and scale to fp16 (stored as one word), computes each code as the host quantizer does
//! (`floor((x - min) / scale + offset)`, clamped), packs `32 / bits` codes per word (first code in
//! the lowest bits) and sums the codes.

use cubecl::prelude::*;
use half::f16;

use crate::kernels::{noise_cube::uniform_cube, params_word::params_word};

/// Layout constants of one launch (comptime: one compiled kernel per cache geometry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantizeGeometry {
    /// Bits per code.
    pub bits: u32,
    /// Elements per partition.
    pub group: u32,
    /// Partitions per row.
    pub parts: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Π.
    pub partition: u32,
    /// Rows are value-block channels (else key slots).
    pub value_blocks: bool,
    /// Stochastic rounding (else nearest).
    pub stochastic: bool,
}

/// `x`: `[streams * rows * parts * group]` (contiguous `[batch, kv_heads, rows, z]`); outputs per
/// partition: `group * bits / 32` words, the fp16 (min, scale) word
/// ([`GroupParams::word`](crate::quant::GroupParams::word)), the code sum.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn quantize_kernel(
    x: &Array<f32>,
    words: &mut Array<u32>,
    params: &mut Array<u32>,
    sums: &mut Array<u32>,
    partitions: u32,
    rows: u32,
    streams: u32,
    first_slot: u32,
    rounding_stream: u32,
    #[comptime] geo: QuantizeGeometry,
) {
    let p = ABSOLUTE_POS as u32;
    if p >= partitions {
        terminate!();
    }
    let part = p % geo.parts;
    let row_global = p / geo.parts;
    let row = row_global % rows;
    let stream = row_global / rows;
    let base = (p * geo.group) as usize;

    let mut lo = x[base];
    let mut hi = x[base];
    for i in 1..geo.group {
        let v = x[base + i as usize];
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    let levels = f32::cast_from((1u32 << geo.bits) - 1);
    let min = f32::cast_from(f16::cast_from(lo));
    let mut scale = f32::cast_from(f16::cast_from((hi - min) / levels));
    if scale <= 0.0 {
        scale = 1.0;
    }

    let per_word = 32 / geo.bits;
    let words_per_group = geo.group / per_word;
    let mut sum = 0u32;
    for w in 0..words_per_group {
        let mut word = 0u32;
        for j in 0..per_word {
            let i = w * per_word + j;
            let mut offset = 0.5f32;
            if comptime![geo.stochastic] {
                let (slot, channel) = if comptime![geo.value_blocks] {
                    (first_slot + (row / geo.head_dim) * geo.partition + i, row % geo.head_dim)
                } else {
                    (first_slot + row, part * geo.group + i)
                };
                let index = (slot * streams + stream) * geo.head_dim + channel;
                offset = uniform_cube(rounding_stream, index);
            }
            let y = f32::floor((x[base + i as usize] - min) / scale + offset);
            let mut code = 0u32;
            if y > 0.0 {
                code = u32::cast_from(f32::min(y, levels));
            }
            word |= code << (j * geo.bits);
            sum += code;
        }
        words[(p * words_per_group + w) as usize] = word;
    }
    params[p as usize] = params_word(min, scale);
    sums[p as usize] = sum;
}
