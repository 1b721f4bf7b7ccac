//! Backend aliases for the backends this crate is built with (cargo features `ndarray`,
//! `wgpu`, `cuda`, `tch`). All models compute in `f32`.

use std::any::TypeId;

use burn::tensor::{backend::Backend, Tensor};

#[cfg(feature = "ndarray")]
/// The CPU reference backend (`ndarray`, f32).
pub type NdArray = burn::backend::NdArray<f32>;

#[cfg(feature = "flex")]
/// The fast CPU backend (`burn-flex`: gemm matrix products, SIMD, threads), f32.
pub type Flex = burn::backend::Flex<f32, i32>;

#[cfg(feature = "wgpu")]
/// The wgpu backend (any GPU, or the CPU through Mesa's lavapipe), f32.
pub type Wgpu = burn::backend::Wgpu<f32, i32>;

#[cfg(feature = "cuda")]
/// The CUDA backend, f32.
pub type Cuda = burn::backend::Cuda<f32, i32>;

#[cfg(feature = "tch")]
/// The LibTorch backend, f32.
pub type LibTorch = burn::backend::LibTorch<f32>;

/// Whether `B` is one of the CPU backends above (ndarray, flex), whose tensors live in host
/// memory: reading one to the host is a copy, not a device transfer, so the few ops that Burn's
/// CPU backends run slowly (a prompt's attention, the rotary embedding) run on host slices instead.
pub(crate) fn keeps_tensors_on_host<B: Backend>() -> bool {
    let backend = TypeId::of::<B>();
    #[cfg(feature = "ndarray")]
    if backend == TypeId::of::<NdArray>() {
        return true;
    }
    #[cfg(feature = "flex")]
    if backend == TypeId::of::<Flex>() {
        return true;
    }
    let _ = backend;
    false
}

/// The values of `tensor` on the host as f32, row-major (a device read on the GPU backends, a copy
/// on the CPU ones).
pub(crate) fn host_f32<B: Backend, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().into_vec::<f32>().expect("host data of the converted type")
}

/// `tensor` as a tensor of backend `C`, where `B` is `C` (else `tensor` back): how code generic
/// over the backend hands a tensor to a kernel written for one backend type.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
pub(crate) fn as_backend<B: Backend, C: Backend, const D: usize>(
    tensor: Tensor<B, D>,
) -> Result<Tensor<C, D>, Tensor<B, D>> {
    let boxed: Box<dyn std::any::Any> = Box::new(tensor);
    match boxed.downcast::<Tensor<C, D>>() {
        Ok(tensor) => Ok(*tensor),
        Err(boxed) => Err(*boxed.downcast::<Tensor<B, D>>().expect("the tensor boxed above")),
    }
}
