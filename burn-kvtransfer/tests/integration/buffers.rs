//! Receive buffers come back to their pool when the last slice of a layer is dropped.

use burn_kvtransfer::protocol::BufferPool;

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
