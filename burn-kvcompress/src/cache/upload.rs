//! A state tensor's host bytes into a device tensor: the per-byte cost of importing a received
//! cache, paid on the thread that decodes (every running request waits for it).
//!
//! On the CUDA runtime the bytes go straight into an empty tensor's buffer by one driver copy
//! (`kernels::cuda_write`); Burn's own upload copies them into a fresh host vector first, which
//! at 8K–32K-token caches costs more than the transfer. Elsewhere Burn's upload runs, on the
//! bytes themselves where they are aligned for their values (no copy of ours before it).

use burn::tensor::{backend::Backend, AllocationProperty, Element, Int, Tensor, TensorData};

use super::{
    device_state::FlatTensor,
    state::{Bytes, StateTensor},
};

/// `bytes` (little-endian `E` values, `shape.product()` of them) as a float tensor of `E`'s type
/// on `device`.
pub(super) fn upload_float<B: Backend, E: Element + bytemuck::Pod, const D: usize>(
    bytes: &Bytes,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    #[cfg(feature = "cuda")]
    if let Some(tensor) = cuda_float::<B, D>(bytes, shape, E::dtype(), device) {
        return tensor;
    }
    Tensor::from_data(host_data::<E, D>(bytes, shape), (device, E::dtype()))
}

/// `bytes` (little-endian `i32` values, `shape.product()` of them) as an integer tensor on
/// `device`.
pub(super) fn upload_int<B: Backend, const D: usize>(
    bytes: &Bytes,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    #[cfg(feature = "cuda")]
    if let Some(tensor) = cuda_int::<B, D>(bytes, shape, device) {
        return tensor;
    }
    Tensor::from_data(host_data::<i32, D>(bytes, shape), device)
}

/// `tensors` uploaded by one batched write where the backend has one (CUDA), index-aligned: every
/// well-formed, non-empty f32, f16 and i32 tensor (integers when the backend's are i32).
/// Elsewhere, or when the write is refused, none: each is uploaded when read.
pub(super) fn upload_all<B: Backend>(tensors: &[StateTensor], device: &B::Device) -> Vec<Option<FlatTensor<B>>> {
    #[cfg(feature = "cuda")]
    if is_cuda::<B>(device) {
        if let Some(uploaded) = cuda_upload_all::<B>(tensors, device) {
            return uploaded;
        }
    }
    let _ = device;
    vec![None; tensors.len()]
}

/// [`upload_all`] on CUDA: empty tensors of each uploadable state tensor's size, written by one
/// `kernels::cuda_write_all`; `None` when the write is refused.
#[cfg(feature = "cuda")]
fn cuda_upload_all<B: Backend>(tensors: &[StateTensor], device: &B::Device) -> Option<Vec<Option<FlatTensor<B>>>> {
    use super::state::StateDType;
    use burn::tensor::DType;
    let empty = |t: &StateTensor| -> Option<FlatTensor<B>> {
        t.validate().ok()?;
        let n = t.elements();
        // An empty tensor has nothing to write, and its flat form could not be reshaped back
        // (Burn's reshape reads a zero dimension as "keep this dimension").
        if n == 0 {
            return None;
        }
        match t.dtype {
            StateDType::F32 => Some(FlatTensor::Float(Tensor::empty([n], (device, DType::F32)))),
            StateDType::F16 => Some(FlatTensor::Float(Tensor::empty([n], (device, DType::F16)))),
            StateDType::I32 => empty_i32::<B, 1>([n], device).map(FlatTensor::Int),
            StateDType::U8 | StateDType::U16 => None,
        }
    };
    let uploaded: Vec<Option<FlatTensor<B>>> = tensors.iter().map(empty).collect();
    let primitives: Vec<(Box<dyn std::any::Any>, &[u8])> = uploaded
        .iter()
        .zip(tensors)
        .filter_map(|(flat, t)| {
            let primitive: Box<dyn std::any::Any> = match flat.as_ref()? {
                FlatTensor::Float(f) => float_primitive(f)?,
                FlatTensor::Int(i) => Box::new(i.clone().into_primitive()),
            };
            Some((primitive, &t.bytes[..]))
        })
        .collect();
    let writes: Vec<(&dyn std::any::Any, &[u8])> = primitives.iter().map(|(p, b)| (p.as_ref(), *b)).collect();
    crate::kernels::cuda_write_all(&writes).ok().map(|()| uploaded)
}

/// The bytes as tensor data of `E` values. Bytes aligned for `E` are shared, not copied (an
/// upload reads them in place); others are collected into a vector of `E`, since a backend that
/// converts on the host reads them as `E` values.
fn host_data<E: Element + bytemuck::Pod, const D: usize>(bytes: &Bytes, shape: [usize; D]) -> TensorData {
    match (bytes.as_ptr() as usize).is_multiple_of(align_of::<E>()) {
        true => TensorData::from_bytes(
            burn::tensor::Bytes::from_shared(bytes.clone(), AllocationProperty::Native),
            shape,
            E::dtype(),
        ),
        false => TensorData::new(bytemuck::pod_collect_to_vec::<u8, E>(bytes), shape),
    }
}

/// The bytes written into an empty CUDA float tensor of `dtype`; `None` (nothing allocated) on
/// another backend.
#[cfg(feature = "cuda")]
fn cuda_float<B: Backend, const D: usize>(
    bytes: &Bytes,
    shape: [usize; D],
    dtype: burn::tensor::DType,
    device: &B::Device,
) -> Option<Tensor<B, D>> {
    if !is_cuda::<B>(device) {
        return None;
    }
    let tensor = Tensor::<B, D>::empty(shape, (device, dtype));
    let written = crate::kernels::cuda_write(float_primitive(&tensor)?.as_ref(), bytes).is_ok();
    written.then_some(tensor)
}

/// The bytes written into an empty CUDA integer tensor, when the backend's integers are `i32`;
/// `None` (nothing allocated) on another backend.
#[cfg(feature = "cuda")]
fn cuda_int<B: Backend, const D: usize>(
    bytes: &Bytes,
    shape: [usize; D],
    device: &B::Device,
) -> Option<Tensor<B, D, Int>> {
    if !is_cuda::<B>(device) {
        return None;
    }
    let tensor = empty_i32::<B, D>(shape, device)?;
    let written = crate::kernels::cuda_write(&tensor.clone().into_primitive(), bytes).is_ok();
    written.then_some(tensor)
}

/// An empty integer tensor of `shape` when the backend's integers are `i32` (the received
/// bytes' type, written as they are); `None` otherwise.
#[cfg(feature = "cuda")]
fn empty_i32<B: Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Option<Tensor<B, D, Int>> {
    let tensor = Tensor::<B, D, Int>::empty(shape, device);
    (tensor.dtype() == burn::tensor::DType::I32).then_some(tensor)
}

/// The backend primitive of a float tensor, what `kernels::cuda_write` writes into; `None` for
/// a quantized tensor (not written in place).
#[cfg(feature = "cuda")]
fn float_primitive<B: Backend, const D: usize>(tensor: &Tensor<B, D>) -> Option<Box<dyn std::any::Any>> {
    match tensor.clone().into_primitive() {
        burn::tensor::TensorPrimitive::Float(primitive) => Some(Box::new(primitive)),
        burn::tensor::TensorPrimitive::QFloat(_) => None,
    }
}

/// Whether `device` is a device of CubeCL's CUDA runtime.
#[cfg(feature = "cuda")]
fn is_cuda<B: Backend>(device: &B::Device) -> bool {
    (device as &dyn std::any::Any).is::<cubecl::cuda::CudaDevice>()
}
