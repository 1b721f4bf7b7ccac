//! The host side of the tensor-core decode kernel ([`mma_decode_kernel`]): how a step's slots are
//! split among warps, and its launch (the f16 tables, the kernel, the merge).

use burn::tensor::{f16, Tensor};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, merge_decode_output, warp_mma::WARP, CubeF32, SplitPartials, WarpSplits},
};

use super::{
    decode_args::DecodeArgs,
    half_table::{half_books_kernel, half_table_kernel},
    mma_geometry::{MmaGeometry, WORD_ELEMENTS},
    mma_kernel::mma_decode_kernel,
};
use crate::kernels::PqView;

/// Units of the table-preparing kernels' cubes.
const PREP_UNITS: u32 = 256;

/// PQ decode attention on tensor cores of `args` (the last slot's queries, `[batch, heads, 1,
/// head_dim]`) over `view` for `(batch, kv_heads)` streams, with `geo` (from
/// [`mma_geometry`](super::mma_geometry::mma_geometry)); returns `[batch, heads, 1, head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn mma_decode_launch<R: CubeRuntime, BT: BoolElement>(
    args: DecodeArgs<R>,
    view: &PqView<'_, CubeF32<R, BT>>,
    options: &AttendOptions,
    (batch, kv_heads): (usize, usize),
    geo: MmaGeometry,
) -> Tensor<CubeF32<R, BT>, 4> {
    let DecodeArgs { q, codes, recent, key_start } = args;
    let client = q.client.clone();
    let properties = client.properties();
    let shape = geo.tables.shape;
    let streams = batch * kv_heads;
    let len = view.len();
    let (key_books, value_groups) = (view.key_books.dims()[0], view.value_books.dims()[0]);
    let table = dense_output::<R, f16>(&q, streams * (geo.tables.table_words() * WORD_ELEMENTS) as usize);
    let books = dense_output::<R, f16>(&q, value_groups * (geo.tables.book_words() * WORD_ELEMENTS) as usize);
    // SAFETY: one cube per (word `p` of an entry, tile of 32 columns, tile of 32 centroids) of
    // each stream's table, writing word `p` of its entries (guards `c < centroids`, `column <
    // key_columns`), reading query head `2p + h < group` (a padding word `p` reads none and holds
    // zeros) of the stream (`q` holds `streams · group · head_dim` floats, the caller's shape
    // check) at the channels of subspace `s < subspaces`, and codebook row `s, c` of the stream's
    // group (`groups` is 1 or `kv_heads`); `table` holds `streams` tables.
    // Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        half_table_kernel::launch_unchecked::<f16, R>(
            &client,
            CubeCount::Static(geo.tables.table_cubes(), streams as u32, 1),
            CubeDim::new_1d(PREP_UNITS),
            WORD_ELEMENTS as usize,
            q.clone().into_array_arg(),
            float_arg(view.key_books).into_array_arg(),
            table.clone().into_array_arg(),
            kv_heads as u32,
            options.scale,
            u32::from(key_books > 1),
            geo.tables,
            PREP_UNITS,
        )
    };
    // SAFETY: one unit per word of each group's value codebooks (guard `e < book_words`),
    // reading channels `2p, 2p + 1 < sub_dim` of codebook row `s < subspaces, c` of its group;
    // `books` holds `value_groups` of them.
    unsafe {
        half_books_kernel::launch_unchecked::<f16, R>(
            &client,
            CubeCount::Static(geo.tables.book_words().div_ceil(PREP_UNITS), value_groups as u32, 1),
            CubeDim::new_1d(PREP_UNITS),
            WORD_ELEMENTS as usize,
            float_arg(view.value_books).into_array_arg(),
            books.clone().into_array_arg(),
            geo.tables,
        )
    };
    // Cubes per SM as their shared memory and units allow (the kernel's registers not counted).
    let splits = WarpSplits::for_device(geo.warps, geo.shared_bytes(), None, WARP as usize, (streams, len), properties);
    let warp_splits = splits.cubes * geo.warps as usize;
    let partials = SplitPartials::allocate(&q, streams * shape.group as usize, warp_splits, shape.pq.head_dim as usize);
    // SAFETY: each warp's slots `split · warp_chunk ..` are clamped to `len`; code rows are read
    // for slots `< coded` of the stream (`coded` rows each), recent rows for slots in `coded ..
    // len` within the warp's split (`len − coded` rows each); every code, masked to `nbits`, is
    // `< centroids`, so table entries (`c · key_columns + column`) stay within the table and
    // codebook words within a plane; tile words stay within the warp's `16 × stride / 2`
    // (subspace `· sub_dim / 2 + pair < head_dim / 2`); the prologue copies the stream's table
    // (`table_entries` entries of `table_entry_words` words) and
    // `book_words` of its group's codebooks
    // (`per_head_books` 1 only with `kv_heads` groups); the partials hold `heads · cubes ·
    // warps` entries. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        mma_decode_kernel::launch_unchecked::<f16, R>(
            &client,
            CubeCount::Static(splits.cubes as u32, streams as u32, 1),
            CubeDim::new_1d(geo.units()),
            WORD_ELEMENTS as usize,
            geo.tables.table_entry_elements() as usize,
            table.into_array_arg(),
            books.into_array_arg(),
            codes.0.into_array_arg(),
            codes.1.into_array_arg(),
            q.into_array_arg(),
            recent.0.into_array_arg(),
            recent.1.into_array_arg(),
            key_start.into_array_arg(),
            partials.output.clone().into_array_arg(),
            partials.max.clone().into_array_arg(),
            partials.sum.clone().into_array_arg(),
            len as u32,
            view.coded() as u32,
            splits.warp_chunk as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            u32::from(value_groups > 1),
            geo,
        )
    };
    merge_decode_output(partials, batch)
}
