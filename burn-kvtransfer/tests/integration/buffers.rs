//! Receive buffers come back to their pool when the last slice of a layer is dropped.

use std::{
    alloc::Layout,
    ptr::NonNull,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use burn_kvcompress::cache::{HostAllocator, LimitedAllocator};
use burn_kvtransfer::protocol::{blocks::Reassembly, BufferPool};

#[test]
fn a_buffer_returns_when_its_last_slice_is_dropped_and_is_reused() {
    let pool = BufferPool::new(1 << 20);
    let buffer = pool.take(1000);
    assert_eq!(buffer.len(), 1000);
    let address = buffer.as_ptr();
    let shared = pool.share(buffer);
    let (head, tail) = (shared.slice(..10), shared.slice(500..));
    drop(shared);
    drop(head);
    assert_eq!(pool.idle().0, 0, "a slice is still alive");
    drop(tail);
    assert_eq!(pool.idle(), (1, 1000));
    let again = pool.take(600);
    assert_eq!((again.as_ptr(), again.len()), (address, 600), "the kept buffer is reused, cut to length");
    assert_eq!(pool.idle(), (0, 0));
}

#[test]
fn the_pool_keeps_no_more_than_its_cap_and_picks_the_smallest_fit() {
    let pool = BufferPool::new(3000);
    let shared: Vec<_> = [1000, 2000, 1500].into_iter().map(|n| pool.share(pool.take(n))).collect();
    drop(shared);
    // 1000 and 2000 fit under the cap; 1500 more would exceed it and goes to the allocator.
    assert_eq!(pool.idle(), (2, 3000));
    assert_eq!(pool.take(1200).capacity(), 2000);
    assert_eq!(pool.take(10).capacity(), 1000);
    assert_eq!(pool.take(10).capacity(), 10, "nothing kept: a new buffer");
    drop(BufferPool::new(0).share(vec![1; 8]));
}

#[test]
fn a_pool_following_the_load_keeps_what_its_callers_held_at_once() {
    let (fixed, following) = (BufferPool::new(1500), BufferPool::following_load(1500));
    for pool in [&fixed, &following] {
        // Three layers held at once (3000 bytes), then dropped together.
        let held: Vec<_> = (0..3).map(|_| pool.share(pool.take(1000))).collect();
        drop(held);
    }
    assert_eq!(fixed.idle(), (1, 1000), "a fixed cap keeps what fits under it");
    assert_eq!(following.idle(), (3, 3000), "the load's peak was 3000 bytes");
    // The next round of the same load lands in the kept buffers.
    let again: Vec<_> = (0..3).map(|_| following.take(1000)).collect();
    assert_eq!(following.idle(), (0, 0));
    drop(again);
    // A larger load raises the cap: 4000 bytes held at once come back whole.
    drop(following.share(following.take(4000)));
    assert_eq!(following.idle(), (1, 4000));
    drop(fixed.share(fixed.take(4000)));
    assert_eq!(fixed.idle(), (1, 1000), "over the fixed cap: freed");
}

#[test]
fn a_buffer_outliving_its_pool_is_freed() {
    let pool = BufferPool::new(1 << 20);
    let shared = pool.share(pool.take(64));
    drop(pool);
    assert_eq!(shared.len(), 64);
}

/// Host memory from the global allocator that counts its live allocations and refuses to hold
/// more than `limit` at once (as a driver out of page-locked memory would).
#[derive(Debug)]
struct CountingAllocator {
    live: AtomicUsize,
    limit: usize,
}

impl CountingAllocator {
    fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self { live: AtomicUsize::new(0), limit })
    }

    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

#[allow(unsafe_code)]
impl HostAllocator for CountingAllocator {
    fn allocate(&self, len: usize) -> Option<NonNull<u8>> {
        if self.live() >= self.limit {
            return None;
        }
        self.live.fetch_add(1, Ordering::SeqCst);
        // SAFETY: `len > 0` (the trait's contract), so the layout is not zero-sized.
        NonNull::new(unsafe { std::alloc::alloc_zeroed(Layout::from_size_align(len, 16).unwrap()) })
    }

