//! The log-sum-exp merge of split-sequence attention partials.
//!
//! A decode kernel that splits the cached sequence into `splits` parts writes, per (query head,
//! split), the unnormalized output `o_s = Σ_j e^(s_j - m_s) v_j`, the part's max score `m_s` and
//! its mass `l_s = Σ_j e^(s_j - m_s)`. The merged output is
//! `o = Σ_s o_s e^(m_s - M) / Σ_s l_s e^(m_s - M)` with `M = max_s m_s`.

use burn_cubecl::{tensor::CubeTensor, CubeRuntime};
use cubecl::prelude::*;

use super::dense_output;

/// The score of a masked slot: finite, so that `exp(masked - m)` is 0 without NaNs.
#[cube]
pub fn masked_score() -> f32 {
    f32::new(-3.0e38)
}

/// One unit per (query head, channel); see the module documentation.
#[cube(launch)]
pub fn merge_kernel(
    partial: &Array<f32>,
    partial_max: &Array<f32>,
    partial_sum: &Array<f32>,
    out: &mut Array<f32>,
    heads: u32,
    splits: u32,
    #[comptime] head_dim: u32,
) {
    let index = ABSOLUTE_POS as u32;
    if index >= heads * head_dim {
        terminate!();
    }
    let head = index / head_dim;
    let c = index % head_dim;
    let mut m = masked_score();
    for s in 0..splits {
        m = f32::max(m, partial_max[(head * splits + s) as usize]);
    }
    let mut l = 0.0f32;
    let mut o = 0.0f32;
    for s in 0..splits {
        let w = f32::exp(partial_max[(head * splits + s) as usize] - m);
        l += partial_sum[(head * splits + s) as usize] * w;
        o += partial[((head * splits + s) * head_dim + c) as usize] * w;
    }
    out[index as usize] = o / l;
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
    /// Allocates the buffers on `like`'s device.
    pub fn allocate(like: &CubeTensor<R>, heads: usize, splits: usize, head_dim: usize) -> Self {
        Self {
            output: dense_output::<R, f32>(like, heads * splits * head_dim),
            max: dense_output::<R, f32>(like, heads * splits),
            sum: dense_output::<R, f32>(like, heads * splits),
            heads,
            splits,
            head_dim,
        }
    }
}

/// Merges `partials` with [`merge_kernel`]; returns the flat `[heads, head_dim]` output.
pub fn merge_partials<R: CubeRuntime>(partials: SplitPartials<R>) -> CubeTensor<R> {
    let SplitPartials { output, max, sum, heads, splits, head_dim } = partials;
    let out = dense_output::<R, f32>(&output, heads * head_dim);
    let client = output.client.clone();
    merge_kernel::launch(
        &client,
        CubeCount::Static((heads * head_dim).div_ceil(128) as u32, 1, 1),
        CubeDim::new_1d(128),
        output.into_array_arg(),
        max.into_array_arg(),
        sum.into_array_arg(),
        out.clone().into_array_arg(),
        heads as u32,
        splits as u32,
        head_dim as u32,
    );
    out
}
