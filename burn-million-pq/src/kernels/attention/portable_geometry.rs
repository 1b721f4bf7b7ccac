//! The portable decode kernel's shapes fixed at compile time ([`PortableGeometry`]), the sizes
//! derived from them, and how a step chooses them: which shapes the kernel supports, and how long
//! its splits are.

use super::table::DecodeShape;

/// Units per cube.
pub(super) const UNITS: u32 = 256;
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

/// The portable kernel's geometry for `shape` and splits of `chunk` slots, all blocks within
/// `SCRATCH_FLOATS`:
/// - as many subspaces per table block as fit (at most `MAX_BLOCK_SUBSPACES`, whole code words
///   or a divisor of one; 0 when one subspace's table entries do not fit);
/// - value spans of the subspaces of a code word (fewer where their accumulators would pass
///   `SPAN_REGISTERS`), as many whole spans per value block as their codebooks fit (0 when one
///   codebook does not fit), and as many parts per span as the units allow and the parts' sums
///   fit.
pub fn portable_geometry(shape: DecodeShape, chunk: u32) -> PortableGeometry {
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
    PortableGeometry {
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

/// Whether the portable kernel handles `shape`: a subspace's table entries and its value codebook
/// each fit the scratch, the softmax's reductions run on 16 units per head, a value unit's
/// accumulators fit `MAX_VALUE_REGISTERS`, and the shortest split fits `SHARED_BYTES`.
pub fn portable_supports(shape: DecodeShape) -> bool {
    let geo = portable_geometry(shape, UNITS);
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
    while longest < MAX_CHUNK && portable_geometry(shape, longest * 2).shared_bytes() <= limit {
        longest *= 2;
    }
    ((batch * kv_heads * len / TARGET_CUBES).next_power_of_two() as u32).clamp(UNITS, longest)
}

/// The portable kernel's shapes fixed at compile time (one compiled kernel per model geometry,
/// configuration and split length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortableGeometry {
    /// The step's shapes.
    pub shape: DecodeShape,
    /// Slots per split, a multiple of `units`.
    pub chunk: u32,
    /// Units per cube.
    pub units: u32,
    /// Subspaces whose table entries a cube stages at once.
    pub block_subspaces: u32,
    /// Subspaces whose value codebooks a cube stages at once, a multiple of `value_span`.
    pub value_subspaces: u32,
    /// Consecutive subspaces of a value block one unit sums (its slots' `p` are read once for
    /// them all).
    pub value_span: u32,
    /// Parts of a split whose value sums run on separate units (per span of a value block).
    pub value_parts: u32,
    /// Floats of the shared scratch buffer: a table block, a value block's codebooks, or the
    /// value parts' sums of a block.
    pub scratch_floats: u32,
}

impl PortableGeometry {
    /// Code words per slot a table block covers: a block is whole words, or part of one.
    pub fn block_words(&self) -> u32 {
        (self.block_subspaces / (32 / self.shape.pq.nbits)).max(1)
    }

    /// Floats of a table block each unit loads.
    pub fn table_fill(&self) -> u32 {
        (self.block_subspaces * self.shape.pq.centroids * self.shape.group).div_ceil(self.units)
    }

    /// Floats of one subspace's value codebook.
    pub fn book_floats(&self) -> u32 {
        self.shape.pq.centroids * self.shape.pq.sub_dim
    }

    /// Floats of a value block's codebooks each unit loads.
    pub fn value_fill(&self) -> u32 {
        (self.value_subspaces * self.book_floats()).div_ceil(self.units)
    }

    /// Slots whose value codes a unit loads at once.
    pub fn value_batch(&self) -> u32 {
        (8 / self.value_span).max(2)
    }

    /// Shared memory of one cube, in bytes: scratch, scores, and per head its max, its mass and
    /// the two reductions' 16 lanes.
    pub fn shared_bytes(&self) -> u32 {
        4 * (self.scratch_floats + self.shape.group * (self.chunk + 2 + 2 * 16))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CodebookScope, PqConfig};

    fn shape(subspaces: usize, nbits: u8, group: usize, head_dim: usize) -> DecodeShape {
        DecodeShape::of(&PqConfig { subspaces, nbits, scope: CodebookScope::Layer }, group, head_dim)
    }

    #[test]
    fn splits_grow_with_the_work_within_the_shared_budget() {
        let bench = shape(64, 8, 4, 128);
        assert!(portable_supports(bench));
        let geo = portable_geometry(bench, 256);
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
        let gqa8 = portable_geometry(shape(32, 8, 8, 64), 256);
        assert_eq!((gqa8.value_subspaces, gqa8.value_span, gqa8.value_parts), (8, 2, 32));
        let wide = portable_geometry(shape(16, 8, 4, 128), 256);
        assert_eq!((wide.value_subspaces, wide.value_span, wide.value_parts), (2, 1, 64));
        // 6-bit codes: 5 per word, spans of 4 (32 accumulators) straddle words.
        let six = portable_geometry(shape(32, 6, 4, 64), 256);
        assert_eq!((six.value_subspaces, six.value_span), (32, 4));
        // Blocks are whole words (6-bit codes: 5 per word), or a divisor of one.
        assert_eq!(portable_geometry(shape(16, 6, 3, 32), 256).block_subspaces, 15);
        assert_eq!(portable_geometry(shape(32, 8, 8, 64), 256).block_subspaces, 2);
        assert_eq!(portable_geometry(shape(32, 6, 8, 64), 256).block_subspaces, 5);
        assert_eq!(portable_geometry(shape(3, 4, 1, 12), 256).block_subspaces, 2);
        for chunk in [256, 512, 1024, 2048] {
            for s in [bench, narrow, shape(32, 8, 8, 64)] {
                let geo = portable_geometry(s, chunk);
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
        assert!(!portable_supports(shape(8, 12, 1, 16)), "4096 centroids × 2 channels exceed the scratch");
        assert!(!portable_supports(shape(8, 12, 2, 8)), "4096 centroids × 2 heads exceed a table block");
        assert!(!portable_supports(shape(64, 8, 32, 128)), "the softmax needs 16 units per head");
        assert!(!portable_supports(shape(1, 4, 4, 128)), "128 channels per subspace × 4 heads of accumulators");
        // More subspaces than units: value blocks of 256 subspaces, one part each.
        assert!(portable_supports(shape(512, 1, 1, 512)));
        assert!(portable_supports(shape(8, 10, 1, 16)));
    }
}
