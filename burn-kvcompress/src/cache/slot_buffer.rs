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
