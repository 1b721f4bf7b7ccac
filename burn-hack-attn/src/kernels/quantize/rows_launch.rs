//! Launching the quantize kernel on a CubeCL backend.

use super::rows_kernel::{quantize_kernel, QuantizeGeometry, RangeFit};
use crate::{
    kernels::{Codes, QuantizeSpec, RowLayout},
    quant::Rounder,
};
use burn::tensor::{Int, Tensor};
use burn_cubecl::{cubecl::prelude::*, kernel::into_contiguous, tensor::CubeTensor, BoolElement, CubeRuntime};

use burn_kvcompress::kernels::{dense_output, CubeF32 as Backend};

/// Quantizes `x: [batch, kv_heads, rows, z]` per `spec` with `quantize_kernel`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn quantize_launch<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<Backend<R, BT>, 4>,
    spec: &QuantizeSpec,
) -> Codes<Backend<R, BT>> {
    let [batch, kv_heads, rows, z] = x.dims();
    let parts = z / spec.group;
    let x = into_contiguous(x.into_primitive().tensor());
    let meta = [batch, kv_heads, rows, parts];
    let partitions = batch * kv_heads * rows * parts;
    let words_shape = [batch, kv_heads, rows, parts * spec.words_per_group()];
    let words = dense_output::<R, i32>(&x, words_shape.iter().product());
    let params = dense_output::<R, i32>(&x, partitions);
    let sums = dense_output::<R, i32>(&x, partitions);
    let (fit, first_slot, rounding_stream) = kernel_fit(spec);
    let geo =
        QuantizeGeometry { fit, parts: parts as u32, head_dim: spec.head_dim as u32, partition: spec.partition as u32 };
    let cube_dim = CubeDim::new_1d(64);
    let cube_count = CubeCount::Static(partitions.div_ceil(64) as u32, 1, 1);
    // SAFETY: the kernel reads and writes partition `p < partitions` only (its one guard); the
    // buffers were sized above from the same `partitions`, `rows`, `parts` and `head_dim`, and
    // loops are bounded by comptime shapes. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        quantize_kernel::launch_unchecked(
            &x.client,
            cube_count,
            cube_dim,
            x.clone().into_array_arg(),
            words.clone().into_array_arg(),
            params.clone().into_array_arg(),
            sums.clone().into_array_arg(),
            partitions as u32,
            rows as u32,
            (batch * kv_heads) as u32,
            first_slot,
            rounding_stream,
            geo,
        )
    };
    let int = |t: CubeTensor<R>, shape: [usize; 4]| Tensor::<Backend<R, BT>, 1, Int>::from_primitive(t).reshape(shape);
    Codes { words: int(words, words_shape), params: int(params, meta), sums: int(sums, meta) }
}

/// The quantize kernels' view of `spec`: how each partition is fitted (along slots for
/// [`RowLayout::ValueBlocks`], along channels for [`RowLayout::Keys`]), the slot of the layout's
/// first row, and the stream of stochastic numbers (0 when rounding to nearest).
pub(super) fn kernel_fit(spec: &QuantizeSpec) -> (RangeFit, u32, u32) {
    let (along_slots, first_slot) = match spec.layout {
        RowLayout::Keys { first_slot } => (false, first_slot),
        RowLayout::ValueBlocks { first_slot } => (true, first_slot),
    };
    let (stochastic, rounding_stream) = match spec.rounder {
        Rounder::Nearest => (false, 0),
        Rounder::Stochastic { stream } => (true, stream),
    };
    let fit = RangeFit { bits: spec.bits as u32, group: spec.group as u32, along_slots, stochastic, clip: spec.clip };
    (fit, first_slot as u32, rounding_stream)
}
