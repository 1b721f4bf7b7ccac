//! The log-sum-exp merge of split-sequence attention partials.
//!
//! A decode kernel that splits the cached sequence into `splits` parts writes, per (query head,
//! split), the unnormalized output `o_s = Σ_j e^(s_j - m_s) v_j`, the part's max score `m_s` and
//! its mass `l_s = Σ_j e^(s_j - m_s)`. The merged output is
//! `o = Σ_s o_s e^(m_s - M) / Σ_s l_s e^(m_s - M)` with `M = max_s m_s`.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use cubecl::prelude::*;

use super::{dense_output, dense_outputs, CubeF32};

/// The score of a masked slot: finite, so that `exp(masked - m)` is 0 without NaNs.
pub const MASKED_SCORE: f32 = -3.0e38;

/// [`MASKED_SCORE`] inside a kernel.
#[cube]
pub fn masked_score() -> f32 {
    f32::new(MASKED_SCORE)
}

/// Channels per merge cube (at most): a head's channels are spread over `⌈head_dim / 32⌉` cubes,
/// so a batch-1 decode of 32 heads still fills a GPU's multiprocessors.
const MERGE_TILE: u32 = 32;

/// Splits a merge unit loads at once (see [`merge_kernel`]).
const SPLITS_PER_ROUND: u32 = 4;

/// The most units of a merge cube.
const MAX_MERGE_UNITS: u32 = 1024;

/// Units an SM holds at once: 2048 (64 warps) on A100 and H100. Kernels size their launches to
/// fill the GPU once with it (this merge, ZACK's tensor-core decode); where an SM holds fewer, a
/// launch so sized leaves a partial second wave.
pub const SM_UNITS: u32 = 2048;

/// Units per channel where the device does not report its multiprocessors.
const DEFAULT_PARTS: u32 = 16;

/// Units per channel of a merge of `splits` splits in `cubes` cubes of `tile` channels on `sms`
/// multiprocessors: a power of two, as many as one wave of units holds (a second wave would only
/// wait for the first), at most the splits rounded up to a power of two (more would idle) and
/// at most [`MAX_MERGE_UNITS`] per cube.
fn merge_parts(cubes: u32, tile: u32, splits: u32, sms: Option<u32>) -> u32 {
    let cap = (MAX_MERGE_UNITS / tile).min(splits.next_power_of_two());
    let wave = sms.map_or(DEFAULT_PARTS, |sms| sms * SM_UNITS / (cubes * tile).max(1));
    let parts = wave.clamp(1, cap);
    1 << parts.ilog2()
}

