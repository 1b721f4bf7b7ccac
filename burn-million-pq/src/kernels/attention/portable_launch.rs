//! The host side of the portable decode kernel ([`portable_decode_kernel`]): the step's split
//! length, and its launch (the f32 table, the kernel, the merge).

use burn::tensor::Tensor;
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, merge_decode_output, CubeF32, SplitPartials},
};

use super::{
    decode_args::DecodeArgs,
    portable_geometry::{portable_geometry, split_chunk, UNITS},
    portable_kernel::portable_decode_kernel,
    table::{table_kernel, DecodeShape},
};
use crate::kernels::PqView;

/// PQ decode attention of `args` (the last slot's queries, `[batch, heads, 1, head_dim]`) over
/// `view` for `(batch, kv_heads)` streams, with `shape` within what the kernel
/// [`portable_supports`](super::portable_geometry::portable_supports); returns `[batch, heads, 1,
/// head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn portable_decode_launch<R: CubeRuntime, BT: BoolElement>(
    args: DecodeArgs<R>,
    view: &PqView<'_, CubeF32<R, BT>>,
    options: &AttendOptions,
    (batch, kv_heads): (usize, usize),
    shape: DecodeShape,
) -> Tensor<CubeF32<R, BT>, 4> {
    let DecodeArgs { q, codes: (k_codes, v_codes), recent: (k_recent, v_recent), key_start } = args;
    let (heads, d) = (kv_heads * shape.group as usize, shape.pq.head_dim as usize);
    let (coded, recent) = (view.coded(), view.recent_len());
    let client = q.client.clone();
    let shared_limit = client.properties().hardware.max_shared_memory_size;
    let chunk = split_chunk(shape, batch, kv_heads, coded + recent, shared_limit);
    let geo = portable_geometry(shape, chunk);
    let chunk = chunk as usize;
    let coded_splits = coded.div_ceil(chunk);
    let splits = coded_splits + recent.div_ceil(chunk);
    let streams = (batch * kv_heads) as u32;
    let table = dense_output::<R, f32>(&q, streams as usize * shape.table_floats() as usize);
    // SAFETY: one cube per (subspace, stream), sized from `shape` and `streams`, as is `table`;
    // `q` has `streams · group · head_dim` floats (the caller's shape check) and the books
    // `groups · subspaces · centroids · sub_dim`, `groups` being 1 or `kv_heads`. Bounds
    // validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        table_kernel::launch_unchecked(
            &client,
            CubeCount::Static(shape.pq.subspaces, streams, 1),
            CubeDim::new_1d(UNITS),
            q.clone().into_array_arg(),
            float_arg(view.key_books).into_array_arg(),
            table.clone().into_array_arg(),
            kv_heads as u32,
            options.scale,
            u32::from(view.key_books.dims()[0] > 1),
            shape,
        )
    };
    let partials = SplitPartials::allocate(&q, batch * heads, splits, d);
    // SAFETY: splits `< coded_splits` read code rows `< coded` of each stream (guard `t < count`)
    // and splits past it recent rows `< len - coded`; every code, masked to `nbits`, is `<
    // centroids`; shared and register arrays are indexed by comptime-bounded loops; the
    // placeholders (1 element) stand in only for a range that is empty, so no split reads them.
    // Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        portable_decode_kernel::launch_unchecked(
            &client,
            CubeCount::Static(splits as u32, streams, 1),
            CubeDim::new_1d(UNITS),
            q.into_array_arg(),
            table.into_array_arg(),
            k_codes.into_array_arg(),
            v_codes.into_array_arg(),
            float_arg(view.value_books).into_array_arg(),
            k_recent.into_array_arg(),
            v_recent.into_array_arg(),
            key_start.into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            (coded + recent) as u32,
            coded as u32,
            coded_splits as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            u32::from(view.value_books.dims()[0] > 1),
            geo,
        )
    };
    merge_decode_output(partials, batch)
}
