//! The host side of the tensor-core decode kernel ([`mma_decode_kernel`]): whether it applies, its
//! compile-time shapes, how a step's slots are split among warps, and its launch (the f16 tables,
//! the kernel, the merge).

use burn::tensor::{f16, Tensor, TensorPrimitive};
use burn_cubecl::{
    cubecl::{
        features::{MmaConfig, Plane},
        ir::{DeviceProperties, ElemType, FloatKind},
        prelude::*,
    },
    tensor::CubeTensor,
    BoolElement, CubeRuntime,
};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, merge_partials, warp_mma::WARP, CubeF32, SplitPartials, WarpSplits},
};

use super::{
    half_table::{half_books_kernel, half_table_kernel, HalfTables},
    mma_kernel::mma_decode_kernel,
    mma_kernel_geometry::{MmaGeometry, TILE_CHANNELS, WORD_ELEMENTS},
    table::DecodeShape,
};
use crate::kernels::PqView;

/// The most warps of one cube.
const MAX_WARPS: u32 = 16;
/// The most channels of a head (4 blocks of value sums per warp).
const MAX_HEAD_DIM: u32 = 128;
/// The most query heads per KV head (one product's `n`).
const MAX_GROUP: u32 = 8;
/// Units of the table-preparing kernels' cubes.
const PREP_UNITS: u32 = 256;

/// The tensor-core kernel's compile-time shapes for `shape` on a device with `properties`: as
/// many warps per cube (at most `MAX_WARPS`) as the shared memory holds beside the tables.
/// `None` where it does not apply: no f16 `32 × 8 × 16` warp products into f32, no asynchronous
/// copies or planes of other than 32 lanes; more than 8 query heads per KV head or 128 channels,
/// a head dimension not a multiple of 4, or past 32 channels not a multiple of 32; an odd number
/// of channels per subspace; codes that do not divide a 32-bit word or have more than 8 bits;
/// parts of 32 channels whose codes are not an even number of whole words; or tables that leave
/// no room for one warp.
pub fn mma_geometry(shape: DecodeShape, properties: &DeviceProperties) -> Option<MmaGeometry> {
    let f16 = ElemType::Float(FloatKind::F16).into();
    let product =
        MmaConfig { a_type: f16, b_type: f16, cd_type: ElemType::Float(FloatKind::F32).into(), m: 32, n: 8, k: 16 };
    let features = &properties.features;
    let pq = shape.pq;
    let tables = HalfTables { shape };
    let one = MmaGeometry { tables, warps: 1 };
    let parts = one.channel_parts();
    let applies = features.matmul.cmma.contains(&product)
        && features.copy_async
        && features.plane.contains(Plane::Ops)
        && properties.hardware.plane_size_min == WARP
        && properties.hardware.plane_size_max == WARP
        && shape.group <= MAX_GROUP
        && pq.head_dim <= MAX_HEAD_DIM
        && pq.head_dim.is_multiple_of(4)
        && (parts == 1 || pq.head_dim.is_multiple_of(TILE_CHANNELS))
        && pq.sub_dim.is_multiple_of(2)
        && 32 % pq.nbits == 0
        && pq.nbits <= 8
        && pq.words.is_multiple_of(2 * parts)
        && (parts == 1 || one.part_words() * one.per_word() * pq.sub_dim == TILE_CHANNELS);
    if !applies {
        return None;
    }
    let limit = properties.hardware.max_shared_memory_size;
    (1..=MAX_WARPS).rev().map(|warps| MmaGeometry { tables, warps }).find(|geo| geo.shared_bytes() as usize <= limit)
}

/// PQ decode attention on tensor cores of `q` (the last slot, `[batch, heads, 1, head_dim]`, as
/// a contiguous argument) over `view`, for `geo` (from [`mma_geometry`]); `key_start`: `[batch]`.
/// Returns the merged `[batch · heads · head_dim]` output.
#[allow(unsafe_code, clippy::too_many_arguments)] // Unchecked kernel launches; each states why it is in bounds.
pub fn mma_decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: CubeTensor<R>,
    view: &PqView<'_, CubeF32<R, BT>>,
    options: &AttendOptions,
    (batch, kv_heads): (usize, usize),
    codes: (CubeTensor<R>, CubeTensor<R>),
    recent: (CubeTensor<R>, CubeTensor<R>),
    key_start: CubeTensor<R>,
    geo: MmaGeometry,
) -> CubeTensor<R> {
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
    merge_partials(partials)
}

/// The merged output as a `[batch, heads, 1, head_dim]` tensor.
pub fn output_tensor<R: CubeRuntime, BT: BoolElement>(
    out: CubeTensor<R>,
    [batch, heads, d]: [usize; 3],
) -> Tensor<CubeF32<R, BT>, 4> {
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, 1, d])
}