/// One cube per (query head, tile of `tile` channels), `parts` units per channel; see the module
/// documentation.
///
/// Unit `(part, c)` merges splits `part, part + parts, …` of its channel on its own, against its
/// splits' own max `m_p`: `o_p = Σ_s o_s e^(m_s − m_p)`, `l_p = Σ_s l_s e^(m_s − m_p)`, in one pass
/// that rescales its sums by `e^(m − m')` when the running max moves from `m` to `m'`. One unit
/// per channel then merges the parts the same way, `o = Σ_p o_p e^(m_p − M) / Σ_p l_p e^(m_p −
/// M)` with `M = max_p m_p`. A head's splits are thus read by all its units at once, with one
/// cube synchronization. A part without splits has `m_p` = [`masked_score`] and `o_p = l_p = 0`.
/// Units of a last, partial tile past `head_dim` read and write nothing.
#[cube(launch_unchecked)]
pub fn merge_kernel(
    partial: &Array<f32>,
    partial_max: &Array<f32>,
    partial_sum: &Array<f32>,
    out: &mut Array<f32>,
    splits: u32,
    #[comptime] head_dim: u32,
    #[comptime] tile: u32,
    #[comptime] parts: u32,
) {
    let head = CUBE_POS_X;
    let unit = UNIT_POS;
    let units = comptime!(tile * parts);
    let mut part_max = SharedMemory::<f32>::new(comptime!(units as usize));
    let mut part_sum = SharedMemory::<f32>::new(comptime!(units as usize));
    let mut part_out = SharedMemory::<f32>::new(comptime!(units as usize));
    let lane = unit % tile;
    let c = CUBE_POS_Y * tile + lane;
    let part = unit / tile;
    let mut m = masked_score();
    let mut l = 0.0f32;
    let mut o = 0.0f32;
    if c < head_dim {
        // One pass, rescaling the running sums whenever the max moves, over rounds of
        // `SPLITS_PER_ROUND` splits whose values are all loaded before any is combined, so that a
        // round waits for its loads once. A round's places past the last split hold nothing: the
        // masked max, no mass, no output.
        let mut s = part;
        while s < splits {
            let mut split_max = Array::<f32>::new(SPLITS_PER_ROUND as usize);
            let mut split_sum = Array::<f32>::new(SPLITS_PER_ROUND as usize);
            let mut split_out = Array::<f32>::new(SPLITS_PER_ROUND as usize);
            #[unroll]
            for k in 0..SPLITS_PER_ROUND {
                let at = s + k * parts;
                let real = at < splits;
                let split = head * splits + u32::min(at, splits - 1);
                split_max[k as usize] = select(real, partial_max[split as usize], masked_score());
                split_sum[k as usize] = select(real, partial_sum[split as usize], 0.0);
                split_out[k as usize] = select(real, partial[(split * head_dim + c) as usize], 0.0);
            }
            #[unroll]
            for k in 0..SPLITS_PER_ROUND {
                let top = f32::max(m, split_max[k as usize]);
                let keep = f32::exp(m - top);
                let join = f32::exp(split_max[k as usize] - top);
                l = l * keep + split_sum[k as usize] * join;
                o = o * keep + split_out[k as usize] * join;
                m = top;
            }
            s += SPLITS_PER_ROUND * parts;
        }
    }
    part_max[unit as usize] = m;
    part_sum[unit as usize] = l;
    part_out[unit as usize] = o;
    sync_cube();
    if part == 0 && c < head_dim {
        let mut top = masked_score();
        #[unroll]
        for q in 0..parts {
            top = f32::max(top, part_max[(q * tile + lane) as usize]);
        }
        let mut total = 0.0f32;
        let mut mass = 0.0f32;
        #[unroll]
        for q in 0..parts {
            let w = f32::exp(part_max[(q * tile + lane) as usize] - top);
            total += part_out[(q * tile + lane) as usize] * w;
            mass += part_sum[(q * tile + lane) as usize] * w;
        }
        out[(head * head_dim + c) as usize] = total / mass;
    }
}

/// Where one decode cube's partial results go in [`SplitPartials`]: query heads
/// `first_head + g` (`g < group`), split `split` of `splits`.
#[derive(CubeType)]
pub struct SplitOut {
    /// The first query head (counting every batch row's heads).
    pub first_head: u32,
    /// This cube's split.
    pub split: u32,
    /// Splits per head.
    pub splits: u32,
}

#[cube]
impl SplitOut {
    /// Writes channel `c` of head `first_head + g`'s unnormalized output `value` to `out`
    /// (`[heads, splits, head_dim]`).
    pub fn write_output(&self, out: &mut Array<f32>, g: u32, c: u32, value: f32, #[comptime] head_dim: u32) {
        out[(((self.first_head + g) * self.splits + self.split) * head_dim + c) as usize] = value;
    }

    /// Writes head `first_head + g`'s max score and mass to `out_max` and `out_sum`
    /// (`[heads, splits]`).
    pub fn write_stats(&self, out_max: &mut Array<f32>, out_sum: &mut Array<f32>, g: u32, max: f32, mass: f32) {
        let at = (self.first_head + g) * self.splits + self.split;
        out_max[at as usize] = max;
        out_sum[at as usize] = mass;
    }
}

