//! The tensor-core decode kernel's shapes fixed at compile time ([`MmaGeometry`]), the sizes
//! derived from them (shared memory, value tiles), and how a step chooses them: which shapes the
//! kernel supports, and how many warps a cube holds.

use burn_kvcompress::kernels::warp_mma::{CHANNEL_BLOCK, MMA_DEPTH, WARP, WARP_SHARED_BYTES};

use super::{half_table::HalfTables, table::DecodeShape};

/// Elements of a 32-bit word of the tables and tiles (two f16).
pub const WORD_ELEMENTS: u32 = 2;
/// The most channels of a value tile: one block.
pub const TILE_CHANNELS: u32 = CHANNEL_BLOCK;
/// Bytes of the prologue copies' barrier.
const BARRIER_BYTES: u32 = 8;
/// The most warps of one cube.
const MAX_WARPS: u32 = 16;
/// The most channels of a head (4 blocks of value sums per warp).
const MAX_HEAD_DIM: u32 = 128;
/// The most query heads per KV head (one product's `n`).
const MAX_GROUP: u32 = 8;

/// The tensor-core kernel's compile-time shapes for `shape` on a device whose cubes may use
/// `shared_limit` bytes of shared memory: as many warps per cube (at most `MAX_WARPS`) as the
/// shared memory holds beside the tables. `None` where the shapes do not fit it: more than 8
/// query heads per KV head or 128 channels, a head dimension not a multiple of 4, or past 32
/// channels not a multiple of 32; an odd number of channels per subspace; codes that do not
/// divide a 32-bit word or have more than 8 bits; parts of 32 channels whose codes are not an
/// even number of whole words; or tables that leave no room for one warp. (Whether the device
/// has the tensor cores is for `select.rs` to ask.)
pub fn mma_geometry(shape: DecodeShape, shared_limit: usize) -> Option<MmaGeometry> {
    let pq = shape.pq;
    let tables = HalfTables { shape };
    let one = MmaGeometry { tables, warps: 1 };
    let parts = one.channel_parts();
    let fits = shape.group <= MAX_GROUP
        && pq.head_dim <= MAX_HEAD_DIM
        && pq.head_dim.is_multiple_of(4)
        && (parts == 1 || pq.head_dim.is_multiple_of(TILE_CHANNELS))
        && pq.sub_dim.is_multiple_of(2)
        && 32 % pq.nbits == 0
        && pq.nbits <= 8
        && pq.words.is_multiple_of(2 * parts)
        && (parts == 1 || one.part_words() * one.per_word() * pq.sub_dim == TILE_CHANNELS);
    if !fits {
        return None;
    }
    (1..=MAX_WARPS)
        .rev()
        .map(|warps| MmaGeometry { tables, warps })
        .find(|geo| geo.shared_bytes() as usize <= shared_limit)
}

/// The tensor-core kernel's shapes fixed at compile time (one compiled kernel per model geometry,
/// configuration and cube size).
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
