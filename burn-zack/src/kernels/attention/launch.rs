//! Launching the ZACK decode kernel and its merge on a CubeCL backend.

use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{float_arg, int_arg, merge_partials, CubeF32, SplitPartials},
};

use super::kernel::{decode_kernel, DecodeGeometry};
use crate::{cache::HeadLayout, kernels::DecodeSchedule};

/// Slots per split of a full-rank head.
pub const BASE_CHUNK: usize = 64;
/// The longest split (a reduced head's), in slots.
pub const MAX_CHUNK: usize = 256;
/// Units per cube.
const UNITS: u32 = 256;

/// ZACK decode attention of `q: [batch, heads, 1, head_dim]` (the last slot) over `keys: [batch,
/// len, Σ k_qk]` and `values: [batch, len, Σ k_vo]`, shapes already checked; returns `[batch,
/// heads, 1, head_dim]`, zero past each head's value rank.
pub fn decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    basis: Tensor<CubeF32<R, BT>, 2>,
    keys: Tensor<CubeF32<R, BT>, 3>,
    values: Tensor<CubeF32<R, BT>, 3>,
    layout: &HeadLayout,
    options: &AttendOptions,
) -> Tensor<CubeF32<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let len = keys.dims()[1];
    let device = q.device();
    let kv_heads = layout.kv_heads();
    let schedule = DecodeSchedule::plan(layout, len, BASE_CHUNK, MAX_CHUNK);
    let geo = DecodeGeometry { group: (heads / kv_heads) as u32, head_dim: d as u32, max_chunk: MAX_CHUNK as u32 };
    let words: Vec<i32> = (0..kv_heads)
        .flat_map(|h| {
            let (k, v) = (layout.key_columns(h), layout.value_columns(h));
            [k.start, k.len(), v.start, v.len()].map(|x| x as i32)
        })
        .collect();
    let upload = |data: Vec<i32>| {
        let n = data.len();
        int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::from_data(TensorData::new(data, [n]), &device))
    };
    let layout_arg = upload(words);
    let tasks = upload(schedule.table());
    let key_start = upload(options.key_start.iter().map(|&s| s as i32).collect());
    let q = float_arg(&q);
    let client = q.client.clone();
    let partials = SplitPartials::allocate(&q, batch * heads, schedule.splits, d);
    decode_kernel::launch(
        &client,
        CubeCount::Static(schedule.tasks.len() as u32, batch as u32, 1),
        CubeDim::new_1d(UNITS),
        q.into_array_arg(),
        float_arg(&basis).into_array_arg(),
        float_arg(&keys).into_array_arg(),
        float_arg(&values).into_array_arg(),
        layout_arg.into_array_arg(),
        tasks.into_array_arg(),
        key_start.into_array_arg(),
        partials.output.clone().into_array_arg(),
        partials.max.clone().into_array_arg(),
        partials.sum.clone().into_array_arg(),
        len as u32,
        schedule.splits as u32,
        options.window.unwrap_or(0) as u32,
        options.scale,
        geo,
    );
    let out = merge_partials(partials);
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, 1, d])
}
