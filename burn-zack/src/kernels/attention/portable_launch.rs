//! Launching the portable decode kernel ([`decode_kernel`]: units on column blocks of rows,
//! scalar products) on a CubeCL backend, over the load-balanced task list of a
//! [`DecodeSchedule`]: its compile-time shapes, its split lengths and its launch.

use burn::tensor::{f16, DType, Tensor};
use burn_cubecl::{cubecl::prelude::*, tensor::CubeTensor, BoolElement, CubeRuntime};
use burn_kvcompress::kernels::{float_arg, merge_decode_output, CubeF32};

use super::{
    decode_step::{launch_split_kernel, step_metadata, DecodeInputs, DecodeStep},
    portable_kernel::{decode_kernel, DecodeGeometry},
    schedule::DecodeSchedule,
};
use crate::layout::HeadLayout;

/// Units per cube.
pub const UNITS: u32 = 256;

/// Floats of the shared scratch buffer (9 KiB): one head's value sums of every unit (`256 · 9`
/// for blocks of 8), or, without plane sums, a round's partial scores of as many lanes as fit.
const SCRATCH_FLOATS: u32 = 2304;
/// Scores one cube holds (16 KiB): a task is at most `SCORE_FLOATS / group` slots long.
const SCORE_FLOATS: u32 = 4096;
/// The longest task, in slots.
const MAX_CHUNK: u32 = 1024;
/// Bounds of a full-rank head's split length, in slots: long splits spread a cube's fixed work
/// (loading the queries, the softmax, writing the partials) over more slots.
const BASE_CHUNK: (usize, usize) = (64, 512);
/// Cubes (tasks × sequences) a decode step aims for: several waves on a large GPU, and few enough
/// splits per head that the merge stays short.
const TARGET_CUBES: usize = 1024;

/// Slots per split of a full-rank head for `batch` sequences of `len` slots and `kv_heads` heads:
/// a power of two near `batch · kv_heads · len / TARGET_CUBES`, within [`BASE_CHUNK`].
pub fn base_chunk(batch: usize, kv_heads: usize, len: usize) -> usize {
    (batch * kv_heads * len / TARGET_CUBES).next_power_of_two().clamp(BASE_CHUNK.0, BASE_CHUNK.1)
}

/// The longest split of a reduced head, for full-rank splits of `base` slots: twice `base`, so
/// a small batch keeps enough cubes to fill the GPU, within the cube's score buffer of
/// `max_chunk` slots.
pub fn longest_split(base: usize, max_chunk: u32) -> usize {
    (2 * base).min(max_chunk as usize)
}

/// The kernel's compile-time shapes for `group` query heads per KV head of `head_dim` channels,
/// loading one element at a time (see [`load_vector`]) and adding up partial scores through
/// shared memory (see [`score_plane`]): a unit's block of queries or sums (`group · block`
/// floats) stays within 32 registers, and it keeps 4 rows in flight (1 for 16 heads, whose
/// blocks are narrow and many).
pub fn decode_geometry(group: usize, head_dim: usize) -> DecodeGeometry {
    let group = group as u32;
    let block = 1 << (32 / group).clamp(1, 8).ilog2();
    DecodeGeometry {
        group,
        head_dim: head_dim as u32,
        max_chunk: (SCORE_FLOATS / group).min(MAX_CHUNK),
        units: UNITS,
        block,
        vector: 1,
        rows: if group <= 8 { 4 } else { 1 },
        scratch_floats: SCRATCH_FLOATS,
        plane: 0,
    }
}

/// The plane lanes with which `geo`'s partial scores are added up, on a backend whose planes
/// have at least `plane_size` lanes (0: no plane operations): `plane_size` where a full row's
/// units fit in one plane, else 0 (through shared memory).
pub fn score_plane(geo: &DecodeGeometry, plane_size: u32) -> u32 {
    match geo.widest_blocks() <= plane_size && plane_size <= geo.units {
        true => plane_size,
        false => 0,
    }
}

/// The widest load, in elements, for `layout`'s rows: a power of two up to `widest` and the
/// geometry's `block` that divides both rows' widths and every head's column offset and rank,
/// so every load is aligned and within its head.
pub fn load_vector(layout: &HeadLayout, geo: &DecodeGeometry, widest: usize) -> u32 {
    let mut vector = widest.min(geo.block as usize).next_power_of_two();
    while vector > 1 && !layout.ranks_multiple_of(vector) {
        vector /= 2;
    }
    vector as u32
}

