//! Where a channel-layout stream's float slots lie in their buffers, for the decode kernels
//! (portable and tensor-core) to address them alike.

use cubecl::prelude::*;

/// Where a stream's float slots are: `sinks` rows of `sinks_k`/`sinks_v` from row `stream ·
/// sink_rows`, then `tail` rows of `tail_k`/`tail_v` from row `stream · tail_rows` (each of
/// `head_dim` floats; `sink_rows` and `tail_rows` are the buffers' capacities), at positions `0 ..
/// sinks` and `first_tail ..`.
#[derive(CubeType)]
pub struct FloatSlots {
    pub stream: u32,
    pub sinks: u32,
    pub sink_rows: u32,
    pub tail_rows: u32,
    pub first_tail: u32,
}

#[cube]
impl FloatSlots {
    /// The first element of float slot `i`'s row in its array (the sinks' or the tail's).
    pub fn row_start(&self, i: u32, #[comptime] head_dim: u32) -> u32 {
        let row =
            select(i < self.sinks, self.stream * self.sink_rows + i, self.stream * self.tail_rows + i - self.sinks);
        row * head_dim
    }

    /// Element `at` of the row of float slot `i` (a sink or a tail slot) of `sinks` or `tail`, in
    /// f32.
    pub fn read<F: Float>(&self, sinks: &Array<F>, tail: &Array<F>, i: u32, at: u32) -> f32 {
        if i < self.sinks {
            f32::cast_from(sinks[at as usize])
        } else {
            f32::cast_from(tail[at as usize])
        }
    }

    /// Float slot `i`'s position in the sequence.
    pub fn position(&self, i: u32) -> u32 {
        select(i < self.sinks, i, self.first_tail + i - self.sinks)
    }
}
