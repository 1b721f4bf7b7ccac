//! Kernel buffers: flat outputs and dense inputs.

use burn::tensor::{DType, Int, Shape, Tensor};
use burn_cubecl::{
    cubecl::prelude::ComputeClient,
    kernel::into_contiguous,
    ops::numeric::{empty_device, empty_device_dtype},
    tensor::CubeTensor,
    BoolElement, CubeBackend, CubeElement, CubeRuntime,
};

/// The CubeCL backends the kernels run on: f32 floats, i32 integers.
pub type CubeF32<R, BT> = CubeBackend<R, f32, i32, BT>;

/// A dense output buffer of `n` elements of `E` on `like`'s device. Kernels index outputs as
/// dense arrays, and a multi-dimensional allocation may pad its rows (CUDA's optimized layout
/// does), so outputs are allocated flat and reshaped as tensors afterwards.
pub fn dense_output<R: CubeRuntime, E: CubeElement>(like: &CubeTensor<R>, n: usize) -> CubeTensor<R> {
    empty_device::<R, E>(like.client.clone(), like.device.clone(), Shape::new([n]))
}

/// `N` dense output buffers of `lens` elements of `E` on `like`'s device, carved out of one
/// allocation: each part starts at a multiple of the device's memory alignment (as Burn's slices
/// of a buffer do). A reservation in CubeCL's memory pool scans its pages on the device thread
/// that also launches the kernels; the outputs a decode step's layer allocates for one kernel
/// (split partials) cost one reservation instead of `N`.
pub fn dense_outputs<R: CubeRuntime, E: CubeElement, const N: usize>(
    like: &CubeTensor<R>,
    lens: [usize; N],
) -> [CubeTensor<R>; N] {
    let alignment = (like.client.properties().memory.alignment as usize).max(1);
    let elem = size_of::<E>();
    // Bytes each part spans: its elements rounded up to the alignment (and to whole elements).
    let spans = lens.map(|n| (n * elem).div_ceil(alignment) * alignment);
    let total_elems = spans.iter().sum::<usize>() / elem;
    let buffer = dense_output::<R, E>(like, total_elems);
    let total = (total_elems * elem) as u64;
    let mut start = 0u64;
    std::array::from_fn(|i| {
        let span = spans[i] as u64;
        let handle = buffer.handle.clone().offset_start(start).offset_end(total - start - span);
        start += span;
        CubeTensor::new_contiguous(
            buffer.client.clone(),
            buffer.device.clone(),
            Shape::new([lens[i]]),
            handle,
            buffer.dtype,
        )
    })
}

/// [`dense_output`] with the element type chosen at run time (a float type of the weights).
pub fn dense_output_of<R: CubeRuntime>(like: &CubeTensor<R>, n: usize, dtype: DType) -> CubeTensor<R> {
    empty_device_dtype(like.client.clone(), like.device.clone(), Shape::new([n]), dtype)
}

/// Whether `dtype` is a float type the model kernels ([`rms_norm`](super::rms_norm),
/// [`rotary_qk`](super::rotary_qk), [`row_product`](super::row_product)) compile for: f16, bf16 or f32.
pub fn kernel_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32)
}

/// The widest vector of `elem_bytes`-byte elements the device loads well that divides every
/// width of `widths`.
pub fn widest_vector<R: CubeRuntime>(client: &ComputeClient<R>, elem_bytes: usize, widths: &[usize]) -> usize {
    let divides = |v: &usize| widths.iter().all(|n| n.is_multiple_of(*v));
    client.io_optimized_vector_sizes(elem_bytes).filter(divides).max().unwrap_or(1)
}

/// A float tensor as a dense kernel argument ([`dense_arg`]).
pub fn float_arg<R: CubeRuntime, BT: BoolElement, const D: usize>(t: &Tensor<CubeF32<R, BT>, D>) -> CubeTensor<R> {
    dense_arg(t.clone().into_primitive().tensor())
}

/// An integer tensor as a dense kernel argument ([`dense_arg`]).
pub fn int_arg<R: CubeRuntime, BT: BoolElement, const D: usize>(t: &Tensor<CubeF32<R, BT>, D, Int>) -> CubeTensor<R> {
    dense_arg(t.clone().into_primitive())
}

/// A tensor whose buffer a kernel can index as the row-major array of its shape: the tensor as
/// it is where its elements already lie that way ([`lies_dense`]), else a contiguous copy.
pub fn dense_arg<R: CubeRuntime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    match lies_dense(tensor.meta.shape(), tensor.meta.strides()) {
        true => tensor,
        false => into_contiguous(tensor),
    }
}

/// Whether a tensor of `shape` and `strides` lies in memory as the contiguous tensor of its
/// shape does. Burn's contiguity check also asks dimensions of one element for their contiguous
/// stride, which a swap of such a dimension changes without moving anything: a decode step's
/// queries `[batch, 1, heads, dim]` viewed as `[batch, heads, 1, dim]` lie dense, and copying them
/// costs a launch per layer.
pub fn lies_dense(shape: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected *= dim;
    }
    true
}

/// A tensor as a kernel argument whose rows (its last dimension; the leading dimensions
/// flattened) start every `pitch` elements, with that pitch: the tensor as it is when its rows
/// are only padded, else a contiguous copy (pitch = the last dimension). CUDA's optimized
/// allocations pad narrow rows (two f32 take 16 bytes), so a kernel that takes the pitch reads
/// such a tensor in place instead of copying it at every call.
pub fn pitched_rows_arg<R: CubeRuntime>(tensor: CubeTensor<R>) -> (CubeTensor<R>, usize) {
    let (shape, strides) = (tensor.meta.shape().to_vec(), tensor.meta.strides().to_vec());
    let rank = shape.len();
    let width = shape.last().copied().unwrap_or(1);
    let pitch = if rank >= 2 { strides[rank - 2] } else { width };
    let leading_dense = (0..rank.saturating_sub(2)).all(|i| strides[i] == strides[i + 1] * shape[i + 1]);
    if rank >= 2 && strides[rank - 1] == 1 && pitch >= width && leading_dense {
        (tensor, pitch)
    } else {
        (into_contiguous(tensor), width)
    }
}

#[cfg(test)]
mod tests {
    use super::lies_dense;

    #[test]
    fn dimensions_of_one_element_may_have_any_stride() {
        assert!(lies_dense(&[2, 3, 4], &[12, 4, 1]));
        // `[2, 1, 3, 4]` viewed with axes 1 and 2 swapped: `[2, 3, 1, 4]`, strides `[12, 4, 12, 1]`.
        assert!(lies_dense(&[2, 3, 1, 4], &[12, 4, 12, 1]));
        assert!(lies_dense(&[1, 1], &[7, 9]));
        assert!(lies_dense(&[], &[]));
        // A true transpose, padded rows, a broadcast.
        assert!(!lies_dense(&[3, 4], &[1, 3]));
        assert!(!lies_dense(&[3, 2], &[4, 1]));
        assert!(!lies_dense(&[3, 4], &[0, 1]));
    }
}
