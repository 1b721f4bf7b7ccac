//! Launching the fused PQ decode kernel and its merge on a CubeCL backend.

use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, int_arg, merge_partials, CubeF32, SplitPartials},
};

use super::kernel::{decode_kernel, DecodeGeometry};
use crate::kernels::PqView;

/// Slots per split.
pub const DECODE_CHUNK: usize = 64;
/// Units scoring one slot (`DECODE_CHUNK * DECODE_LANES` units per cube).
const DECODE_LANES: usize = 4;

/// The lookup table of one step: `q: [batch, heads, 1, head_dim]`, key codebooks `[groups,
/// subspaces, centroids, sub_dim]`; returns `[batch, kv_heads, subspaces, centroids, group]` of
/// `scale · <q^(i), C_K^i[c]>` (a code's entries for the group's heads are adjacent).
fn lookup_table<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    books: &Tensor<CubeF32<R, BT>, 4>,
    kv_heads: usize,
    scale: f32,
) -> Tensor<CubeF32<R, BT>, 5> {
    let [batch, heads, _, _] = q.dims();
    let [groups, m, centroids, ds] = books.dims();
    let group = heads / kv_heads;
    let q = q.reshape([batch, kv_heads, group, m, ds]).permute([0, 1, 3, 2, 4]);
    let books = books
        .clone()
        .reshape([1, groups, m, centroids, ds])
        .swap_dims(3, 4)
        .expand([batch, kv_heads, m, ds, centroids]);
    (q.matmul(books) * scale).swap_dims(3, 4)
}

/// PQ decode attention of `q: [batch, heads, 1, head_dim]` (the last slot) over `view`, shapes
/// already checked; returns `[batch, heads, 1, head_dim]`.
pub fn decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    view: &PqView<'_, CubeF32<R, BT>>,
    options: &AttendOptions,
    kv_heads: usize,
) -> Tensor<CubeF32<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let device = q.device();
    let config = view.config;
    let group = heads / kv_heads;
    let (coded, recent) = (view.coded(), view.recent_len());
    let coded_splits = coded.div_ceil(DECODE_CHUNK);
    let splits = coded_splits + recent.div_ceil(DECODE_CHUNK);
    let geo = DecodeGeometry {
        group: group as u32,
        head_dim: d as u32,
        subspaces: config.subspaces as u32,
        sub_dim: config.sub_dim(d) as u32,
        centroids: config.centroids() as u32,
        nbits: config.nbits as u32,
        words: config.words_per_vector() as u32,
        chunk: DECODE_CHUNK as u32,
        lanes: DECODE_LANES as u32,
    };
    let table = lookup_table(q.clone(), view.key_books, kv_heads, options.scale);
    let q = float_arg(&q);
    let client = q.client.clone();
    let placeholder_int = || int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::zeros([1], &device));
    let (k_codes, v_codes) =
        view.codes.map_or_else(|| (placeholder_int(), placeholder_int()), |(k, v)| (int_arg(k), int_arg(v)));
    let (k_recent, v_recent) = view.recent.map_or_else(
        || (dense_output::<R, f32>(&q, 1), dense_output::<R, f32>(&q, 1)),
        |(k, v)| (float_arg(k), float_arg(v)),
    );
    let key_start: Vec<i32> = options.key_start.iter().map(|&s| s as i32).collect();
    let key_start = Tensor::<CubeF32<R, BT>, 1, Int>::from_data(TensorData::new(key_start, [batch]), &device);
    let partials = SplitPartials::allocate(&q, batch * heads, splits, d);
    decode_kernel::launch(
        &client,
        CubeCount::Static(splits as u32, (batch * kv_heads) as u32, 1),
        CubeDim::new_1d((DECODE_CHUNK * DECODE_LANES) as u32),
        q.into_array_arg(),
        float_arg(&table).into_array_arg(),
        k_codes.into_array_arg(),
        v_codes.into_array_arg(),
        float_arg(view.value_books).into_array_arg(),
        k_recent.into_array_arg(),
        v_recent.into_array_arg(),
        int_arg(&key_start).into_array_arg(),
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
    );
    let out = merge_partials(partials);
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, 1, d])
}
