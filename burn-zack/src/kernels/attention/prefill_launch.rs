//! Launching the ZACK prefill kernel (and the query rotation it reads) on a CubeCL backend, with
//! query tiles balanced across uneven heads.

use burn::tensor::{f16, DType, Tensor, TensorPrimitive};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, CubeF32},
};

use super::{
    decode_step::{step_metadata, upload_metadata},
    prefill_kernel::{prefill_kernel, PrefillGeometry, ROWS},
    rotate_launch::rotate_queries,
};
use crate::layout::HeadLayout;

/// Shared memory a cube may use on every backend: 32 KiB on Mesa's software Vulkan.
const SHARED_BYTES: u32 = 32 * 1024;
/// Key slots per block, halved until the cube's shared memory fits.
const BLOCKS: [u32; 3] = [32, 16, 8];
/// Query rows (sequences × slots) one rotation launch takes: a grid's second dimension.
const ROTATE_ROWS: usize = 65535;

/// The prefill kernel's geometry for `group` query heads per KV head of `head_dim` channels, or
/// None where it does not apply (more than `ROWS` heads per KV head, a cube over 256 units, or
/// shared memory over 32 KiB even with the shortest blocks). The query rotation it reads also
/// needs what [`supports`](super::select::supports) checks.
pub fn prefill_geometry(group: usize, head_dim: usize) -> Option<PrefillGeometry> {
    if group == 0 || group > ROWS as usize {
        return None;
    }
    BLOCKS
        .iter()
        .map(|&block| PrefillGeometry::new(group as u32, head_dim as u32, block))
        .find(|geo| geo.units() <= 256 && geo.shared_bytes() <= SHARED_BYTES)
}

/// The task table: `[kv_head, first_query, queries]` per task, every head's queries cut into
/// tiles of `max_queries` slots, ordered by decreasing work `queries · (first + queries) ·
/// (k_qk + k_vo + 1)` (causal: later tiles see more keys; wider heads cost more per pair), so the
/// longest tasks start first and the short ones fill the last wave.
///
/// The paper equalises tasks instead, with taller row blocks for cheaper heads. A cube here holds
/// at most `ROWS` rows in shared memory and registers, so a cheap head cannot take a taller
/// tile, and shrinking an expensive head's tile leaves rows of its cube idle (measured: rank 0.5
/// took longer than full rank that way); the ordering is what balances the uneven heads.
pub fn prefill_tasks(layout: &HeadLayout, q_len: usize, max_queries: usize) -> Vec<[u32; 3]> {
    let cost = |h: usize| layout.qk_ranks[h] + layout.vo_ranks[h] + 1;
    let tile = max_queries.max(1);
    let mut tasks: Vec<([u32; 3], usize)> = (0..layout.kv_heads())
        .flat_map(|h| {
            (0..q_len).step_by(tile).map(move |first| {
                let queries = tile.min(q_len - first);
                ([h as u32, first as u32, queries as u32], queries * (first + queries) * cost(h))
            })
        })
        .collect();
    tasks.sort_by_key(|(_, work)| std::cmp::Reverse(*work));
    tasks.into_iter().map(|(task, _)| task).collect()
}

