//! Launching the query rotation ([`rotate_queries_kernel`]) that the decode and prefill steps
//! run before their attention kernels.

use burn_cubecl::{cubecl::prelude::*, tensor::CubeTensor, CubeRuntime};
use burn_kvcompress::kernels::dense_output;

use super::{
    portable_launch::UNITS,
    rotate_kernel::{rotate_queries_kernel, ROTATE_COLUMNS},
};
use crate::layout::HeadLayout;

/// The reduced queries `[rows, heads, Σ k_qk]` (`scale · q_g R̃` in each head's key columns) of
/// `q: [rows, heads, head_dim]` (f32, dense) with `group` query heads per KV head, the packed
/// basis `[head_dim, Σ k_qk]` and `meta`, the step's metadata upload (`step_metadata`'s head
/// layout first).
#[allow(unsafe_code)] // An unchecked kernel launch; it states why it is in bounds.
pub fn rotate_queries<R: CubeRuntime>(
    q: CubeTensor<R>,
    basis: CubeTensor<R>,
    meta: &CubeTensor<R>,
    layout: &HeadLayout,
    (rows, heads): (usize, usize),
    (group, head_dim): (u32, u32),
    scale: f32,
) -> CubeTensor<R> {
    let kv_heads = layout.kv_heads();
    let reduced = dense_output::<R, f32>(&q, rows * heads * layout.key_width());
    let widest_rank = (0..kv_heads).map(|h| layout.key_columns(h).len()).max().unwrap_or(0).max(1) as u32;
    // SAFETY: one cube per (KV head, query row, column tile) of the grid; it reads the row's
    // `heads · head_dim` channels of `q` (`rows` rows) and the head's key columns (`offset + j`,
    // `j < rank`, within `key_width`) of `basis`, and writes those of `reduced`, sized
    // `rows · heads · key_width` above. Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        rotate_queries_kernel::launch_unchecked(
            &q.client.clone(),
            CubeCount::Static(kv_heads as u32, rows as u32, widest_rank.div_ceil(ROTATE_COLUMNS)),
            CubeDim::new_1d(UNITS),
            q.into_array_arg(),
            basis.into_array_arg(),
            meta.clone().into_array_arg(),
            reduced.clone().into_array_arg(),
            scale,
            group,
            head_dim,
            UNITS,
        )
    };
    reduced
}
