//! Kernel buffers: flat outputs and contiguous inputs.

use burn::tensor::{DType, Int, Shape, Tensor};
use burn_cubecl::{
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

/// [`dense_output`] with the element type chosen at run time (a float type of the weights).
pub fn dense_output_of<R: CubeRuntime>(like: &CubeTensor<R>, n: usize, dtype: DType) -> CubeTensor<R> {
    empty_device_dtype(like.client.clone(), like.device.clone(), Shape::new([n]), dtype)
}

/// Whether `dtype` is a float type the model kernels ([`rms_norm`](super::rms_norm),
/// [`rotary`](super::rotary), [`row_product`](super::row_product)) compile for: f16, bf16 or f32.
pub fn kernel_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32)
}

/// A float tensor as a contiguous kernel argument.
pub fn float_arg<R: CubeRuntime, BT: BoolElement, const D: usize>(t: &Tensor<CubeF32<R, BT>, D>) -> CubeTensor<R> {
    into_contiguous(t.clone().into_primitive().tensor())
}

/// An integer tensor as a contiguous kernel argument.
pub fn int_arg<R: CubeRuntime, BT: BoolElement, const D: usize>(t: &Tensor<CubeF32<R, BT>, D, Int>) -> CubeTensor<R> {
    into_contiguous(t.clone().into_primitive())
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
