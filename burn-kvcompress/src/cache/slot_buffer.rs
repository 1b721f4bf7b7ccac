//! [`SlotBuffer`]: a cache tensor that grows along its slot axis by writing new slots into room
//! it keeps, instead of concatenating (which copies the whole cache at every decode step: 268 MB
//! a layer for eight 8K-token Llama-3-8B sequences in f16).

use std::ops::Range;

use burn::tensor::{backend::Backend, Tensor};

/// The granularity of a buffer's capacity: a growth leaves room for at least one and at most
/// this many more slots, so the filled slots are copied once per `GROWTH_SLOTS` decode steps
/// (at most `GROWTH_SLOTS − 1` slots of memory unused).
pub const GROWTH_SLOTS: usize = 256;

/// Slots `[batch, heads, len, width]` held in a buffer `[batch, heads, capacity, width]` whose
/// slots from `len` on are zeros, room for the next appends.
///
/// An append writes in place where the buffer is not shared (Burn's `slice_assign` on a tensor
/// whose storage has one owner); a clone of the buffer (a cloned cache) makes the next append
/// copy it first, so clones never see each other's slots.
#[derive(Debug, Clone)]
pub struct SlotBuffer<B: Backend> {
    buffer: Tensor<B, 4>,
    len: usize,
}

/// The capacity that holds `needed` slots with room for at least one more.
fn capacity_for(needed: usize) -> usize {
    (needed / GROWTH_SLOTS + 1) * GROWTH_SLOTS
}

impl<B: Backend> SlotBuffer<B> {
    /// A buffer holding `slots` `[batch, heads, len, width]`, with room after them.
    pub fn new(slots: Tensor<B, 4>) -> Self {
        let len = slots.dims()[2];
        Self { buffer: slots, len }.grown_to(capacity_for(len))
    }

    /// This buffer with `slots` `[batch, heads, n, width]` (its batch, heads, width and float
    /// type) after its own; the buffer grows first where `n` slots do not fit.
    pub fn appended(self, slots: Tensor<B, 4>) -> Self {
        let [batch, heads, n, width] = slots.dims();
        let needed = self.len + n;
        let grown = match needed > self.capacity() {
            true => self.grown_to(capacity_for(needed)),
            false => self,
        };
        let at = [0..batch, 0..heads, grown.len..needed, 0..width];
        Self { buffer: grown.buffer.slice_assign(at, slots), len: needed }
    }

    /// Two buffers of one shape and length (a cache's keys and values) with `slots` (`[k, v]`,
    /// `[batch, heads, n, width]` each, the buffers' batch, heads, width and float type) after
    /// their own, as [`Self::appended`] appends each: one launch for both on the CubeCL backends.
    ///
    /// # Panics
    /// If the buffers differ in length.
    pub fn appended_pair([k_buffer, v_buffer]: [Self; 2], [k, v]: [Tensor<B, 4>; 2]) -> [Self; 2] {
        assert_eq!(k_buffer.len, v_buffer.len, "slot buffers of {} and {} slots", k_buffer.len, v_buffer.len);
        let at = k_buffer.len;
        let needed = at + k.dims()[2];
        let grown = |b: Self| match needed > b.capacity() {
            true => b.grown_to(capacity_for(needed)),
            false => b,
        };
        let buffers = [grown(k_buffer).buffer, grown(v_buffer).buffer];
        match write_in_place(buffers, [k, v], at) {
            Ok(written) => written.map(|buffer| Self { buffer, len: needed }),
            Err(([k_buffer, v_buffer], [k, v])) => {
                [Self { buffer: k_buffer, len: at }.appended(k), Self { buffer: v_buffer, len: at }.appended(v)]
            }
        }
    }