    unsafe fn free(&self, ptr: NonNull<u8>, len: usize) {
        self.live.fetch_sub(1, Ordering::SeqCst);
        // SAFETY: `ptr` came from `allocate(len)`, which used this layout.
        unsafe { std::alloc::dealloc(ptr.as_ptr(), Layout::from_size_align(len, 16).unwrap()) };
    }
}

#[test]
fn a_pool_with_an_allocator_recycles_its_buffers_and_frees_them_through_it() {
    let allocator = CountingAllocator::new(8);
    let pool = BufferPool::new(1 << 20).allocating_with(allocator.clone());
    let mut buffer = pool.take(1000);
    assert!(buffer.is_allocated() && buffer.iter().all(|&b| b == 0), "fresh allocator memory, zeroed");
    buffer[999] = 7;
    let address = buffer.as_ptr();
    let shared = pool.share(buffer);
    assert_eq!(shared[999], 7);
    drop(shared);
    assert_eq!((pool.idle(), allocator.live()), ((1, 1000), 1), "kept, not freed");
    let again = pool.take(800);
    assert_eq!((again.as_ptr(), again.len(), again.capacity()), (address, 800, 1000), "the kept buffer, cut");
    let layer = Reassembly::new(pool.take(300), 100, 0);
    assert_eq!(allocator.live(), 2);
    drop(layer);
    assert_eq!(allocator.live(), 1, "a layer dropped unreceived (an aborted request) frees its buffer");
    drop(pool.share(again));
    drop(pool);
    assert_eq!(allocator.live(), 0, "the pool's kept buffers go back to the allocator with it");
}

#[test]
fn a_buffer_the_allocator_cannot_serve_comes_from_the_global_allocator() {
    let allocator = CountingAllocator::new(1);
    let pool = BufferPool::new(0).allocating_with(allocator.clone());
    let (first, second) = (pool.take(64), pool.take(64));
    assert!(first.is_allocated() && !second.is_allocated());
    assert_eq!(second.len(), 64);
    drop(pool.share(first));
    assert_eq!(allocator.live(), 0, "over the pool's cap: freed through the allocator");
    let mut plain = second;
    plain.set_len(10);
    assert_eq!((plain.len(), plain.capacity()), (10, 64));
    let past = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || plain.set_len(65)));
    assert!(past.is_err(), "past the capacity");
}

#[test]
fn a_capped_allocator_serves_up_to_its_bytes_then_the_global_allocator_does() {
    let inner = CountingAllocator::new(usize::MAX);
    let capped = Arc::new(LimitedAllocator::new(inner.clone(), 1000));
    let pool = BufferPool::new(0).allocating_with(capped.clone());
    let (a, b) = (pool.take(600), pool.take(400));
    assert!(a.is_allocated() && b.is_allocated());
    assert_eq!((capped.live_bytes(), inner.live()), (1000, 2));
    let over = pool.take(1);
    assert!(!over.is_allocated(), "past the cap: the global allocator's");
    assert_eq!(capped.live_bytes(), 1000, "a refusal counts nothing");
    drop(pool.share(a));
    assert_eq!((capped.live_bytes(), inner.live()), (400, 1), "freed through the cap");
    let c = pool.take(600);
    assert!(c.is_allocated(), "room again once freed");
    drop((b, c, over));
    assert_eq!((capped.live_bytes(), inner.live()), (0, 0));

    // The inner allocator's own refusal gives back what the cap counted.
    let refusing = Arc::new(LimitedAllocator::new(CountingAllocator::new(0), 1000));
    assert!(refusing.allocate(10).is_none());
    assert_eq!(refusing.live_bytes(), 0);
}
