//! Launching the query quantization, the fused decode kernel and its merge on a CubeCL backend.

use burn::tensor::{backend::Backend as BurnBackend, Tensor};
use burn_cubecl::{cubecl::prelude::*, tensor::CubeTensor, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{
        dense_output, float_arg as float, key_start_arg, merge_decode_output, CubeF32 as Backend, SplitPartials,
    },
};

use super::{
    portable_kernel::{decode_kernel, DecodeGeometry},
    query_kernel::query_kernel,
};
use crate::{
    kernels::key_group,
    kernels::{cache_args::CacheArgs, CacheView},
};

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
    let [_, kv_heads, len, _] = cache.keys.params.dims();
    let chunk = geo.chunk as usize;
    let splits = len.div_ceil(chunk);
    let q = float(&q);
    let client = q.client.clone();
    let parts = (geo.head_dim / geo.key_group) as usize;
    let args = CacheArgs::new(cache, &q, parts);
    let [k_params, k_sums] = args.k_meta;
    let [v_params, v_sums] = args.v_meta;
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    let partials = SplitPartials::allocate(&q, batch * heads, splits, d);
    let QueryCodes { codes: q_codes, meta: q_meta } = quantize_queries(&q, batch * kv_heads, geo);
    // SAFETY: the query codes and metadata are read at `stream · pairs · head_dim + item` and
    // `stream · 3 · runs + run`, as `query_kernel` wrote them; slots read are `< len` (the guard
    // before every key and tail read) and `len` is the caches' own length; a slot's key metadata
    // is `part < parts ≤ key_meta_pitch` into its row of `key_meta_pitch` elements (the tensors'
    // own row pitch, or `parts` once contiguous); closed blocks are `< blocks`, the cache's block
    // count; shared-memory indices are `< group · chunk` or `< group · head_dim` by the loops'
    // bounds; `key_start` has `batch` entries and the grid has `batch · kv_heads` rows. Bounds
    // validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        decode_kernel::launch_unchecked(
            &client,
            CubeCount::Static(splits as u32, (batch * kv_heads) as u32, 1),
            CubeDim::new_1d(geo.chunk),
            q_codes.into_array_arg(),
            q_meta.into_array_arg(),
            args.k_words.into_array_arg(),
            k_params.into_array_arg(),
            k_sums.into_array_arg(),
            args.v_words.into_array_arg(),
            v_params.into_array_arg(),
            v_sums.into_array_arg(),
            args.tail.into_array_arg(),
            key_start.into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            args.key_meta_pitch as u32,
            len as u32,
            args.blocks as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
        )
    };
    merge_decode_output(partials, batch)
}

/// The 8-bit codes of a decode step's queries and their runs' metadata, in the layout of
/// [`query_kernel`].
pub(super) struct QueryCodes<R: CubeRuntime> {
    /// `[streams · pairs · head_dim]`: two heads' codes per word.
    pub codes: CubeTensor<R>,
    /// `[streams · 3 · group · parts]`: each run's min, scale and code sum.
    pub meta: CubeTensor<R>,
}

/// Quantizes the queries `q` (`[streams · group · head_dim]` f32, contiguous) once per stream
/// with [`query_kernel`], for the scalar decode kernel.
#[allow(unsafe_code)] // An unchecked kernel launch; it states why it is in bounds.
pub(super) fn quantize_queries<R: CubeRuntime>(
    q: &CubeTensor<R>,
    streams: usize,
    geo: DecodeGeometry,
) -> QueryCodes<R> {
    let shape = geo.queries();
    let codes = dense_output::<R, u32>(q, streams * shape.code_words() as usize);
    let meta = dense_output::<R, f32>(q, streams * shape.meta_values() as usize);
    // SAFETY: one cube per stream reads its group's `group · head_dim` query values of `q` and
    // writes its `pairs · head_dim` codes and `3 · runs` metadata values, within the buffers'
    // `streams ·` those sizes above. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        query_kernel::launch_unchecked(
            &q.client,
            CubeCount::Static(streams as u32, 1, 1),
            CubeDim::new_1d(geo.chunk),
            q.clone().into_array_arg(),
            codes.clone().into_array_arg(),
            meta.clone().into_array_arg(),
            shape,
        )
    };
    QueryCodes { codes, meta }
}
