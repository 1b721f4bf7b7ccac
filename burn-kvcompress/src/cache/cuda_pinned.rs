//! Page-locked host memory from the CUDA driver: what received states land in, so that their
//! upload ([`cuda_write`](crate::kernels::cuda_write)) is one DMA at the link's rate instead of a copy
//! through the driver's staging buffers.

use std::ptr::NonNull;

use cubecl::cuda::CudaDevice;
use cudarc::driver::{result as driver, sys};

use super::HostAllocator;
use crate::kernels::make_current;

/// Allocates page-locked ("pinned") host memory, usable by every context (portable), through
/// `device`'s primary context. Allocating and freeing it cost far more than a pageable buffer
/// (the driver locks every page): hand it to a pool that recycles its buffers.
#[derive(Debug, Clone)]
pub struct CudaPinnedAllocator {
    device: CudaDevice,
}

impl CudaPinnedAllocator {
    /// Page-locked memory allocated through `device`'s primary context.
    pub fn new(device: CudaDevice) -> Self {
        Self { device }
    }
}

impl HostAllocator for CudaPinnedAllocator {
    fn allocate(&self, len: usize) -> Option<NonNull<u8>> {
        if !make_current(&self.device) {
            return None;
        }
        // SAFETY: a context is current; the memory is zeroed below before anyone reads it.
        #[allow(unsafe_code)]
        let ptr = unsafe { driver::malloc_host(len, sys::CU_MEMHOSTALLOC_PORTABLE) }.ok()?;
        let ptr = NonNull::new(ptr.cast::<u8>())?;
        // SAFETY: `ptr` is a fresh allocation of `len` bytes, aligned to a page.
        #[allow(unsafe_code)]
        unsafe {
            ptr.as_ptr().write_bytes(0, len)
        };
        Some(ptr)
    }

    #[allow(unsafe_code)]
    unsafe fn free(&self, ptr: NonNull<u8>, _len: usize) {
        // A failure leaves the pages locked until the process ends; nothing else can be done
        // from a drop.
        if make_current(&self.device) {
            // SAFETY: the caller hands back an allocation of `allocate` (`cuMemHostAlloc`).
            let _ = unsafe { driver::free_host(ptr.as_ptr().cast()) };
        }
    }
}
