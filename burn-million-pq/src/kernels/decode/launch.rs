//! Launching the fused PQ decode kernel and its merge on a CubeCL backend.

use burn::tensor::{Int, Tensor};
use burn_cubecl::{cubecl::prelude::*, BoolElement, CubeRuntime};
use burn_kvcompress::{
    cache::AttendOptions,
    kernels::{dense_output, float_arg, int_arg, key_start_arg, merge_partials, CubeF32, SplitPartials},
};

use super::{
    kernel::decode_kernel,
    kernel_geometry::DecodeGeometry,
    mma_launch::{mma_decode_launch, mma_geometry, output_tensor},
    table::{table_kernel, DecodeShape},
};
use crate::{
    kernels::{PqShape, PqView},
    PqConfig,
};

/// Units per cube.
const UNITS: u32 = 256;
/// Floats of the scratch buffer a cube stages a lookup-table block or a value block's codebooks
/// in (16 KiB).
const SCRATCH_FLOATS: u32 = 4096;
/// The most subspaces of a table block (each unit's lookups of a block are unrolled).
const MAX_BLOCK_SUBSPACES: u32 = 16;
/// Shared memory a cube may use on every backend: 32 KiB on Mesa's software Vulkan.
const SHARED_BYTES: u32 = 32 * 1024;
/// The most shared memory a cube uses where the device offers more (longer splits, fewer table
/// and codebook stagings per slot), leaving room for three cubes on an SM of a large GPU.
const SHARED_CAP: u32 = 64 * 1024;
/// The longest split, in slots.
const MAX_CHUNK: u32 = 2048;
/// Cubes (splits × sequences × KV heads) a decode step aims for: about two per SM of a large
/// GPU (longer splits amortize a cube's table and codebook stagings over more slots).
const TARGET_CUBES: usize = 256;
/// The most floats a value-summing unit holds per subspace (`group · sub_dim` accumulators).
const MAX_VALUE_REGISTERS: u32 = 64;
/// The accumulators a value-summing unit's span of subspaces aims for.
const SPAN_REGISTERS: u32 = 32;

/// The decode step's compile-time shapes for `group` query heads per KV head of `head_dim`
/// channels.
pub fn pq_shape(config: &PqConfig, group: usize, head_dim: usize) -> DecodeShape {
    DecodeShape { pq: PqShape::of(config, head_dim), group: group as u32 }
}

/// The decode kernel's geometry for `shape` and splits of `chunk` slots, all blocks within
/// `SCRATCH_FLOATS`:
/// - as many subspaces per table block as fit (at most `MAX_BLOCK_SUBSPACES`, whole code words
///   or a divisor of one; 0 when one subspace's table entries do not fit);
/// - value spans of the subspaces of a code word (fewer where their accumulators would pass
///   `SPAN_REGISTERS`), as many whole spans per value block as their codebooks fit (0 when one
///   codebook does not fit), and as many parts per span as the units allow and the parts' sums
///   fit.
pub fn decode_geometry(shape: DecodeShape, chunk: u32) -> DecodeGeometry {
    let pq = shape.pq;
    let per_word = 32 / pq.nbits;
    let fits = (SCRATCH_FLOATS / (pq.centroids * shape.group)).min(pq.subspaces).min(MAX_BLOCK_SUBSPACES);
    let block_subspaces = if fits >= per_word {
        fits - fits % per_word
    } else {
        (1..=fits).rev().find(|b| per_word.is_multiple_of(*b)).unwrap_or(0)
    };
    let book_floats = pq.centroids * pq.sub_dim;
    let fits_books = (SCRATCH_FLOATS / book_floats).min(pq.subspaces);
    let accumulators = shape.group * pq.sub_dim;
    let value_span = per_word.min(fits_books).min(SPAN_REGISTERS / accumulators).max(1);
    let value_subspaces = (fits_books - fits_books % value_span).min(value_span * UNITS);
    let value_sums = shape.group * value_subspaces * pq.sub_dim;
    let value_parts = match value_subspaces {
        0 => 0,
        v => (UNITS / (v / value_span)).min(SCRATCH_FLOATS / value_sums),
    };
    let scratch_floats =
        (block_subspaces * pq.centroids * shape.group).max(value_subspaces * book_floats).max(value_parts * value_sums);
    DecodeGeometry {
        shape,
        chunk,
        units: UNITS,
        block_subspaces,
        value_subspaces,
        value_span,
        value_parts,
        scratch_floats,
    }
}

