//! Launching the channel layout's decode kernel and its merge on a CubeCL backend.

use burn::tensor::{backend::Backend as BurnBackend, Tensor};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{
        float_arg as float, int_arg as int, key_start_arg, merge_decode_output, CubeF32 as Backend, SplitPartials,
    },
};

use super::{
    float_slots::FloatSlotArgs,
    portable_kernel::{channel_decode_kernel, ChannelDecodeGeometry},
    ChannelView,
};

/// Cubes a launch aims for per multiprocessor (two waves' worth of work hide a cube's barriers).
const CUBES_PER_SM: usize = 4;
/// Multiprocessors assumed where the device does not say (lavapipe).
const DEFAULT_SMS: usize = 16;
/// The most units of a cube.
const MAX_UNITS: u32 = 256;
/// Static shared memory a CUDA kernel may declare.
const MAX_SHARED_BYTES: usize = 48 * 1024;

/// The kernel's compile-time shape for `group` query heads per KV head over `view`.
pub fn channel_decode_geometry<B: BurnBackend>(group: usize, view: &ChannelView<'_, B>) -> ChannelDecodeGeometry {
    ChannelDecodeGeometry {
        group: group as u32,
        head_dim: view.head_dim as u32,
        partition: view.partition as u32,
        key_bits: view.key_bits as u32,
        value_bits: view.value_bits as u32,
        value_group: view.value_group() as u32,
    }
}

impl ChannelDecodeGeometry {
    /// Whether a cube fits the device: its units, and its shared memory in `device_bytes` (and the
    /// static 48 KiB a CUDA kernel may declare).
    pub fn fits(&self, device_bytes: usize) -> bool {
        self.units() <= MAX_UNITS && self.shared_bytes() as usize <= device_bytes.min(MAX_SHARED_BYTES)
    }
}

/// Splits over `blocks` closed blocks for `streams` streams on `sms` multiprocessors: as many as
/// fill the device `CUBES_PER_SM` times, at most one per block; returns (splits, blocks per
/// split).
pub fn block_splits(blocks: usize, streams: usize, sms: Option<usize>) -> (usize, usize) {
    let target = sms.unwrap_or(DEFAULT_SMS) * CUBES_PER_SM;
    let wanted = target.div_ceil(streams.max(1)).clamp(1, blocks.max(1));
    let per_split = blocks.div_ceil(wanted).max(1);
    (blocks.div_ceil(per_split).max(1), per_split)
}

/// Decode attention of `q: [batch, heads, 1, head_dim]` (rotated; the last slot) over `view`
/// (with closed blocks), shapes already checked, with `geo` from [`channel_decode_geometry`]
/// (and [`ChannelDecodeGeometry::fits`]); returns `[batch, heads, 1, head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn channel_decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    view: &ChannelView<'_, Backend<R, BT>>,
    geo: ChannelDecodeGeometry,
    options: &AttendOptions,
) -> Tensor<Backend<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let streams = batch * view.kv_heads;
    let q = float(&q);
    let client = q.client.clone();
    let blocks = view.blocks();
    let sms = client.properties().hardware.num_streaming_multiprocessors.map(|n| n as usize);
    let (splits, per_split) = block_splits(blocks, streams, sms);
    let (keys, values) = (view.keys.expect("closed blocks"), view.values.expect("closed blocks"));
    let floats = FloatSlotArgs::new(view, &q);
    let [sinks_k, sinks_v, tail_k, tail_v] = floats.arrays;
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    let partials = SplitPartials::allocate(&q, batch * heads, splits + 1, d);
    // SAFETY: cube (split, stream) reads its group's queries `< streams · group · d`; closed block
    // `b < blocks` of its stream at key words `(stream · blocks + b) · Π · words_per_row + …` and
    // metadata `(stream · blocks + b) · d + j`, value words and metadata of its slots likewise
    // (the tensors' own shapes, contiguous); the float split reads sink `i < sinks` and tail slot
    // `i < tail` rows of its stream (rows `stream · rows + i` of buffers of `streams · rows` rows,
    // `i` below the filled ones), and only those (branches, not selects); shared indices are
    // bounded by the loops over `group · d`, `group · groups · Π`, and `Π`; partial outputs are
    // written at heads `< batch · heads` and splits `< splits + 1`. Bounds validated on CUDA:
    // `burn_kvcompress::kernels`.
    unsafe {
        channel_decode_kernel::launch_unchecked(
            &client,
            CubeCount::Static(splits as u32 + 1, streams as u32, 1),
            CubeDim::new_1d(geo.units()),
            q.into_array_arg(),
            int(&keys.words).into_array_arg(),
            int(&keys.params).into_array_arg(),
            int(&values.words).into_array_arg(),
            int(&values.params).into_array_arg(),
            sinks_k.into_array_arg(),
            sinks_v.into_array_arg(),
            tail_k.into_array_arg(),
            tail_v.into_array_arg(),
            key_start.into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            view.len as u32,
            view.sinks_len() as u32,
            blocks as u32,
            view.tail_len() as u32,
            floats.rows[0],
            floats.rows[1],
            view.kv_heads as u32,
            splits as u32,
            per_split as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
            floats.dtype.into(),
        )
    };
    merge_decode_output(partials, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_cover_every_block_once_and_fill_the_device() {
        for (blocks, streams, sms) in [(1, 1, Some(132)), (512, 24, Some(132)), (7, 3, None), (1000, 1, Some(16))] {
            let (splits, per_split) = block_splits(blocks, streams, sms);
            assert!(splits * per_split >= blocks && (splits - 1) * per_split < blocks, "{blocks} {streams}");
            assert!(splits <= blocks);
        }
        // 32K at Π = 64 for 64 streams on 132 SMs: 512 blocks in 9 splits of 57 (the last shorter).
        assert_eq!(block_splits(512, 64, Some(132)), (9, 57));
    }
}
