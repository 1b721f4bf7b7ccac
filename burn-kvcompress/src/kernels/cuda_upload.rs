//! Host bytes written straight into a CUDA tensor's buffer by one driver copy.
//!
//! Burn's upload (`Tensor::from_data`) on CubeCL 0.10 first copies the bytes into a new host
//! vector (`ComputeClient::create`), then copies that vector to the device. For a received KV
//! cache the first copy costs more than the second: the fresh vector's pages fault in as it is
//! written (above 32 MB every allocation is a fresh mapping), and an import of an 8K–32K-token
//! cache ran at 0.4–1.8 GB/s on an H200 host (`results/e2e/fast-import-8b-f16-h200/`).
//! [`cuda_write`] skips it: the driver reads the caller's bytes where they are.

use std::any::Any;

use burn_cubecl::{cubecl::future::block_on, tensor::CubeTensor};
use cubecl::cuda::CudaRuntime;
use cudarc::driver::result as driver;

use super::cuda_context::make_current;

/// Why [`cuda_write`] or [`cuda_write_all`] wrote nothing (the caller then takes Burn's upload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefused {
    /// Not a tensor of CubeCL's CUDA runtime.
    NotCuda,
    /// A buffer that is not contiguous (pitched rows, a view) or not `bytes` long.
    Layout {
        /// Whether the tensor's elements lie contiguously.
        contiguous: bool,
        /// The tensor's bytes.
        tensor_bytes: usize,
        /// The bytes to write.
        bytes: usize,
    },
    /// Tensors of one call on different devices (one drain and one wait cover one device).
    MixedDevices,
    /// The driver refused a step (making the context current, draining the stream, finding the
    /// buffer, the copy or its wait).
    Driver(String),
}

/// Writes `bytes` into `tensor`'s buffer when it is a contiguous CUDA tensor of exactly that many
/// bytes, and waits for the copy to land: [`cuda_write_all`] of one tensor.
pub fn cuda_write(tensor: &dyn Any, bytes: &[u8]) -> Result<(), WriteRefused> {
    cuda_write_all(&[(tensor, bytes)])
}

/// Writes each pair's bytes into its tensor's buffer, every tensor a contiguous CUDA tensor of
/// exactly its bytes' length on one device, and waits for the copies to land. Every pair is
/// checked before anything is written: a refusal writes nothing (short of a driver failure
/// midway).
///
/// The copies are ordered by hand around CubeCL's stream, which the driver does not see (it is a
/// non-blocking stream): the stream is drained first (a buffer may be memory that queued kernels
/// still read), and the context is synchronized after (a copy from pageable memory returns before
/// its transfer lands, and the backend's next kernels read the buffers). The drain and the wait
/// are what a copy costs beyond its bytes, so a received layer's tensors share them.
pub fn cuda_write_all(writes: &[(&dyn Any, &[u8])]) -> Result<(), WriteRefused> {
    let tensors = writes
        .iter()
        .map(|&(tensor, bytes)| {
            let t = tensor.downcast_ref::<CubeTensor<CudaRuntime>>().ok_or(WriteRefused::NotCuda)?;
            let tensor_bytes = t.meta.shape().num_elements() * t.dtype.size();
            match t.is_contiguous() && tensor_bytes == bytes.len() {
                true => Ok((t, bytes)),
                false => Err(WriteRefused::Layout { contiguous: t.is_contiguous(), tensor_bytes, bytes: bytes.len() }),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let tensors: Vec<_> = tensors.into_iter().filter(|(_, bytes)| !bytes.is_empty()).collect();
    let Some((first, _)) = tensors.first() else {
        return Ok(());
    };
    if tensors.iter().any(|(t, _)| t.device != first.device) {
        return Err(WriteRefused::MixedDevices);
    }
    let driver_error = |step: &str, e: &dyn std::fmt::Debug| WriteRefused::Driver(format!("{step}: {e:?}"));
    if !make_current(&first.device) {
        return Err(WriteRefused::Driver("no primary context for the device".into()));
    }
    block_on(first.client.sync()).map_err(|e| driver_error("draining the stream", &e))?;
    for (t, bytes) in tensors {
        let resource = t.client.get_resource(t.handle.clone()).map_err(|e| driver_error("finding the buffer", &e))?;
        let (pointer, size) = (resource.resource().ptr, resource.resource().size);
        if size < bytes.len() as u64 {
            return Err(WriteRefused::Driver(format!("a buffer of {size} bytes for {}", bytes.len())));
        }
        // SAFETY: `pointer` is the live buffer of `t` (borrowed for the call), at least
        // `bytes.len()` long; no queued kernel touches it (the stream was drained above), and the
        // context is synchronized before returning, so the copy has landed when the backend's
        // next kernel reads it; `bytes` outlives the call.
        #[allow(unsafe_code)]
        unsafe {
            driver::memcpy_htod_sync(pointer, bytes).map_err(|e| driver_error("copying", &e))?;
        }
    }
    driver::ctx::synchronize().map_err(|e| driver_error("waiting for the copies", &e))
}