    /// This buffer with `capacity` slots (at least as many as it has): the new ones zeros.
    fn grown_to(self, capacity: usize) -> Self {
        let [batch, heads, have, width] = self.buffer.dims();
        let room =
            Tensor::<B, 4>::zeros([batch, heads, capacity - have, width], (&self.buffer.device(), self.buffer.dtype()));
        Self { buffer: Tensor::cat(vec![self.buffer, room], 2), len: self.len }
    }

    /// Filled slots.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no slot is filled (never, for a buffer made from slots, but for an empty prompt).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots the buffer holds, filled or not.
    pub fn capacity(&self) -> usize {
        self.buffer.dims()[2]
    }

    /// The whole buffer `[batch, heads, capacity, width]` (slots from [`len`](Self::len) on
    /// unused): for kernels that take the capacity as the stride between heads and read the
    /// first `len` slots, with no copy.
    pub fn buffer(&self) -> &Tensor<B, 4> {
        &self.buffer
    }

    /// The filled slots `[batch, heads, len, width]` (a view or a copy, as the backend slices).
    pub fn filled(&self) -> Tensor<B, 4> {
        let [batch, heads, _, width] = self.buffer.dims();
        let ranges: [Range<usize>; 4] = [0..batch, 0..heads, 0..self.len, 0..width];
        self.buffer.clone().slice(ranges)
    }
}

/// The operands of an in-place write, or the written buffers: `Ok` with the buffers `[k, v]`
/// once written, `Err` with the buffers and the slots where the write did not apply.
type Written<B> = Result<[Tensor<B, 4>; 2], ([Tensor<B, 4>; 2], [Tensor<B, 4>; 2])>;

/// A kernel writing slots in place ([`write_slots`](crate::kernels::write_slots)).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
type SlotWrite<C> = fn([Tensor<C, 4>; 2], [Tensor<C, 4>; 2], usize) -> Written<C>;

/// Keys and values `[k, v]` written at slot `at` of `buffers` in place by
/// [`write_slots`](crate::kernels::write_slots) where `B` is one of the crate's CubeCL backends
/// and the kernel applies.
// The operands go back by value for Burn's path: a step's hot path, where boxing them would
// allocate for nothing.
#[allow(clippy::result_large_err)]
fn write_in_place<B: Backend>(buffers: [Tensor<B, 4>; 2], slots: [Tensor<B, 4>; 2], at: usize) -> Written<B> {
    let attempt = Err((buffers, slots));
    #[cfg(feature = "cuda")]
    let attempt =
        attempt.or_else(|(b, s)| on_backend::<B, crate::backend::Cuda>(b, s, at, crate::kernels::write_slots));
    #[cfg(feature = "wgpu")]
    let attempt =
        attempt.or_else(|(b, s)| on_backend::<B, crate::backend::Wgpu>(b, s, at, crate::kernels::write_slots));
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    let _ = at; // No kernel in this build.
    attempt
}

/// `kernel` on the operands where `B` is `C` (moved, not cloned: the buffers are written in
/// place only where nothing else holds them).
#[cfg(any(feature = "wgpu", feature = "cuda"))]
#[allow(clippy::result_large_err)] // As for `write_in_place`.
fn on_backend<B: Backend, C: Backend>(
    buffers: [Tensor<B, 4>; 2],
    slots: [Tensor<B, 4>; 2],
    at: usize,
    kernel: SlotWrite<C>,
) -> Written<B> {
    use crate::backend::as_backend;
    if std::any::TypeId::of::<B>() != std::any::TypeId::of::<C>() {
        return Err((buffers, slots));
    }
    let to_c = |t: Tensor<B, 4>| as_backend::<B, C, 4>(t).unwrap_or_else(|_| unreachable!("B is C"));
    let to_b = |t: Tensor<C, 4>| as_backend::<C, B, 4>(t).unwrap_or_else(|_| unreachable!("C is B"));
    match kernel(buffers.map(to_c), slots.map(to_c), at) {
        Ok(written) => Ok(written.map(to_b)),
        Err((buffers, slots)) => Err((buffers.map(to_b), slots.map(to_b))),
    }
}
