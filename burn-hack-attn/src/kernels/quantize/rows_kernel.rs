//! The quantize + pack kernel: one unit per partition. It finds the partition's min/max (or, when
//! clipping, the clipped range with the least squared error), rounds min and scale to fp16
//! (stored as one word), computes each code as the host quantizer does (`floor((x - min) / scale +
//! offset)`, clamped), packs `32 / bits` codes per word (first code in the lowest bits) and sums
//! the codes.

use cubecl::prelude::*;
use half::f16;

use crate::{
    kernels::{noise::uniform_cube, params_word::params_word},
    quant::CLIP_RATIOS,
};

/// Layout constants of one launch (comptime: one compiled kernel per cache geometry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QuantizeGeometry {
    /// How each partition is fitted; along slots, rows are value-block channels (else key
    /// slots).
    pub fit: RangeFit,
    /// Partitions per row.
    pub parts: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Π.
    pub partition: u32,
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
    let fit = comptime!(geo.fit);
    let base = (p * fit.group) as usize;

    let (slot0, channel0) = if comptime![fit.along_slots] {
        (first_slot + (row / geo.head_dim) * geo.partition, row % geo.head_dim)
    } else {
        (first_slot + row, part * fit.group)
    };
    let place = PartitionPlace { slot0, channel0, stream, streams, rounding_stream };
    let (min, scale) = fitted_range(x, base, 1, &place, geo.head_dim, fit);

    let levels = f32::cast_from((1u32 << fit.bits) - 1);
    let per_word = 32 / fit.bits;
    let words_per_group = fit.group / per_word;
    let mut sum = 0u32;
    for w in 0..words_per_group {
        let mut word = 0u32;
        for j in 0..per_word {
            let i = w * per_word + j;
            let offset = place.offset(i, geo.head_dim, fit);
            let code = code_of(x[base + i as usize], min, scale, offset, levels);
            word |= code << (j * fit.bits);
            sum += code;
        }
        words[(p * words_per_group + w) as usize] = word;
    }
    params[p as usize] = params_word(min, scale);
    sums[p as usize] = sum;
}

/// How a partition's range is fitted and its codes rounded (comptime).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RangeFit {
    /// Bits per code.
    pub bits: u32,
    /// Elements per partition.
    pub group: u32,
    /// The partition's elements are consecutive slots of one channel (else consecutive channels
    /// of one slot): where each element's stochastic number is drawn.
    pub along_slots: bool,
    /// Stochastic rounding (else nearest).
    pub stochastic: bool,
    /// The range clipped to the least squared error.
    pub clip: bool,
}

/// Where a partition's elements sit in the cache, for their stochastic numbers: element `i` at
/// (`slot0 + i`, `channel0`) along slots, (`slot0`, `channel0 + i`) along channels, of stream
/// `stream` of `streams` (batch row × KV head), drawn from `rounding_stream`.
#[derive(CubeType)]
pub struct PartitionPlace {
    pub slot0: u32,
    pub channel0: u32,
    pub stream: u32,
    pub streams: u32,
    pub rounding_stream: u32,
}

#[cube]
impl PartitionPlace {
    /// Element `i`'s rounding offset: 0.5, or its stochastic number.
    pub fn offset(&self, i: u32, #[comptime] head_dim: u32, #[comptime] fit: RangeFit) -> f32 {
        let mut offset = 0.5f32;
        if comptime![fit.stochastic] {
            let (slot, channel) = if comptime![fit.along_slots] {
                (self.slot0 + i, self.channel0)
            } else {
                (self.slot0, self.channel0 + i)
            };
            offset =
                uniform_cube(self.rounding_stream, rounding_index(slot, self.stream, self.streams, channel, head_dim));
        }
        offset
    }
}

/// The fp16-rounded (min, scale) of the partition `x[base + i · stride]`, `i < group`, placed in
/// the cache at `place`: its min/max range or, when clipping, the host's `quantize_group_clipped`
/// (each ratio of the range about its midpoint, the least squared error kept, the widest on
/// ties).
#[cube]
pub fn fitted_range(
    x: &Array<f32>,
    base: usize,
    stride: u32,
    place: &PartitionPlace,
    #[comptime] head_dim: u32,
    #[comptime] fit: RangeFit,
) -> (f32, f32) {
    let mut lo = x[base];
    let mut hi = x[base];
    for i in 1..fit.group {
        let v = x[base + (i * stride) as usize];
        if v < lo {
            lo = v;
        }
        if v > hi {
            hi = v;
        }
    }
    let levels = f32::cast_from((1u32 << fit.bits) - 1);
    let (mut min, mut scale) = range_params(lo, hi, levels);
    if comptime![fit.clip] {
        // No infinite literal (WGSL has none): the first ratio's error starts the search.
        let mid = 0.5f32 * (lo + hi);
        let half = 0.5f32 * (hi - lo);
        let mut best = 0.0f32;
        for r in 0..comptime!(CLIP_RATIOS.len() as u32) {
            let ratio = clip_ratio(r);
            let (m, s) = range_params(mid - ratio * half, mid + ratio * half, levels);
            let mut error = 0.0f32;
            for i in 0..fit.group {
                let x_i = x[base + (i * stride) as usize];
                let offset = place.offset(i, head_dim, fit);
                let code = code_of(x_i, m, s, offset, levels);
                let diff = s * f32::cast_from(code) + m - x_i;
                error += diff * diff;
            }
            if r == 0 || error < best {
                best = error;
                min = m;
                scale = s;
            }
        }
    }
    (min, scale)
}

/// The fp16-rounded (min, scale) of the levels of `[lo, hi]` (scale 1 where it rounds to 0), as
/// the host's `quantize_range` computes them.
#[cube]
fn range_params(lo: f32, hi: f32, levels: f32) -> (f32, f32) {
    let min = f32::cast_from(f16::cast_from(lo));
    let mut scale = f32::cast_from(f16::cast_from((hi - min) / levels));
    if scale <= 0.0 {
        scale = 1.0;
    }
    (min, scale)
}

/// `CLIP_RATIOS[r]`, each written as the same literal as on the host.
#[cube]
fn clip_ratio(r: u32) -> f32 {
    let mut ratio = 1.0f32;
    if r == 1 {
        ratio = 0.9f32;
    } else if r == 2 {
        ratio = 0.8f32;
    } else if r == 3 {
        ratio = 0.7f32;
    } else if r == 4 {
        ratio = 0.6f32;
    } else if r == 5 {
        ratio = 0.5f32;
    }
    ratio
}

/// `clamp(floor((x - min) / scale + offset), 0, levels)`.
#[cube]
pub fn code_of(x: f32, min: f32, scale: f32, offset: f32, levels: f32) -> u32 {
    let y = f32::floor((x - min) / scale + offset);
    let mut code = 0u32;
    if y > 0.0 {
        code = u32::cast_from(f32::min(y, levels));
    }
    code
}

/// The stochastic number's index of (slot, stream, channel): `QuantizeSpec::index`, wrapping
/// at 2^32.
#[cube]
pub fn rounding_index(slot: u32, stream: u32, streams: u32, channel: u32, #[comptime] head_dim: u32) -> u32 {
    (slot * streams + stream) * head_dim + channel
}