/// ZACK decode attention of the dense queries `q: [batch, heads, 1, head_dim]` over `inputs` by
/// the portable kernel with compile-time shapes `geo` (from [`decode_geometry`], its `vector`
/// from [`load_vector`] and its `plane` from [`score_plane`]); returns `[batch, heads, 1,
/// head_dim]`, zero past each head's value rank.
#[allow(unsafe_code)] // An unchecked kernel launch; it states why it is in bounds.
pub fn portable_launch<R: CubeRuntime, BT: BoolElement>(
    q: CubeTensor<R>,
    inputs: &DecodeInputs<'_, R, BT>,
    geo: DecodeGeometry,
) -> Tensor<CubeF32<R, BT>, 4> {
    let ([batch, _, _], layout, len) = (inputs.dims, inputs.layout, inputs.slots());
    // The metadata upload: the head layout, each row's first real slot, then the task table.
    let base = base_chunk(batch, layout.kv_heads(), len).min(geo.max_chunk as usize);
    let schedule = DecodeSchedule::plan(layout, len, base, longest_split(base, geo.max_chunk));
    let mut meta = step_metadata(layout, inputs.options);
    meta.extend(schedule.table());
    let cubes = CubeCount::Static(schedule.tasks.len() as u32, batch as u32, 1);
    let step = DecodeStep::begin(q, inputs, meta, schedule.splits);
    let shape = (cubes, UNITS, geo.vector, schedule.splits);
    // SAFETY: every task of the schedule covers slots `first..first + count` within `len` (the
    // schedule's invariant, tested in `schedule.rs`) of one head whose columns lie within the
    // caches' widths (`HeadLayout`); loads are whole vectors within a head's columns
    // (`load_vector`), clamped to the task's slots and to the head's last vector (every rank is
    // at least one vector: a multiple of it, and not 0, as callers check), the score buffer holds
    // `group · max_chunk` and the scratch buffer a round's partials (`score_lanes`) or `units ·
    // (block + 1)` sums; the partials hold `heads · splits` entries. Bounds validated on CUDA:
    // `burn_kvcompress::kernels`.
    unsafe {
        match inputs.keys.dtype() {
            DType::F16 => launch_split_kernel!(decode_kernel::launch_unchecked::<f16, R>, inputs, step, shape, geo),
            _ => launch_split_kernel!(decode_kernel::launch_unchecked::<f32, R>, inputs, step, shape, geo),
        }
    };
    merge_decode_output(step.partials, inputs.dims[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_grow_with_the_work() {
        assert_eq!(base_chunk(1, 3, 100), 64);
        assert_eq!(base_chunk(1, 8, 32768), 256);
        assert_eq!(base_chunk(1, 8, 8192), 64);
        assert_eq!(base_chunk(8, 8, 65536), 512);
        let geo = decode_geometry(4, 128);
        assert_eq!((longest_split(256, geo.max_chunk), longest_split(512, geo.max_chunk)), (512, 1024));
        assert_eq!(longest_split(512, decode_geometry(8, 128).max_chunk), 512, "8 heads' scores fill the buffer");
    }

    #[test]
    fn rows_are_added_by_planes_only_when_a_row_fits_in_one() {
        // CUDA's 32-lane warps: a 128-channel row is 16 blocks of 8 for 4 heads, 32 of 4 for 8.
        assert_eq!((score_plane(&decode_geometry(4, 128), 32), score_plane(&decode_geometry(8, 128), 32)), (32, 32));
        // 16 heads take blocks of 2: 64 units a row.
        assert_eq!(score_plane(&decode_geometry(16, 128), 32), 0);
        assert_eq!((score_plane(&decode_geometry(4, 128), 8), score_plane(&decode_geometry(3, 64), 8)), (0, 8));
        assert_eq!(score_plane(&decode_geometry(1, 16), 0), 0, "no plane operations");
    }

    #[test]
    fn loads_are_as_wide_as_every_offset_and_rank_allows() {
        let layout =
            |qk: &[usize], vo: &[usize]| HeadLayout { head_dim: 128, qk_ranks: qk.to_vec(), vo_ranks: vo.to_vec() };
        let (geo4, geo8) = (decode_geometry(4, 128), decode_geometry(8, 128));
        assert_eq!((geo4.block, geo8.block), (8, 4));
        assert_eq!(load_vector(&layout(&[64, 64], &[64, 64]), &geo4, 8), 8);
        assert_eq!(load_vector(&layout(&[64, 64], &[64, 64]), &geo4, 4), 4);
        assert_eq!(load_vector(&layout(&[64, 64], &[64, 64]), &geo8, 8), 4, "within a block");
        // A rank of 36 puts the next head at column 36 (a multiple of 4, not of 8).
        assert_eq!(load_vector(&layout(&[36, 64], &[64, 64]), &geo4, 8), 4);
        assert_eq!(load_vector(&layout(&[64, 64], &[64, 2]), &geo4, 8), 2);
        assert_eq!(load_vector(&layout(&[64, 64], &[64, 33]), &geo4, 8), 1);
    }
}
