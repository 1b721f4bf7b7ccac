//! The scalar decode kernel's shapes fixed at compile time, and the sizes derived from them.

use super::table::DecodeShape;

/// Shapes fixed at compile time (one compiled kernel per model geometry, configuration and split
/// length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
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

impl DecodeGeometry {
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