/// Whether the decode kernel handles `shape`: a subspace's table entries and its value codebook
/// each fit the scratch, the softmax's reductions run on 16 units per head, a value unit's
/// accumulators fit `MAX_VALUE_REGISTERS`, and the shortest split fits `SHARED_BYTES`.
pub fn supports(shape: DecodeShape) -> bool {
    let geo = decode_geometry(shape, UNITS);
    geo.block_subspaces >= 1
        && geo.value_parts >= 1
        && shape.group <= UNITS / 16
        && shape.group * shape.pq.sub_dim <= MAX_VALUE_REGISTERS
        && geo.shared_bytes() <= SHARED_BYTES
}

/// Slots per split for `batch` sequences of `len` slots and `kv_heads` heads on a device whose
/// cubes may use `shared_limit` bytes of shared memory: a power of two near `batch · kv_heads ·
/// len / TARGET_CUBES`, from `UNITS` to the longest whose cube fits `shared_limit` (capped at
/// `SHARED_CAP`) and `MAX_CHUNK`.
pub fn split_chunk(shape: DecodeShape, batch: usize, kv_heads: usize, len: usize, shared_limit: usize) -> u32 {
    let limit = (shared_limit as u32).clamp(SHARED_BYTES, SHARED_CAP);
    let mut longest = UNITS;
    while longest < MAX_CHUNK && decode_geometry(shape, longest * 2).shared_bytes() <= limit {
        longest *= 2;
    }
    ((batch * kv_heads * len / TARGET_CUBES).next_power_of_two() as u32).clamp(UNITS, longest)
}

