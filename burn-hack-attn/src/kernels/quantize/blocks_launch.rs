//! Launching the block quantizer on a CubeCL backend.

use super::{
    blocks_kernel::{quantize_blocks_kernel, BlockQuantizeGeometry},
    rows_launch::kernel_fit,
};
use crate::kernels::{PackedRows, QuantizeSpec};
use burn::tensor::{Int, Tensor};
use burn_cubecl::{cubecl::prelude::*, kernel::into_contiguous, tensor::CubeTensor, BoolElement, CubeRuntime};

use burn_kvcompress::kernels::{dense_outputs, CubeF32 as Backend};

/// Units per cube: the partitions and words of a block are spread over them.
const UNITS: u32 = 128;

/// Quantizes the blocks of `x: [batch, kv_heads, blocks · Π, head_dim]` per `spec` with
/// `quantize_blocks_kernel`, as [`quantize_blocks_reference`](super::quantize_blocks_reference)
/// does.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn quantize_blocks_launch<R: CubeRuntime, BT: BoolElement>(
    x: Tensor<Backend<R, BT>, 4>,
    spec: &QuantizeSpec,
) -> PackedRows<Backend<R, BT>> {
    let [batch, kv_heads, slots, d] = x.dims();
    let pi = spec.partition;
    let blocks = slots / pi;
    let (fit, first_slot, rounding_stream) = kernel_fit(spec);
    let geo = BlockQuantizeGeometry { fit, head_dim: d as u32, partition: pi as u32, units: UNITS };
    let streams = batch * kv_heads;
    let x = into_contiguous(x.into_primitive().tensor());
    let partitions = streams * blocks * geo.partitions() as usize;
    let [words, params] = dense_outputs::<R, i32, 2>(&x, [streams * blocks * geo.words() as usize, partitions]);
    let (words_shape, params_shape) = match fit.along_slots {
        true => ([batch, kv_heads, blocks * pi, d * spec.bits as usize / 32], [batch, kv_heads, blocks * d, 1]),
        false => (
            [batch, kv_heads, blocks * d, pi * spec.bits as usize / 32],
            [batch, kv_heads, blocks * pi, d / spec.group],
        ),
    };
    // SAFETY: cube (block, stream) reads its block's Π · head_dim elements of `x` and writes its
    // own `partitions()` params and `words()` words; the grid is exactly `blocks × streams`, the
    // buffers sized above from the same counts, every loop bounded by comptime shapes.
    unsafe {
        quantize_blocks_kernel::launch_unchecked(
            &x.client,
            CubeCount::Static(blocks as u32, streams as u32, 1),
            CubeDim::new_1d(UNITS),
            x.clone().into_array_arg(),
            words.clone().into_array_arg(),
            params.clone().into_array_arg(),
            blocks as u32,
            streams as u32,
            first_slot,
            rounding_stream,
            geo,
        )
    };
    let int = |t: CubeTensor<R>, shape: [usize; 4]| Tensor::<Backend<R, BT>, 1, Int>::from_primitive(t).reshape(shape);
    PackedRows { words: int(words, words_shape), params: int(params, params_shape) }
}
