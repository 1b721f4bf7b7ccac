//! Launching the fused prefill kernel on a CubeCL backend.

use burn::tensor::{Tensor, TensorPrimitive};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg as float, key_start_arg, CubeF32 as Backend},
};

use super::prefill_kernel::{prefill_kernel, PrefillGeometry};
use crate::{
    kernels::key_group,
    kernels::{cache_args::CacheArgs, CacheView},
};

/// Rows (query slots × heads of a KV head) a cube aims for, halved until its shared memory fits.
const TARGET_ROWS: [u32; 4] = [32, 16, 8, 4];

/// The prefill kernel's compile-time shape for `group` query heads per KV head over a cache of
/// `head_dim` channels, partition Π and `bits`-bit codes: the most query slots per cube (about 32
/// rows) whose shared memory fits `device_bytes`, or None when even one slot per cube does not
/// (the caller then runs the reference).
pub fn prefill_geometry(
    group: usize,
    head_dim: usize,
    partition: usize,
    bits: u8,
    device_bytes: usize,
) -> Option<PrefillGeometry> {
    let kg = key_group(head_dim, partition) as u32;
    let (group, d) = (group as u32, head_dim as u32);
    TARGET_ROWS
        .iter()
        .map(|rows| PrefillGeometry::new(group, d, kg, partition as u32, bits as u32, (rows / group).max(1)))
        .find(|geo| geo.fits(device_bytes))
}

/// HACK attention of `q: [batch, heads, q_len, head_dim]` (the last `q_len` slots) over `cache`,
/// shapes already checked, with `geo` from [`prefill_geometry`]; returns `[batch, heads, q_len,
/// head_dim]`.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn prefill_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<Backend<R, BT>, 4>,
    cache: &CacheView<'_, Backend<R, BT>>,
    geo: PrefillGeometry,
    options: &AttendOptions,
) -> Tensor<Backend<R, BT>, 4> {
    let [batch, heads, q_len, d] = q.dims();
    let [_, kv_heads, len, _] = cache.keys.params.dims();
    let q = float(&q);
    let client = q.client.clone();
    let args = CacheArgs::new(cache, &q, (geo.head_dim / geo.key_group) as usize);
    let [k_params, k_sums] = args.k_meta;
    let [v_params, v_sums] = args.v_meta;
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    let out = dense_output::<R, f32>(&q, batch * heads * q_len * d);
    // SAFETY: key slots read are `< len` (the guard before every key and tail read) and `len` is
    // the caches' own length; a slot's key metadata is `part < parts ≤ key_meta_pitch` into its
    // row of `key_meta_pitch` elements; closed blocks are `kb < blocks`, the cache's block count;
    // query and output rows are read and written only for live rows (`row < group · queries`)
    // of queries `< q_len`, and `q`, `out` hold `batch · heads · q_len · head_dim` elements;
    // shared-memory indices stay below the sizes `PrefillGeometry` declares by the loops' bounds;
    // `key_start` has `batch` entries and the grid has `batch · kv_heads` rows.
    unsafe {
        prefill_kernel::launch_unchecked(
            &client,
            CubeCount::Static(q_len.div_ceil(geo.queries as usize) as u32, (batch * kv_heads) as u32, 1),
            CubeDim::new_1d(geo.units()),
            q.into_array_arg(),
            args.k_words.into_array_arg(),
            k_params.into_array_arg(),
            k_sums.into_array_arg(),
            args.v_words.into_array_arg(),
            v_params.into_array_arg(),
            v_sums.into_array_arg(),
            args.tail.into_array_arg(),
            key_start.into_array_arg(),
            out.clone().into_array_arg(),
            args.key_meta_pitch as u32,
            len as u32,
            q_len as u32,
            args.blocks as u32,
            options.window.unwrap_or(0) as u32,
            options.scale,
            geo,
        )
    };
    Tensor::<Backend<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, q_len, d])
}
