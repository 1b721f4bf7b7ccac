//! A prompt's products through cuBLAS on the CUDA backend, where the library is present.
//!
//! cubek's best matrix-product variant reaches about a third of cuBLAS's throughput on an H200
//! (it issues Ampere's warp matrix instructions, not Hopper's warpgroup ones;
//! `results/prompt-h200.md`), and a prompt's products are most of its prefill. CubeCL's CUDA
//! runtime works in the device's primary context, so its buffers are valid pointers for cuBLAS
//! called in that context: [`cublas_product`] waits for the backend's queue (the operands are
//! written by its kernels), runs `cublasGemmEx` (f16 or bf16 operands and result, f32
//! accumulation: what PyTorch runs for these types) and waits for it before returning (the
//! backend's next kernels read the result). Two host round trips per product, a few
//! microseconds each beside the milliseconds of a prompt's product.
//!
//! cuBLAS is loaded at run time (the `cudarc` crate's dynamic loading: `libcublas.so` or
//! `libcublas.so.<major>` on the library path); without it [`cublas_product`] says so and
//! the caller takes cubek's variants.

use std::{any::Any, cell::OnceCell, ffi::c_void, sync::OnceLock};

use burn::tensor::DType;
use burn_cubecl::{cubecl::future::block_on, tensor::CubeTensor, CubeRuntime};
use cubecl::cuda::{CudaDevice, CudaRuntime};
use cudarc::{
    cublas::{result as blas, sys as blas_sys},
    driver::result as driver,
};

use super::cuda_context::make_current;

thread_local! {
    /// This thread's cuBLAS handle, made current with the device's primary context once.
    static HANDLE: OnceCell<Option<Handle>> = const { OnceCell::new() };
}

/// A cuBLAS handle (never destroyed: one per thread that runs products, for the process).
#[derive(Clone, Copy)]
struct Handle(blas_sys::cublasHandle_t);

/// Why cuBLAS did not run a product (nothing was written then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CublasUnavailable {
    /// Not the CUDA runtime.
    NotCuda,
    /// An operand type other than f16 and bf16, or operands of different types.
    Types,
    /// Operands whose rows are not contiguous.
    Layout,
    /// No cuBLAS library on the library path, or it failed to start.
    Library,
    /// cuBLAS returned an error.
    Call(String),
}

/// `out` `[rows, n]` = `x` `[rows, k]` · `w` `[k, n]` (the same float type, f16 or bf16; rows of
/// each contiguous, possibly pitched) by cuBLAS, when `R` is the CUDA runtime and cuBLAS loads.
pub fn cublas_product<R: CubeRuntime>(
    x: &CubeTensor<R>,
    w: &CubeTensor<R>,
    out: &CubeTensor<R>,
) -> Result<(), CublasUnavailable> {
    let [x, w, out] = [x, w, out].map(|t| (t as &dyn Any).downcast_ref::<CubeTensor<CudaRuntime>>());
    let (Some(x), Some(w), Some(out)) = (x, w, out) else {
        return Err(CublasUnavailable::NotCuda);
    };
    let data_type = match (x.dtype, w.dtype, out.dtype) {
        (DType::F16, DType::F16, DType::F16) => blas_sys::cudaDataType::CUDA_R_16F,
        (DType::BF16, DType::BF16, DType::BF16) => blas_sys::cudaDataType::CUDA_R_16BF,
        _ => return Err(CublasUnavailable::Types),
    };
    let row_pitch = |t: &CubeTensor<CudaRuntime>| {
        let (shape, strides) = (t.meta.shape(), t.meta.strides());
        (shape.len() == 2 && strides[1] == 1 && strides[0] >= shape[1]).then_some(strides[0] as i32)
    };
    let (Some(ldx), Some(ldw), Some(ldo)) = (row_pitch(x), row_pitch(w), row_pitch(out)) else {
        return Err(CublasUnavailable::Layout);
    };
    let (rows, k, n) = (x.meta.shape()[0] as i32, x.meta.shape()[1] as i32, w.meta.shape()[1] as i32);
    let handle = thread_handle(&x.device).ok_or(CublasUnavailable::Library)?;
    // The operands are written by kernels queued before: wait for them.
    block_on(x.client.sync()).map_err(|e| CublasUnavailable::Call(format!("{e:?}")))?;
    let pointer = |t: &CubeTensor<CudaRuntime>| t.client.get_resource(t.handle.clone()).map(|r| r.resource().ptr);
    let (Ok(px), Ok(pw), Ok(po)) = (pointer(x), pointer(w), pointer(out)) else {
        return Err(CublasUnavailable::Call("no device pointer for an operand".into()));
    };
    let (alpha, beta) = (1.0f32, 0.0f32);
    // Row-major `out = x · w` is column-major `outᵀ = wᵀ · xᵀ`: cuBLAS's `A` is `w` (`n × k`,
    // leading dimension its row pitch), `B` is `x` (`k × rows`), `C` is `out` (`n × rows`).
    // SAFETY: the three pointers are live buffers of the CUDA runtime (the tensors are borrowed
    // for the call) holding `[k, n]`, `[rows, k]` and `[rows, n]` elements of `data_type` with
    // the row pitches passed; every queued write to them has completed (the sync above), and the
    // call is waited for before the tensors can be read, written or freed (the sync below).
    #[allow(unsafe_code)]
    unsafe {
        let op = blas_sys::cublasOperation_t::CUBLAS_OP_N;
        blas::gemm_ex(
            handle.0,
            op,
            op,
            n,
            rows,
            k,
            (&alpha as *const f32).cast::<c_void>(),
            pw as *const c_void,
            data_type,
            ldw,
            px as *const c_void,
            data_type,
            ldx,
            (&beta as *const f32).cast::<c_void>(),
            po as *mut c_void,
            data_type,
            ldo,
            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
        .map_err(|e| CublasUnavailable::Call(format!("{e:?}")))?;
        driver::stream::synchronize(std::ptr::null_mut()).map_err(|e| CublasUnavailable::Call(format!("{e:?}")))?;
    }
    Ok(())
}

/// This thread's cuBLAS handle in `device`'s primary context (the one CubeCL's CUDA runtime
/// uses), made on first use; `None` if cuBLAS does not load or start.
fn thread_handle(device: &CudaDevice) -> Option<Handle> {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: probing loads the library by its candidate names and drops it.
    #[allow(unsafe_code)]
    let present = *PRESENT.get_or_init(|| unsafe { blas_sys::is_culib_present() });
    if !present {
        return None;
    }
    HANDLE.with(|cell| {
        *cell.get_or_init(|| {
            // cuBLAS binds the handle to the current context.
            if !make_current(device) {
                return None;
            }
            blas::create_handle().ok().map(Handle)
        })
    })
}