/// The flat buffers a split decode kernel writes: `output` `[heads, splits, head_dim]`, `max` and
/// `sum` `[heads, splits]` (`heads` counts every batch row's query heads).
#[derive(Debug, Clone)]
pub struct SplitPartials<R: CubeRuntime> {
    /// Unnormalized outputs, `[heads, splits, head_dim]`.
    pub output: CubeTensor<R>,
    /// Max score per part, `[heads, splits]`.
    pub max: CubeTensor<R>,
    /// Mass per part, `[heads, splits]`.
    pub sum: CubeTensor<R>,
    /// Query heads (all batch rows).
    pub heads: usize,
    /// Parts per head.
    pub splits: usize,
    /// Channels per head.
    pub head_dim: usize,
}

impl<R: CubeRuntime> SplitPartials<R> {
    /// Allocates the buffers on `like`'s device, in one allocation ([`dense_outputs`]).
    pub fn allocate(like: &CubeTensor<R>, heads: usize, splits: usize, head_dim: usize) -> Self {
        let [output, max, sum] =
            dense_outputs::<R, f32, 3>(like, [heads * splits * head_dim, heads * splits, heads * splits]);
        Self { output, max, sum, heads, splits, head_dim }
    }
}

/// A decode step's attention output `[batch, heads, 1, head_dim]` from the partials of its
/// split kernel, whose rows are every batch row's query heads (`partials.heads = batch · heads`):
/// the merge and the shape every split decode launch ends with.
pub fn merge_decode_output<R: CubeRuntime, BT: BoolElement>(
    partials: SplitPartials<R>,
    batch: usize,
) -> Tensor<CubeF32<R, BT>, 4> {
    let (heads, head_dim) = (partials.heads / batch, partials.head_dim);
    let out = merge_partials(partials);
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, 1, head_dim])
}

/// Merges `partials` with `merge_kernel`; returns the flat `[heads, head_dim]` output.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn merge_partials<R: CubeRuntime>(partials: SplitPartials<R>) -> CubeTensor<R> {
    let SplitPartials { output, max, sum, heads, splits, head_dim } = partials;
    let out = dense_output::<R, f32>(&output, heads * head_dim);
    let client = output.client.clone();
    let tile = MERGE_TILE.min(head_dim as u32);
    let tiles = (head_dim as u32).div_ceil(tile);
    let sms = client.properties().hardware.num_streaming_multiprocessors;
    let parts = merge_parts(heads as u32 * tiles, tile, splits as u32, sms);
    let units = parts * tile;
    // SAFETY: one cube per (head `< heads`, tile of channels); its units read parts `< splits`
    // and channels `< head_dim` (the guard) of buffers `SplitPartials::allocate` sized `heads · splits (· head_dim)`, and
    // write `out`, sized `heads · head_dim` above. Bounds validated on CUDA: the module docs.
    unsafe {
        merge_kernel::launch_unchecked(
            &client,
            CubeCount::Static(heads as u32, tiles, 1),
            CubeDim::new_1d(units),
            output.into_array_arg(),
            max.into_array_arg(),
            sum.into_array_arg(),
            out.clone().into_array_arg(),
            splits as u32,
            head_dim as u32,
            tile,
            parts,
        )
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_units_fill_one_wave_and_no_more_than_the_splits_use() {
        // ZACK at 32K on 132 SMs: batch 8 (256 heads × 4 tiles, 32 splits), batch 1 (32 heads).
        assert_eq!(merge_parts(1024, 32, 32, Some(132)), 8);
        assert_eq!(merge_parts(128, 32, 256, Some(132)), 32);
        // Few splits: no idle parts; 7 splits take 8 parts (one idles), 1 split one part.
        assert_eq!(merge_parts(4, 32, 7, Some(132)), 8);
        assert_eq!(merge_parts(4, 32, 1, Some(132)), 1);
        // More cubes than a wave: one unit per channel; no device count: the default.
        assert_eq!(merge_parts(100_000, 32, 64, Some(132)), 1);
        assert_eq!(merge_parts(4, 16, 64, None), DEFAULT_PARTS);
        for (cubes, tile, splits) in [(1, 32, 1000), (3, 16, 5), (777, 32, 40)] {
            let parts = merge_parts(cubes, tile, splits, Some(132));
            assert!(parts.is_power_of_two() && parts * tile <= MAX_MERGE_UNITS);
        }
    }
}
