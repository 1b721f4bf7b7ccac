//! Launching the fused decode kernel and its merge on a CubeCL backend.

use burn::tensor::{backend::Backend as BurnBackend, Int, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{cubecl::prelude::*, kernel::into_contiguous, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{
        dense_output, float_arg as float, int_arg as int, merge_partials, pitched_rows_arg, CubeF32 as Backend,
        SplitPartials,
    },
};

use super::kernel::{decode_kernel, DecodeGeometry};
use crate::{cache::key_group, kernels::CacheView};

/// Slots per cube (and units: one per slot): the smallest multiple of Π that is at least 256.
pub fn decode_chunk(partition: usize) -> usize {
    256usize.div_ceil(partition) * partition
}

/// The decode kernel's compile-time shape for `group` query heads per KV head over `cache`.
pub fn decode_geometry<B: BurnBackend>(group: usize, cache: &CacheView<'_, B>) -> DecodeGeometry {
    let d = cache.head_dim;
    DecodeGeometry {
        group: group as u32,
        head_dim: d as u32,
        key_group: key_group(d, cache.partition) as u32,
        partition: cache.partition as u32,
        bits: cache.bits as u32,
        chunk: decode_chunk(cache.partition) as u32,
    }
}

/// HACK decode attention of `q: [batch, heads, 1, head_dim]` (the last slot) over `cache`, shapes
/// already checked, with `geo` from [`decode_geometry`] (and [`DecodeGeometry::fits`]); returns
/// `[batch, heads, 1, head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    cache: &CacheView<'_, Backend<R, BT>>,
    geo: DecodeGeometry,
    options: &AttendOptions,
) -> Tensor<Backend<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let [_, kv_heads, len, _] = cache.keys.min.dims();
    let device = q.device();
    let chunk = geo.chunk as usize;
    let splits = len.div_ceil(chunk);
    let q = float(&q);
    let client = q.client.clone();
    let empty = |n: usize| dense_output::<R, f32>(&q, n);
    let dummy_int = || into_contiguous(Tensor::<Backend<R, BT>, 1, Int>::zeros([1], &device).into_primitive());
    let keys = cache.keys;
    // Key metadata rows (`parts` values per slot) are padded on CUDA: read them in place, with
    // their pitch, unless the three differ.
    let key_meta = [
        keys.min.clone().into_primitive().tensor(),
        keys.scale.clone().into_primitive().tensor(),
        keys.sums.clone().into_primitive(),
    ]
    .map(pitched_rows_arg);
    let first_pitch = key_meta[0].1;
    let ([k_min, k_scale, k_sums], key_meta_pitch) = if key_meta.iter().all(|(_, pitch)| *pitch == first_pitch) {
        (key_meta.map(|(t, _)| t), first_pitch)
    } else {
        (key_meta.map(|(t, _)| into_contiguous(t)), geo.head_dim as usize / geo.key_group as usize)
    };
    let (blocks, v_words, v_min, v_scale, v_sums) = match cache.values {
        Some(v) => (cache.blocks(), int(&v.words), float(&v.min), float(&v.scale), int(&v.sums)),
        None => (0, dummy_int(), empty(1), empty(1), dummy_int()),
    };
    let tail = cache.tail.map_or_else(|| empty(1), float);
    let key_start: Vec<i32> = options.key_start.iter().map(|&s| s as i32).collect();
    let key_start = Tensor::<Backend<R, BT>, 1, Int>::from_data(TensorData::new(key_start, [batch]), &device);
    let partials = SplitPartials::allocate(&q, batch * heads, splits, d);
    // SAFETY: slots read are `< len` (the guard before every key and tail read) and `len` is the
    // caches' own length; a slot's key metadata is `part < parts ≤ key_meta_pitch` into its row
    // of `key_meta_pitch` elements (the tensors' own row pitch, or `parts` once contiguous); closed blocks are `< blocks`, the cache's block count; shared-memory
    // indices are `< group · chunk` or `< group · head_dim` by the loops' bounds; `key_start` has
    // `batch` entries and the grid has `batch · kv_heads` rows. Bounds validated on CUDA:
    // `burn_kvcompress::kernels`.
    unsafe {
        decode_kernel::launch_unchecked(
            &client,
            CubeCount::Static(splits as u32, (batch * kv_heads) as u32, 1),
            CubeDim::new_1d(geo.chunk),
            q.into_array_arg(),
            int(&keys.words).into_array_arg(),
            k_min.into_array_arg(),
            k_scale.into_array_arg(),
            k_sums.into_array_arg(),
            v_words.into_array_arg(),
            v_min.into_array_arg(),
            v_scale.into_array_arg(),
            v_sums.into_array_arg(),
            tail.into_array_arg(),
            int(&key_start).into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            key_meta_pitch as u32,
            len as u32,
            blocks as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
        )
    };
    let out = merge_partials(partials);
    Tensor::<Backend<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, 1, d])
}