/// PQ decode attention of `q: [batch, heads, 1, head_dim]` (the last slot) over `view`, shapes
/// already checked and within what the kernel [`supports`]; returns `[batch, heads, 1, head_dim]`.
/// Where the device and shapes allow ([`mma_geometry`]), the tensor-core kernel runs instead.
#[allow(unsafe_code)] // Unchecked kernel launches; each states why it is in bounds.
pub fn decode_launch<R: CubeRuntime, BT: BoolElement>(
    q: Tensor<CubeF32<R, BT>, 4>,
    view: &PqView<'_, CubeF32<R, BT>>,
    options: &AttendOptions,
    kv_heads: usize,
) -> Tensor<CubeF32<R, BT>, 4> {
    let [batch, heads, _, d] = q.dims();
    let device = q.device();
    let shape = pq_shape(&view.config, heads / kv_heads, d);
    let (coded, recent) = (view.coded(), view.recent_len());
    let q = float_arg(&q);
    let client = q.client.clone();
    let placeholder_int = || int_arg(&Tensor::<CubeF32<R, BT>, 1, Int>::zeros([1], &device));
    let (k_codes, v_codes) =
        view.codes.map_or_else(|| (placeholder_int(), placeholder_int()), |(k, v)| (int_arg(k), int_arg(v)));
    let (k_recent, v_recent) = view.recent.map_or_else(
        || (dense_output::<R, f32>(&q, 1), dense_output::<R, f32>(&q, 1)),
        |(k, v)| (float_arg(k), float_arg(v)),
    );
    let key_start = key_start_arg::<R, BT>(&options.key_start, &q);
    if let Some(geo) = mma_geometry(shape, client.properties()) {
        let codes = (k_codes, v_codes);
        let out = mma_decode_launch(q, view, options, (batch, kv_heads), codes, (k_recent, v_recent), key_start, geo);
        return output_tensor(out, [batch, heads, d]);
    }
    let shared_limit = client.properties().hardware.max_shared_memory_size;
    let chunk = split_chunk(shape, batch, kv_heads, coded + recent, shared_limit);
    let geo = decode_geometry(shape, chunk);
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
        decode_kernel::launch_unchecked(
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
    output_tensor(merge_partials(partials), [batch, heads, d])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CodebookScope;

    fn shape(subspaces: usize, nbits: u8, group: usize, head_dim: usize) -> DecodeShape {
        pq_shape(&PqConfig { subspaces, nbits, scope: CodebookScope::Layer }, group, head_dim)
    }

    #[test]
    fn splits_grow_with_the_work_within_the_shared_budget() {
        let bench = shape(64, 8, 4, 128);
        assert!(supports(bench));
        let geo = decode_geometry(bench, 256);
        assert_eq!((geo.block_subspaces, geo.value_subspaces, geo.value_span, geo.value_parts), (4, 8, 4, 64));
        let lavapipe = 32 * 1024;
        assert_eq!(split_chunk(bench, 1, 8, 4096, lavapipe), 256);
        assert_eq!(split_chunk(bench, 1, 8, 32768, lavapipe), 512);
        // 1024 slots of 4 heads' scores do not fit beside the scratch in 32 KiB; they do where
        // the device offers more (an H100 offers 227 KiB; the kernel takes at most 64).
        assert_eq!(split_chunk(bench, 8, 8, 32768, lavapipe), 512);
        assert_eq!(split_chunk(bench, 8, 8, 32768, 227 * 1024), 2048);
        let narrow = shape(8, 4, 1, 16);
        assert_eq!(split_chunk(narrow, 4, 8, 9001, lavapipe), 2048);
        // Value blocks: as many codebooks as fit the scratch, parts as the units and sums allow.
        let gqa8 = decode_geometry(shape(32, 8, 8, 64), 256);
        assert_eq!((gqa8.value_subspaces, gqa8.value_span, gqa8.value_parts), (8, 2, 32));
        let wide = decode_geometry(shape(16, 8, 4, 128), 256);
        assert_eq!((wide.value_subspaces, wide.value_span, wide.value_parts), (2, 1, 64));
        // 6-bit codes: 5 per word, spans of 4 (32 accumulators) straddle words.
        let six = decode_geometry(shape(32, 6, 4, 64), 256);
        assert_eq!((six.value_subspaces, six.value_span), (32, 4));
        // Blocks are whole words (6-bit codes: 5 per word), or a divisor of one.
        assert_eq!(decode_geometry(shape(16, 6, 3, 32), 256).block_subspaces, 15);
        assert_eq!(decode_geometry(shape(32, 8, 8, 64), 256).block_subspaces, 2);
        assert_eq!(decode_geometry(shape(32, 6, 8, 64), 256).block_subspaces, 5);
        assert_eq!(decode_geometry(shape(3, 4, 1, 12), 256).block_subspaces, 2);
        for chunk in [256, 512, 1024, 2048] {
            for s in [bench, narrow, shape(32, 8, 8, 64)] {
                let geo = decode_geometry(s, chunk);
                assert!(geo.scratch_floats <= SCRATCH_FLOATS);
                assert!(geo.value_parts * geo.value_subspaces / geo.value_span <= geo.units);
                assert_eq!(geo.value_subspaces % geo.value_span, 0);
                let fits = geo.shared_bytes() <= SHARED_BYTES;
                assert!(!fits || split_chunk(s, 64, 64, 1 << 20, lavapipe) >= chunk);
            }
        }
    }

    #[test]
    fn shapes_the_kernel_cannot_hold_are_refused() {
        assert!(!supports(shape(8, 12, 1, 16)), "4096 centroids × 2 channels exceed the scratch");
        assert!(!supports(shape(8, 12, 2, 8)), "4096 centroids × 2 heads exceed a table block");
        assert!(!supports(shape(64, 8, 32, 128)), "the softmax needs 16 units per head");
        assert!(!supports(shape(1, 4, 4, 128)), "128 channels per subspace × 4 heads of accumulators");
        // More subspaces than units: value blocks of 256 subspaces, one part each.
        assert!(supports(shape(512, 1, 1, 512)));
        assert!(supports(shape(8, 10, 1, 16)));
    }
}
