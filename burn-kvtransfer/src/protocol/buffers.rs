//! Recycled receive buffers. A received layer is handed to the caller as a shared [`Bytes`] whose
//! tensors slice it; when the caller drops the last slice, the buffer goes back to the pool
//! instead of to the allocator. A fresh buffer of tens of MiB costs a page fault per 4 KiB on
//! its first write (on the 2-core CI machine that was 40% of the receiver's CPU time); a
//! recycled one is mapped already. A pool may allocate from a [`HostAllocator`] (page-locked
//! memory, which a device copies from at the link's rate): recycling is what makes that pay, since
//! locking a buffer's pages costs more than copying it.

use std::sync::{Arc, Mutex, Weak};

use burn_kvcompress::cache::{Bytes, HostAllocator, HostBuffer};

/// Buffers kept for reuse, up to a total capacity in bytes. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct BufferPool {
    shared: Arc<Mutex<Kept>>,
}

#[derive(Debug)]
struct Kept {
    buffers: Vec<HostBuffer>,
    /// Where new buffers come from (the global allocator without one).
    allocator: Option<Arc<dyn HostAllocator>>,
    bytes: usize,
    max_bytes: usize,
    /// Whether the cap rises to `peak_on_loan` ([`BufferPool::following_load`]).
    follows_load: bool,
    /// Capacity of the buffers shared with callers and not yet returned, and its highest value.
    on_loan: usize,
    peak_on_loan: usize,
}

impl Kept {
    /// Bytes of idle buffers the pool may keep now.
    fn cap(&self) -> usize {
        match self.follows_load {
            true => self.max_bytes.max(self.peak_on_loan),
            false => self.max_bytes,
        }
    }
}

impl BufferPool {
    /// A pool that keeps at most `max_bytes` of idle buffers (0 keeps none).
    pub fn new(max_bytes: usize) -> Self {
        Self::with_cap(max_bytes, false)
    }

    /// A pool that keeps idle buffers up to the larger of `min_bytes` and the most bytes its
    /// callers ever held at once: a steady load's layers land in recycled buffers whatever the
    /// size of its requests, and the pool never keeps more than that load's peak (or
    /// `min_bytes`).
    pub fn following_load(min_bytes: usize) -> Self {
        Self::with_cap(min_bytes, true)
    }

    fn with_cap(max_bytes: usize, follows_load: bool) -> Self {
        let kept = Kept {
            buffers: Vec::new(),
            allocator: None,
            bytes: 0,
            max_bytes,
            follows_load,
            on_loan: 0,
            peak_on_loan: 0,
        };
        Self { shared: Arc::new(Mutex::new(kept)) }
    }

    /// This pool with new buffers allocated by `allocator` (e.g. page-locked memory); one it
    /// cannot serve comes from the global allocator.
    pub fn allocating_with(self, allocator: Arc<dyn HostAllocator>) -> Self {
        self.shared.lock().unwrap_or_else(|p| p.into_inner()).allocator = Some(allocator);
        self
    }

    /// A buffer of `len` bytes with unspecified (initialized) contents: the smallest kept buffer
    /// that holds `len`, or a new zeroed one.
    pub fn take(&self, len: usize) -> HostBuffer {
        let mut kept = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let best =
            kept.buffers.iter().enumerate().filter(|(_, b)| b.capacity() >= len).min_by_key(|(_, b)| b.capacity());
        match best.map(|(i, _)| i) {
            Some(i) => {
                let mut buffer = kept.buffers.swap_remove(i);
                kept.bytes -= buffer.capacity();
                drop(kept);
                buffer.set_len(len);
                buffer
            }
            None => {
                let allocator = kept.allocator.clone();
                drop(kept);
                HostBuffer::zeroed(len, allocator.as_ref())
            }
        }
    }

    /// `buffer` as shared bytes that return it to this pool when the last clone is dropped.
    pub fn share(&self, buffer: impl Into<HostBuffer>) -> Bytes {
        let buffer = buffer.into();
        let mut kept = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        kept.on_loan += buffer.capacity();
        kept.peak_on_loan = kept.peak_on_loan.max(kept.on_loan);
        drop(kept);
        Bytes::from_owner(Returning { buffer: Some(buffer), pool: Arc::downgrade(&self.shared) })
    }

    /// Idle buffers and their total capacity, bytes.
    pub fn idle(&self) -> (usize, usize) {
        let kept = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        (kept.buffers.len(), kept.bytes)
    }
}

/// A buffer on loan as [`Bytes`]; goes back to its pool (if the pool still exists and has room).
struct Returning {
    buffer: Option<HostBuffer>,
    pool: Weak<Mutex<Kept>>,
}

impl AsRef<[u8]> for Returning {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_deref().expect("a buffer on loan is held until dropped")
    }
}

impl Drop for Returning {
    fn drop(&mut self) {
        let (Some(pool), Some(buffer)) = (self.pool.upgrade(), self.buffer.take()) else { return };
        let mut kept = pool.lock().unwrap_or_else(|p| p.into_inner());
        let size = buffer.capacity();
        kept.on_loan -= size;
        if kept.bytes + size <= kept.cap() {
            kept.bytes += size;
            kept.buffers.push(buffer);
        }
    }
}
