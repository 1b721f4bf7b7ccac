//! A cap on the memory a [`HostAllocator`] hands out at once.
//!
//! Page-locked memory is memory the OS can no longer page: a decode worker that received every
//! queued request into it could lock tens of GB (dense f16 requests of 8K tokens are 1.07 GB
//! each). [`LimitedAllocator`] refuses past its cap, and a refused buffer comes from the global
//! allocator: that layer imports at pageable speed, nothing else changes.

use std::{
    ptr::NonNull,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use super::HostAllocator;

/// `inner` with at most `max_bytes` of its memory allocated at once.
#[derive(Debug)]
pub struct LimitedAllocator {
    inner: Arc<dyn HostAllocator>,
    max_bytes: usize,
    live: AtomicUsize,
}

impl LimitedAllocator {
    /// `inner`, capped at `max_bytes` allocated at once.
    pub fn new(inner: Arc<dyn HostAllocator>, max_bytes: usize) -> Self {
        Self { inner, max_bytes, live: AtomicUsize::new(0) }
    }

    /// Bytes allocated and not yet freed.
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl HostAllocator for LimitedAllocator {
    /// The bytes are counted before `inner` is asked, so that allocations racing on other threads
    /// cannot pass the cap together.
    fn allocate(&self, len: usize) -> Option<NonNull<u8>> {
        let within = |live: usize| live.checked_add(len).filter(|&total| total <= self.max_bytes);
        self.live.fetch_update(Ordering::SeqCst, Ordering::SeqCst, within).ok()?;
        let allocated = self.inner.allocate(len);
        if allocated.is_none() {
            self.live.fetch_sub(len, Ordering::SeqCst);
        }
        allocated
    }

    #[allow(unsafe_code)]
    unsafe fn free(&self, ptr: NonNull<u8>, len: usize) {
        // SAFETY: `ptr` came from this allocator's `allocate(len)`, which `inner` served.
        unsafe { self.inner.free(ptr, len) };
        self.live.fetch_sub(len, Ordering::SeqCst);
    }
}
