//! Which cached slots the newest query of a decode step may attend to.

use cubecl::prelude::*;

/// Whether the query at the last slot (`len - 1`) sees cached slot `slot`: its own slot always;
/// otherwise a real token (`slot >= key_start`, the row's first non-padding slot) inside the
/// sliding window (`window` slots, 0 for none). The kernel form of
/// [`AttendOptions::allows`](crate::cache::AttendOptions::allows) for a decode step.
#[cube]
pub fn decode_slot_visible(slot: u32, len: u32, key_start: u32, window: u32) -> bool {
    slot + 1 == len || (slot >= key_start && (window == 0 || len - 1 - slot < window))
}
