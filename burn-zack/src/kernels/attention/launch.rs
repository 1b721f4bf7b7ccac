//! Launching the ZACK decode kernel, its query rotation and its merge on a CubeCL backend.

use burn::tensor::{f16, DType, Int, Tensor, TensorData, TensorPrimitive};
use burn_cubecl::{
    cubecl::{features::Plane, prelude::*},
    BoolElement, CubeRuntime,
};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, int_arg, merge_partials, warp_mma::WARP, CubeF32, SplitPartials},
};

use super::{
    kernel::{decode_kernel, DecodeGeometry},
    mma_kernel::mma_decode_kernel,
    mma_kernel::MmaGeometry,
    mma_launch::{mma_geometry, RowSplits, StagedTiles},
    rotate::{rotate_queries_kernel, ROTATE_COLUMNS},
    tma_kernel::{tma_decode_kernel, TmaGeometry},
    tma_launch::{landed_rows, tma_geometry},
};
use crate::{cache::HeadLayout, kernels::DecodeSchedule};

/// Units per cube.
pub const UNITS: u32 = 256;

/// The fewest 32-slot rounds per cube for which a step runs the TMA kernel. Each of its launches
/// costs the host more (CubeCL encodes the two TMA maps and uploads their shapes with every
/// launch), which shows where the device's step is short: on an H100 the TMA kernel's steps took
/// as long as the `wmma` kernel's at 8 rounds per cube (batch 8 at 4K, batch 1 at 32K) and
/// longer at 4 and 1 (batch 1 at 16K and 4K; `results/decode-zack-tma-h100.md`).
const TMA_MIN_ROUNDS: usize = 8;

/// The decode kernel a step runs, with its compile-time shapes.
enum DecodeKernel {
    /// Rows landed by TMA, warp products read from the landed rows (`tma_kernel`), with the
    /// step's splits.
    Tma(TmaGeometry, RowSplits),
    /// Rows staged by asynchronous copies into per-head tiles, `wmma` products (`mma_kernel`).
    Mma(MmaGeometry, StagedTiles),
    /// Units on column blocks of rows, scalar products (`kernel`).
    Scalar,
}

/// Floats of the shared scratch buffer (9 KiB): one head's value sums of every unit (`256 · 9`
/// for blocks of 8), or, without plane sums, a round's partial scores of as many lanes as fit.
const SCRATCH_FLOATS: u32 = 2304;
/// Scores one cube holds (16 KiB): a task is at most `SCORE_FLOATS / group` slots long.
const SCORE_FLOATS: u32 = 4096;
/// Shared memory a cube may use on every backend: 32 KiB on Mesa's software Vulkan (CUDA allows
/// 48 KiB of static shared memory).
const SHARED_BYTES: u32 = 32 * 1024;
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

/// Whether the decode kernel handles `group` query heads per KV head of `head_dim` channels: a
/// head's channels fit one cube, the softmax's max runs on 16 units per head, the scratch buffer
/// holds the kernel's partial sums, and the cube's shared memory fits `SHARED_BYTES`.
pub fn supports(group: usize, head_dim: usize) -> bool {
    let geo = decode_geometry(group, head_dim);
    head_dim <= UNITS as usize
        && group <= UNITS as usize / 16
        && geo.scratch_fits()
        && geo.shared_bytes() <= SHARED_BYTES
}

/// The head of a kernel's metadata upload: per KV head `[key_offset, key_rank, value_offset,
/// value_rank]`, then each batch row's first real slot (a task table follows).
pub fn step_metadata(layout: &HeadLayout, options: &AttendOptions) -> Vec<i32> {
    let mut meta: Vec<i32> = (0..layout.kv_heads())
        .flat_map(|h| {
            let (k, v) = (layout.key_columns(h), layout.value_columns(h));
            [k.start, k.len(), v.start, v.len()].map(|x| x as i32)
        })
        .collect();
    meta.extend(options.key_start.iter().map(|&s| s as i32));
    meta
}

