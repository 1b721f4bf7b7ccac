//! Host buffers that received states land in, and the allocators that make a device's copy of
//! them fast.
//!
//! A device copies page-locked host memory by DMA at the link's rate; pageable memory goes through
//! the driver's staging buffers first (on an H200 host PyTorch measured 52–55 GB/s against
//! 6.5–7.0, `results/e2e/fast-import-8b-f16-h200/`). A decode worker imports every joining
//! request's states on the thread that decodes the batch, so receiving into page-locked buffers
//! (recycled, since locking pages costs more than the copy) shortens every join.

use std::{
    fmt,
    ops::{Deref, DerefMut},
    ptr::NonNull,
    sync::Arc,
};

/// An allocator of host memory for received states, e.g. memory a device's driver page-locks.
pub trait HostAllocator: fmt::Debug + Send + Sync {
    /// `len` (> 0) zeroed bytes aligned to 16 or more, or `None` when none can be had (the buffer
    /// then comes from the global allocator).
    fn allocate(&self, len: usize) -> Option<NonNull<u8>>;

    /// Returns `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr` came from this allocator's `allocate(len)` and is not used afterwards.
    #[allow(unsafe_code)]
    unsafe fn free(&self, ptr: NonNull<u8>, len: usize);
}

/// A host byte buffer of a length up to its capacity: a plain vector, or an allocation of a
/// [`HostAllocator`] that goes back to it when dropped.
pub struct HostBuffer {
    storage: Storage,
    len: usize,
}

enum Storage {
    Vec(Vec<u8>),
    Allocated { ptr: NonNull<u8>, capacity: usize, allocator: Arc<dyn HostAllocator> },
}

// SAFETY: the buffer owns its allocation exclusively (as a `Vec` does); the allocator is `Send +
// Sync`.
#[allow(unsafe_code)]
unsafe impl Send for HostBuffer {}
// SAFETY: shared access only reads the bytes.
#[allow(unsafe_code)]
unsafe impl Sync for HostBuffer {}

impl HostBuffer {
    /// `len` zeroed bytes from `allocator`, or from the global allocator without one (or when it
    /// has none to give).
    pub fn zeroed(len: usize, allocator: Option<&Arc<dyn HostAllocator>>) -> Self {
        allocator.and_then(|a| Self::allocated(len, a)).unwrap_or_else(|| vec![0; len].into())
    }

    /// `len` (> 0) zeroed bytes from `allocator`, or `None` when it has none to give (where a
    /// buffer is only of use in the allocator's memory, e.g. memory registered for remote reads).
    pub fn allocated(len: usize, allocator: &Arc<dyn HostAllocator>) -> Option<Self> {
        let ptr = (len > 0).then(|| allocator.allocate(len)).flatten()?;
        Some(Self { storage: Storage::Allocated { ptr, capacity: len, allocator: allocator.clone() }, len })
    }

    /// Bytes the buffer can hold without reallocating.
    pub fn capacity(&self) -> usize {
        match &self.storage {
            Storage::Vec(v) => v.capacity(),
            Storage::Allocated { capacity, .. } => *capacity,
        }
    }

    /// Whether the bytes come from a [`HostAllocator`] (not the global allocator).
    pub fn is_allocated(&self) -> bool {
        matches!(self.storage, Storage::Allocated { .. })
    }

    /// Sets the length to `len`, at most the capacity. Bytes past the old length keep what they
    /// held (zeros, or an earlier use's bytes), so the contents are unspecified but initialized.
    ///
    /// # Panics
    /// If `len` exceeds the capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "{len} bytes in a buffer of {}", self.capacity());
        if let Storage::Vec(v) = &mut self.storage {
            v.resize(len, 0);
        }
        self.len = len;
    }
}

impl From<Vec<u8>> for HostBuffer {
    fn from(v: Vec<u8>) -> Self {
        Self { len: v.len(), storage: Storage::Vec(v) }
    }
}

impl Deref for HostBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.storage {
            Storage::Vec(v) => v,
            // SAFETY: `ptr` holds `capacity` initialized (zeroed at allocation) bytes owned by
            // this buffer, and `len <= capacity`.
            #[allow(unsafe_code)]
            Storage::Allocated { ptr, .. } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), self.len) },
        }
    }
}

impl DerefMut for HostBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.storage {
            Storage::Vec(v) => v,
            // SAFETY: as for `deref`; `&mut self` makes the access exclusive.
            #[allow(unsafe_code)]
            Storage::Allocated { ptr, .. } => unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), self.len) },
        }
    }
}

impl AsRef<[u8]> for HostBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let Storage::Allocated { ptr, capacity, allocator } = &self.storage {
            // SAFETY: `ptr` came from `allocator.allocate(capacity)` and the buffer, its only
            // owner, is going away.
            #[allow(unsafe_code)]
            unsafe {
                allocator.free(*ptr, *capacity)
            };
        }
    }
}

impl fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostBuffer")
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .field("allocated", &self.is_allocated())
            .finish()
    }
}

/// The allocator whose memory `device` copies from fastest: page-locked memory on CUDA, `None`
/// (the global allocator) elsewhere.
pub fn device_host_allocator<B: burn::tensor::backend::Backend>(device: &B::Device) -> Option<Arc<dyn HostAllocator>> {
    #[cfg(feature = "cuda")]
    if let Some(device) = (device as &dyn std::any::Any).downcast_ref::<cubecl::cuda::CudaDevice>() {
        return Some(Arc::new(super::CudaPinnedAllocator::new(device.clone())));
    }
    let _ = device;
    None
}