/// ZACK attention of `q: [batch, heads, q_len, head_dim]` (the last `q_len` slots) over `keys:
/// [batch, len, Σ k_qk]` and `values: [batch, len, Σ k_vo]` (both f32 or both f16), shapes
/// already checked, `geo` from [`prefill_geometry`], every head's ranks at least 1; returns
/// `[batch, heads, q_len, head_dim]`, zero past each head's value rank.
#[allow(unsafe_code)] // An unchecked kernel launch; it states why it is in bounds.
pub fn prefill_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    basis: Tensor<CubeF32<R, BT>, 2>,
    keys: Tensor<CubeF32<R, BT>, 3>,
    values: Tensor<CubeF32<R, BT>, 3>,
    layout: &HeadLayout,
    geo: PrefillGeometry,
    options: &AttendOptions,
) -> Tensor<CubeF32<R, BT>, 4> {
    let [batch, heads, q_len, d] = q.dims();
    let len = keys.dims()[1];
    let device = q.device();
    let kv_heads = layout.kv_heads();
    let tasks = prefill_tasks(layout, q_len, geo.queries() as usize);
    let mut meta = step_metadata(layout, options);
    let tasks_at = meta.len();
    meta.extend(tasks.iter().flatten().map(|&x| x as i32));
    let meta = upload_metadata::<R, BT>(meta, &device);

    // The reduced queries, `[batch, q_len, heads, key_width]`: the decode step's rotation with
    // every (sequence, slot) as a sequence, in launches of at most `ROTATE_ROWS` of them.
    let rows = q.swap_dims(1, 2).reshape([batch * q_len, heads, d]);
    let basis = float_arg(&basis);
    let group = (heads / kv_heads) as u32;
    let reduced: Vec<Tensor<CubeF32<R, BT>, 1>> = (0..batch * q_len)
        .step_by(ROTATE_ROWS)
        .map(|first| {
            let n = ROTATE_ROWS.min(batch * q_len - first);
            let chunk = float_arg(&rows.clone().narrow(0, first, n));
            let out = rotate_queries(chunk, basis.clone(), &meta, layout, (n, heads), (group, d as u32), options.scale);
            Tensor::from_primitive(TensorPrimitive::Float(out))
        })
        .collect();
    let reduced = float_arg(&Tensor::cat(reduced, 0));
    let client = reduced.client.clone();
    let out = dense_output::<R, f32>(&reduced, batch * heads * q_len * d);
    let launch = match keys.dtype() {
        DType::F16 => prefill_kernel::launch_unchecked::<f16, R>,
        _ => prefill_kernel::launch_unchecked::<f32, R>,
    };
    // SAFETY: a task's rows are `queries · group ≤ ROWS` (`prefill_tasks` cuts tiles of at most
    // `geo.queries()` slots) of queries `first_query + i < q_len` of one KV head, whose columns
    // lie within the caches' widths (`HeadLayout`); key and value slots read are `< len` (the
    // guard before each load); shared indices stay below `ROWS · head_dim`, `block · (head_dim
    // + 1)` (ranks ≤ head_dim) and `ROWS · block` by the loops' bounds; `meta` holds the layout,
    // `batch` first slots and the table read from `tasks_at`; `out` holds `batch · heads · q_len
    // · head_dim`. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        launch(
            &client,
            CubeCount::Static(tasks.len() as u32, batch as u32, 1),
            CubeDim::new_1d(geo.units()),
            reduced.into_array_arg(),
            float_arg(&keys).into_array_arg(),
            float_arg(&values).into_array_arg(),
            meta.into_array_arg(),
            out.clone().into_array_arg(),
            kv_heads as u32,
            tasks_at as u32,
            len as u32,
            q_len as u32,
            options.window.unwrap_or(0) as u32,
            layout.key_width() as u32,
            layout.value_width() as u32,
            geo,
        )
    };
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, q_len, d])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_cover_every_query_once_longest_first() {
        let layout = HeadLayout { head_dim: 128, qk_ranks: vec![32, 96], vo_ranks: vec![32, 96] };
        let tasks = prefill_tasks(&layout, 10, 4);
        for head in [0, 1] {
            let mut covered: Vec<u32> = tasks
                .iter()
                .filter(|t| t[0] == head)
                .inspect(|t| assert!(t[2] <= 4))
                .flat_map(|t| t[1]..t[1] + t[2])
                .collect();
            covered.sort();
            assert_eq!(covered, (0..10).collect::<Vec<_>>(), "head {head}");
        }
        // Work `queries · (first + queries) · cost` (costs 65 and 193): head 1's slots 4..8 are
        // 4 · 8 · 193 = 6176, its slots 8..10 2 · 10 · 193 = 3860, its slots 0..4 4 · 4 · 193 =
        // 3088; head 0's costliest, slots 4..8, are 2080.
        assert_eq!(&tasks[..4], &[[1, 4, 4], [1, 8, 2], [1, 0, 4], [0, 4, 4]], "the costliest tiles first");
    }

    #[test]
    fn the_kernel_takes_the_common_geometries_within_32_kib() {
        for (group, head_dim, block) in [(3, 64, 32), (4, 128, 32), (8, 128, 32), (16, 64, 32), (1, 256, 8)] {
            let geo = prefill_geometry(group, head_dim).unwrap_or_else(|| panic!("{group} × {head_dim}"));
            assert_eq!(geo.block, block, "{group} × {head_dim}: {} bytes", geo.shared_bytes());
        }
        assert!(prefill_geometry(32, 128).is_none());
    }
}