/// ZACK decode attention of `q: [batch, heads, 1, head_dim]` (the last slot) over `keys: [batch,
/// len, Σ k_qk]` and `values: [batch, len, Σ k_vo]` (both f32 or both f16), shapes already
/// checked and within what the kernel [`supports`], every head's ranks at least 1; returns `[batch, heads, 1, head_dim]`, zero
/// past each head's value rank.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
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
    let q = float_arg(&q);
    let client = q.client.clone();
    let properties = client.properties();
    let geo = decode_geometry(heads / kv_heads, d);
    let widest = client.io_optimized_vector_sizes(keys.dtype().size()).next().unwrap_or(1);
    let vector = load_vector(layout, &geo, widest);
    let plane_size = match properties.features.plane.contains(Plane::Ops) {
        true => properties.hardware.plane_size_min,
        false => 0,
    };
    let geo = DecodeGeometry { vector, plane: score_plane(&geo, plane_size), ..geo };
    // On CUDA: the TMA kernel where the device lands rows by TMA and its cubes take at least
    // `TMA_MIN_ROUNDS` rounds, else the tensor-core kernel where it has warp matrix products and
    // asynchronous copies, else (and elsewhere) the scalar kernel. The tensor-core kernels need
    // 32-lane planes (one warp per KV head).
    let warps = plane_size == 32;
    let tma = tma_geometry(layout, (heads / kv_heads, d), keys.dtype(), properties)
        .filter(|_| warps)
        .map(|tma| (tma, RowSplits::for_device((tma.heads, tma.shared_bytes()), layout, batch, len, properties)))
        .filter(|(_, rows)| rows.chunk >= TMA_MIN_ROUNDS * WARP as usize);
    let kernel = match tma {
        Some((tma, rows)) => DecodeKernel::Tma(tma, rows),
        None => match mma_geometry(layout, (heads / kv_heads, d), vector, keys.dtype(), properties).filter(|_| warps) {
            Some((mma, tiles)) => DecodeKernel::Mma(mma, tiles),
            None => DecodeKernel::Scalar,
        },
    };
    // One upload per step: the head layout, each row's first real slot, then the scalar kernel's
    // task table or the `wmma` kernel's tiles (the TMA kernel needs neither). `split_word` is the
    // scalar and `wmma` kernels' twelfth argument: the splits per head (scalar) or the slots per
    // split (`wmma`); the TMA kernel interleaves its splits' rounds and takes none.
    let mut meta = step_metadata(layout, options);
    let row_cubes =
        |rows: RowSplits, heads: u32| CubeCount::Static(rows.splits as u32, kv_heads as u32 / heads, batch as u32);
    let (cubes, units, splits, split_word) = match &kernel {
        DecodeKernel::Tma(tma, rows) => (row_cubes(*rows, tma.heads), tma.units(), rows.splits, 0),
        DecodeKernel::Mma(mma, tiles) => {
            let rows = RowSplits::for_device((mma.heads, mma.shared_bytes()), layout, batch, len, properties);
            meta.extend(tiles.table.iter().map(|&w| w as i32));
            (row_cubes(rows, mma.heads), mma.units(), rows.splits, rows.chunk)
        }
        DecodeKernel::Scalar => {
            let base = base_chunk(batch, kv_heads, len).min(geo.max_chunk as usize);
            let schedule = DecodeSchedule::plan(layout, len, base, longest_split(base, geo.max_chunk));
            meta.extend(schedule.table());
            let cubes = CubeCount::Static(schedule.tasks.len() as u32, batch as u32, 1);
            (cubes, UNITS, schedule.splits, schedule.splits)
        }
    };
    let words = meta.len();
    let meta = int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::from_data(TensorData::new(meta, [words]), &device));
    let reduced_q = dense_output::<R, f32>(&q, batch * heads * layout.key_width());
    let widest_rank = (0..kv_heads).map(|h| layout.key_columns(h).len()).max().unwrap_or(0).max(1) as u32;
    // SAFETY: one cube per (KV head, sequence, column tile) of the grid; it reads the group's
    // `head_dim` channels of `q` and the head's key columns (`offset + j`, `j < rank`, within
    // `key_width`) of `basis`, and writes those of `reduced_q`, sized `batch · heads · key_width` above.
    // Bounds validated on CUDA: `burn_kvcompress::kernels`.
    unsafe {
        rotate_queries_kernel::launch_unchecked(
            &client,
            CubeCount::Static(kv_heads as u32, batch as u32, widest_rank.div_ceil(ROTATE_COLUMNS)),
            CubeDim::new_1d(UNITS),
            q.into_array_arg(),
            float_arg(&basis).into_array_arg(),
            meta.clone().into_array_arg(),
            reduced_q.clone().into_array_arg(),
            options.scale,
            geo.group,
            geo.head_dim,
            UNITS,
        )
    };
    let partials = SplitPartials::allocate(&reduced_q, batch * heads, splits, d);
    // Both kernels take the same arguments; they differ in their element type, cube size and
    // compile-time geometry.
    macro_rules! launch {
        ($kernel:expr, $geo:expr) => {
            $kernel(
                &client,
                cubes,
                CubeDim::new_1d(units),
                vector as usize,
                reduced_q.into_array_arg(),
                float_arg(&keys).into_array_arg(),
                float_arg(&values).into_array_arg(),
                meta.into_array_arg(),
                partials.output.clone().into_array_arg(),
                partials.max.clone().into_array_arg(),
                partials.sum.clone().into_array_arg(),
                kv_heads as u32,
                len as u32,
                split_word as u32,
                options.window.unwrap_or(0) as u32,
                layout.key_width() as u32,
                layout.value_width() as u32,
                $geo,
            )
        };
    }
    // SAFETY: scalar kernel: every task of the schedule covers slots `first..first + count`
    // within `len` (the schedule's invariant, tested in `schedule.rs`) of one head whose columns
    // lie within the caches' widths (`HeadLayout`); loads are whole vectors within a head's
    // columns (`load_vector`), clamped to the task's slots and to the head's last vector (every
    // rank is at least one vector: a multiple of it, and not 0, as callers check), the score
    // buffer holds `group · max_chunk` and the scratch buffer a round's partials (`score_lanes`)
    // or `units · (block + 1)` sums. Tensor cores: every split's slots `split · chunk ..` (at
    // most `chunk`) lie within `len` (`RowSplits`: no split is empty), copies are whole vectors
    // of a group's columns (within the row widths) clamped to the split's last slot, into its
    // head's tile of `32 × stride` elements, `stride` past the columns the products read
    // (`key_stride`, `value_stride`), the tiles of a cube within a buffer (`StagedTiles`). Both:
    // the partials hold `heads · splits` entries. Bounds validated on CUDA:
    // `burn_kvcompress::kernels`.
    unsafe {
        match (kernel, keys.dtype()) {
            (DecodeKernel::Tma(tma, _), _) => {
                // SAFETY: every split has a round (`RowSplits`: at most `⌈len / 32⌉` splits), whose
                // slots past `len` are masked; the TMA lands whole boxes (rows past the caches and
                // columns past their widths as zeros) into the two stages, and the products read
                // within the stages and the guard block after them (`TmaGeometry`).
                let (key_width, value_width) = (layout.key_width(), layout.value_width());
                let landed = |cache: &Tensor<CubeF32<R, BT>, 3>, width: usize| {
                    landed_rows(float_arg(&cache.clone().reshape([batch * len, width])))
                };
                tma_decode_kernel::launch_unchecked::<f16, R>(
                    &client,
                    cubes,
                    CubeDim::new_1d(units),
                    reduced_q.into_array_arg(),
                    landed(&keys, key_width),
                    landed(&values, value_width),
                    meta.into_array_arg(),
                    partials.output.clone().into_array_arg(),
                    partials.max.clone().into_array_arg(),
                    partials.sum.clone().into_array_arg(),
                    kv_heads as u32,
                    len as u32,
                    options.window.unwrap_or(0) as u32,
                    key_width as u32,
                    tma,
                )
            }
            (DecodeKernel::Mma(mma, _), _) => launch!(mma_decode_kernel::launch_unchecked::<f16, R>, mma),
            (DecodeKernel::Scalar, DType::F16) => launch!(decode_kernel::launch_unchecked::<f16, R>, geo),
            (DecodeKernel::Scalar, _) => launch!(decode_kernel::launch_unchecked::<f32, R>, geo),
        }
    };
    let out = merge_partials(partials);
    Tensor::<CubeF32<R, BT>, 1>::from_primitive(TensorPrimitive::Float(out)).reshape([batch, heads, 1, d])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_grow_with_the_work_and_the_shared_memory_fits_a_cube() {
        assert_eq!(base_chunk(1, 3, 100), 64);
        assert_eq!(base_chunk(1, 8, 32768), 256);
        assert_eq!(base_chunk(1, 8, 8192), 64);
        assert_eq!(base_chunk(8, 8, 65536), 512);
        let geo = decode_geometry(4, 128);
        assert_eq!((longest_split(256, geo.max_chunk), longest_split(512, geo.max_chunk)), (512, 1024));
        assert_eq!(longest_split(512, decode_geometry(8, 128).max_chunk), 512, "8 heads' scores fill the buffer");
        assert!(!supports(32, 128) && !supports(4, 512) && !supports(32, 16));
        // Llama-3 and Mistral (4 × 128), SmolLM2 (3 × 64), Llama-3-70B (8 × 128), Gemma (1 × 256).
        for (group, head_dim) in [(1, 256), (3, 64), (4, 128), (8, 128), (16, 64), (16, 128), (16, 16)] {
            let geo = decode_geometry(group, head_dim);
            assert!(supports(group, head_dim), "group {group}, head_dim {head_dim}: {} bytes", geo.shared_bytes());
            assert!(geo.scratch_fits() && geo.group * geo.block <= 32 && geo.block.is_power_of_two());
        }
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
