//! Which cached slots a query may attend to: the kernel form of
//! [`AttendOptions::allows`](crate::cache::AttendOptions::allows).

use cubecl::prelude::*;

/// Whether the query at slot `query` sees cached slot `slot`: its own slot always; otherwise an
/// earlier, real token (`slot >= key_start`, the row's first non-padding slot) inside the sliding
/// window (`window` slots, 0 for none).
#[cube]
pub fn slot_visible(slot: u32, query: u32, key_start: u32, window: u32) -> bool {
    slot == query || (slot < query && slot >= key_start && (window == 0 || query - slot < window))
}

/// Whether the query at the last slot (`len - 1`) of a decode step sees cached slot `slot`
/// (`slot < len`).
#[cube]
pub fn decode_slot_visible(slot: u32, len: u32, key_start: u32, window: u32) -> bool {
    slot_visible(slot, len - 1, key_start, window)
}

/// The first slot that the query at slot `query` sees (its own, for a padding query), so that a
/// kernel can skip the slots before it.
#[cube]
pub fn first_visible_slot(query: u32, key_start: u32, window: u32) -> u32 {
    let mut first = query;
    if query >= key_start {
        first = key_start;
        if window > 0 && query + 1 > window + key_start {
            first = query + 1 - window;
        }
    }
    first
}
