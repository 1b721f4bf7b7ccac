//! The launch steps every decode variant shares around its own kernel: the step's metadata
//! upload, the reduced queries, the per-split partial results and their merge.

use burn::tensor::{Int, Tensor, TensorData};
use burn_cubecl::{tensor::CubeTensor, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{float_arg, int_arg, CubeF32, SplitPartials},
};

use super::rotate_launch::rotate_queries;
use crate::layout::HeadLayout;

/// The head of a kernel's metadata upload: per KV head `[key_offset, key_rank, value_offset,
/// value_rank]`, then each batch row's first real slot (a task table follows).
pub fn step_metadata(layout: &HeadLayout, options: &AttendOptions) -> Vec<i32> {
    let mut meta: Vec<i32> = (0..layout.kv_heads())
        .flat_map(|h| {
            let (k, v) = (layout.key_columns(h), layout.value_columns(h));
            [k.start, k.len(), v.start, v.len()].map(|x| x as i32)
        })
        .collect();
    meta.extend(options.key_start.iter().map(|&s| s as i32));
    meta
}

/// `meta` (the words of a metadata upload) on `device`, as a kernel argument.
pub fn upload_metadata<R: CubeRuntime, BT: BoolElement>(meta: Vec<i32>, device: &R::Device) -> CubeTensor<R> {
    let words = meta.len();
    int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::from_data(TensorData::new(meta, [words]), device))
}

/// A decode step's inputs but its queries (which the rotation consumes), shapes already checked
/// and within what the kernels [`supports`](super::select::supports), every head's ranks at
/// least 1.
pub struct DecodeInputs<'a, R: CubeRuntime, BT: BoolElement> {
    /// `[head_dim, Σ k_qk]`, the packed query/key basis.
    pub basis: Tensor<CubeF32<R, BT>, 2>,
    /// `[batch, len, Σ k_qk]` reduced keys and `[batch, len, Σ k_vo]` reduced values, both f32
    /// or both f16.
    pub keys: Tensor<CubeF32<R, BT>, 3>,
    /// See `keys`.
    pub values: Tensor<CubeF32<R, BT>, 3>,
    /// The heads' ranks and columns.
    pub layout: &'a HeadLayout,
    /// Scale, mask and each sequence's first real slot.
    pub options: &'a AttendOptions,
    /// `[batch, heads, head_dim]` of the queries `[batch, heads, 1, head_dim]`.
    pub dims: [usize; 3],
}

impl<R: CubeRuntime, BT: BoolElement> DecodeInputs<'_, R, BT> {
    /// Cached slots per sequence.
    pub fn slots(&self) -> usize {
        self.keys.dims()[1]
    }
}

/// What a decode kernel reads and writes, in the order the step makes them: the metadata upload,
/// the reduced queries `[batch, heads, Σ k_qk]` and the partials of `splits` splits per head.
pub struct DecodeStep<R: CubeRuntime> {
    /// The metadata upload: [`step_metadata`] and the variant's table.
    pub meta: CubeTensor<R>,
    /// `scale · q_g R̃` per query head, computed once per step (not once per split).
    pub reduced_q: CubeTensor<R>,
    /// Each split's unnormalized output, max score and mass.
    pub partials: SplitPartials<R>,
}

impl<R: CubeRuntime> DecodeStep<R> {
    /// Uploads `meta`, rotates the queries `q: [batch, heads, 1, head_dim]` (dense) with
    /// `inputs`' basis and allocates the partials of `splits` splits per head.
    pub fn begin<BT: BoolElement>(
        q: CubeTensor<R>,
        inputs: &DecodeInputs<'_, R, BT>,
        meta: Vec<i32>,
        splits: usize,
    ) -> Self {
        let (layout, [batch, heads, d]) = (inputs.layout, inputs.dims);
        let meta = upload_metadata::<R, BT>(meta, &q.device);
        let group = heads / layout.kv_heads();
        let reduced_q = rotate_queries(
            q,
            float_arg(&inputs.basis),
            &meta,
            layout,
            (batch, heads),
            (group as u32, d as u32),
            inputs.options.scale,
        );
        let partials = SplitPartials::allocate(&reduced_q, batch * heads, splits, d);
        Self { meta, reduced_q, partials }
    }
}

/// Launches the portable or the `wmma` decode kernel (`$kernel`, its `launch_unchecked` for an
/// element type) with compile-time shapes `$geo` over the [`DecodeInputs`] `$inputs` and the
/// [`DecodeStep`] `$step` (its queries and metadata moved into the launch, its partials left for
/// the merge). `$shape` is `(grid, units per cube, load width, split word)`; the split word is
/// the kernels' twelfth argument: the splits per head (portable) or the slots per split (`wmma`).
/// Both kernels take the same arguments and differ in their element type, cube size and geometry.
///
/// Callers state, in an `unsafe` block around it, why the launch is in bounds.
macro_rules! launch_split_kernel {
    ($kernel:expr, $inputs:ident, $step:ident, $shape:expr, $geo:expr) => {{
        let (cubes, units, vector, split_word): (CubeCount, u32, u32, usize) = $shape;
        $kernel(
            &$step.reduced_q.client.clone(),
            cubes,
            CubeDim::new_1d(units),
            vector as usize,
            $step.reduced_q.into_array_arg(),
            float_arg(&$inputs.keys).into_array_arg(),
            float_arg(&$inputs.values).into_array_arg(),
            $step.meta.into_array_arg(),
            $step.partials.output.clone().into_array_arg(),
            $step.partials.max.clone().into_array_arg(),
            $step.partials.sum.clone().into_array_arg(),
            $inputs.layout.kv_heads() as u32,
            $inputs.slots() as u32,
            split_word as u32,
            $inputs.options.window.unwrap_or(0) as u32,
            $inputs.layout.key_width() as u32,
            $inputs.layout.value_width() as u32,
            $geo,
        )
    }};
}
pub(super) use launch_split_kernel;
