//! The tensor-core decode kernel's shapes fixed at compile time, and the sizes derived from them
//! (shared memory, value tiles).

use burn_kvcompress::kernels::warp_mma::{CHANNEL_BLOCK, MMA_DEPTH, WARP, WARP_SHARED_BYTES};

use super::half_table::HalfTables;

/// Elements of a 32-bit word of the tables and tiles (two f16).
pub const WORD_ELEMENTS: u32 = 2;
/// The most channels of a value tile: one block.
pub const TILE_CHANNELS: u32 = CHANNEL_BLOCK;
/// Bytes of the prologue copies' barrier.
const BARRIER_BYTES: u32 = 8;

/// Shapes fixed at compile time (one compiled kernel per model geometry, configuration and cube
/// size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MmaGeometry {
    /// The f16 tables' shapes (and the step's).
    pub tables: HalfTables,
    /// Warps per cube.
    pub warps: u32,
}

impl MmaGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        WARP * self.warps
    }

    /// Codes per 32-bit code word.
    pub fn per_word(&self) -> u32 {
        self.tables.per_word()
    }

    /// Channels of a value tile: two blocks of 32 (the head's channels rounded up to a block
    /// where fewer).
    pub fn tile_channels(&self) -> u32 {
        self.tables.shape.pq.head_dim.next_multiple_of(CHANNEL_BLOCK).min(TILE_CHANNELS)
    }

    /// Parts of a head's channels rebuilt one tile at a time.
    pub fn channel_parts(&self) -> u32 {
        self.tables.shape.pq.head_dim.div_ceil(TILE_CHANNELS)
    }

    /// Code words of one channel part.
    pub fn part_words(&self) -> u32 {
        self.tables.shape.pq.words / self.channel_parts()
    }

    /// Elements between the slots of a value tile: its channels plus 8 (16 bytes), so that a
    /// product's rows fall in distinct banks.
    pub fn tile_stride(&self) -> u32 {
        self.tile_channels() + 8
    }

    /// Words of one warp's value tile of 16 slots.
    pub fn tile_words(&self) -> u32 {
        MMA_DEPTH * self.tile_stride() / WORD_ELEMENTS
    }

    /// Bytes of shared memory one cube uses: the lookup table, the value codebooks, each warp's
    /// value tile, weights and scratch, and the barrier. (The recent window's scores read the
    /// queries from global memory: staging them would take the room of a twelfth warp at 64
    /// subspaces of 8 bits, head dim 128, GQA 4.)
    pub fn shared_bytes(&self) -> u32 {
        let words = self.tables.table_words() + self.tables.book_words() + self.warps * self.tile_words();
        4 * words + self.warps * WARP_SHARED_BYTES + BARRIER_BYTES
    }
}
