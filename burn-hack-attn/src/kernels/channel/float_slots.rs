//! A channel-layout cache's float slots (sinks and tail) in the decode kernels, portable and
//! tensor-core alike: their buffers as launch arguments on the host ([`FloatSlotArgs`]) and where a
//! stream's slots lie in them on the device ([`FloatSlotRows`]).

use burn::tensor::DType;
use burn_cubecl::{cubecl::prelude::*, tensor::CubeTensor, BoolElement, CubeRuntime};
use burn_kvcompress::kernels::{dense_output_of, float_arg as float, CubeF32 as Backend};

use super::ChannelView;
use crate::kernels::FloatSlots;

/// The float slots of `view` as kernel arguments.
pub(super) struct FloatSlotArgs<R: CubeRuntime> {
    /// Sink keys and values, tail keys and values: their buffers, `[streams · rows, head_dim]`
    /// each (a one-element placeholder where there are none, which the kernels never read).
    pub arrays: [CubeTensor<R>; 4],
    /// Rows per stream of the sinks' and the tail's buffers (their capacities).
    pub rows: [u32; 2],
    /// Their float type.
    pub dtype: DType,
}

impl<R: CubeRuntime> FloatSlotArgs<R> {
    /// `view`'s float slots; `like` gives the device.
    pub(super) fn new<BT: BoolElement>(view: &ChannelView<'_, Backend<R, BT>>, like: &CubeTensor<R>) -> Self {
        let present = view.sinks.or(view.tail);
        let dtype = present.map_or(DType::F32, |s| s.k.buffer().dtype());
        let pair = |s: Option<&FloatSlots<Backend<R, BT>>>| match s {
            Some(s) => ([float(s.k.buffer()), float(s.v.buffer())], s.k.capacity() as u32),
            None => ([(); 2].map(|_| dense_output_of(like, 1, dtype)), 0),
        };
        let (([sinks_k, sinks_v], sink_rows), ([tail_k, tail_v], tail_rows)) = (pair(view.sinks), pair(view.tail));
        Self { arrays: [sinks_k, sinks_v, tail_k, tail_v], rows: [sink_rows, tail_rows], dtype }
    }
}

/// Where a stream's float slots are: `sinks` rows of `sinks_k`/`sinks_v` from row `stream ·
/// sink_rows`, then `tail` rows of `tail_k`/`tail_v` from row `stream · tail_rows` (each of
/// `head_dim` floats; `sink_rows` and `tail_rows` are the buffers' capacities), at positions `0 ..
/// sinks` and `first_tail ..`.
#[derive(CubeType)]
pub struct FloatSlotRows {
    pub stream: u32,
    pub sinks: u32,
    pub sink_rows: u32,
    pub tail_rows: u32,
    pub first_tail: u32,
}

#[cube]
impl FloatSlotRows {
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
