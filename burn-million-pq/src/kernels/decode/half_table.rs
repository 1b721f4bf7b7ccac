//! What the tensor-core decode kernel ([`mma_decode_kernel`](super::mma_kernel)) copies into
//! shared memory, prepared in f16 by two small kernels: the step's lookup table (two query
//! heads per 32-bit word) and the value codebooks (two channels per word), both laid out so that
//! 32 lanes looking up 32 distinct subspaces hit 32 distinct banks whatever their codes.
//!
//! The layout: a plane of rows of 32 subspaces, each row `[centroid, 32]` entries followed by one
//! entry of padding ([`ROW_SKEW`]), subspace `s`'s entry for centroid `c` at `(s / 32) ·
//! row_words + c · 32 + s % 32`. An entry of the value codebooks is one word (a plane per pair of
//! channels); an entry of the lookup table holds every query head, its planes side by side
//! ([`HalfTables::table_entry_words`]), so that a lookup is one load. Within a row a column is a
//! bank (a pair of banks for 8-byte entries, per half warp), so lanes on distinct subspaces of
//! one row fall on distinct banks, and the padding shifts each row by one entry, so that
//! subspaces `s` and `s + 32` fall on neighbouring banks rather than the same one. The shift is
//! additive: the decode kernel folds it, with the column of a code word's first subspace, into
//! one base per word, and adds a code's centroid and position to it.

use cubecl::prelude::*;

use super::table::DecodeShape;

/// Subspaces per row of a plane: a bank each.
pub const PLANE_COLUMNS: u32 = 32;
/// Words of padding after each row of a plane: one bank of shift from one row to the next.
pub const ROW_SKEW: u32 = 1;

/// Compile-time shapes of the tensor-core decode step's f16 tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HalfTables {
    /// The step's shapes.
    pub shape: DecodeShape,
}

impl HalfTables {
    /// Rows of 32 subspaces of a plane: `⌈subspaces / 32⌉`.
    pub fn rows(&self) -> u32 {
        self.shape.pq.subspaces.div_ceil(PLANE_COLUMNS)
    }

    /// Entries of one row of a plane: `centroids · 32` and the padding.
    pub fn row_words(&self) -> u32 {
        self.shape.pq.centroids * PLANE_COLUMNS + ROW_SKEW
    }

    /// Entries of one plane (words of a plane of the value codebooks): `rows · row_words`.
    pub fn plane_words(&self) -> u32 {
        self.rows() * self.row_words()
    }

    /// Tiles of 32 centroids ([`TILE_CENTROIDS`]) of a row.
    pub fn centroid_tiles(&self) -> u32 {
        self.shape.pq.centroids.div_ceil(TILE_CENTROIDS)
    }

    /// Cubes of [`half_table_kernel`] per stream: one per (plane of an entry, row, tile of 32
    /// centroids).
    pub fn table_cubes(&self) -> u32 {
        self.table_entry_words() * self.rows() * self.centroid_tiles()
    }

    /// Planes of the lookup table: one per pair of query heads.
    pub fn table_planes(&self) -> u32 {
        self.shape.group.div_ceil(2)
    }

    /// Planes of a value codebook: one per pair of a subspace's channels.
    pub fn book_planes(&self) -> u32 {
        self.shape.pq.sub_dim / 2
    }

    /// Words of one entry of the lookup table: its planes side by side, rounded up to a power of
    /// two (a padding plane holds zeros), so that a lookup is one load of every query head.
    pub fn table_entry_words(&self) -> u32 {
        self.table_planes().next_power_of_two()
    }

    /// f16 values of one entry of the lookup table.
    pub fn table_entry_elements(&self) -> u32 {
        2 * self.table_entry_words()
    }

    /// Words of one stream's lookup table: `plane_words` entries.
    pub fn table_words(&self) -> u32 {
        self.table_entry_words() * self.plane_words()
    }

    /// Words of one group's value codebooks.
    pub fn book_words(&self) -> u32 {
        self.book_planes() * self.plane_words()
    }
}

/// Where the subspaces of code word `w` (subspaces `w · per_word ..`, codes of `nbits` dividing
/// 32, so a word's `32 / nbits` subspaces share a row) lie in a plane: the word of its code `i`'s
/// entry for centroid `c` is `word_base(w) + c · 32 + i`.
#[cube]
pub fn word_base(w: u32, #[comptime] per_word: u32, #[comptime] tables: HalfTables) -> u32 {
    let words_per_row = comptime!(PLANE_COLUMNS / per_word);
    (w / words_per_row) * comptime!(tables.row_words()) + (w % words_per_row) * per_word
}

/// The subspace and centroid of word `r` of a plane (the inverse of the layout); the subspace
/// may lie past the last one (a row's unused columns) and the centroid past the last one (a
/// row's padding).
#[cube]
fn word_entry(r: u32, #[comptime] tables: HalfTables) -> (u32, u32) {
    let row_words = comptime!(tables.row_words());
    let (row, within) = (r / row_words, r % row_words);
    (row * PLANE_COLUMNS + within % PLANE_COLUMNS, within / PLANE_COLUMNS)
}

/// Centroids of one cube of [`half_table_kernel`]: a tile of 32 centroids by a row's 32 columns.
pub const TILE_CENTROIDS: u32 = 32;

/// Words between the centroids of [`half_table_kernel`]'s staged tile: 32 columns, padded by one
/// so that a column's 32 centroids fall in distinct banks.
const TILE_LD: u32 = PLANE_COLUMNS + 1;

/// The f16 lookup table of each stream (one cube row per stream = batch row · KV heads + KV
/// head), laid out as a plane of entries of [`HalfTables::table_entry_words`] words: word `p` of
/// entry `(s, c)` holds `scale · <q_g^(s), C_K^s[c]>` for query heads `g = 2p, 2p + 1` (0 past the
/// group and for unused columns; the rows' padding is not written, and no lookup reads it). A
/// cube computes one word of the entries of a tile of 32 centroids of one row's 32 subspaces,
/// consecutive units on consecutive centroids (the codebook reads are contiguous), stages it in
/// shared memory, and writes it out a centroid's 32 columns at a time.
///
/// - `q`: `[batch, kv_heads · group, head_dim]`; `books`: `[groups, subspaces, centroids,
///   sub_dim]` (`groups` is 1, or `kv_heads` when `per_head_books` is 1);
/// - `table`: `[streams, table_words]` words of two f16;
/// - cube `(x, stream)`: word `x / (rows · tiles)` of the entries, row `x / tiles % rows`,
///   centroids `32 · (x % tiles) ..`.
#[cube(launch_unchecked)]
pub fn half_table_kernel<E: Float, N: Size>(
    q: &Array<f32>,
    books: &Array<f32>,
    table: &mut Array<Vector<E, N>>,
    kv_heads: u32,
    scale: f32,
    per_head_books: u32,
    #[comptime] tables: HalfTables,
    #[comptime] units: u32,
) {
    let shape = tables.shape;
    let centroids = shape.pq.centroids;
    let rows = comptime!(tables.rows());
    let tiles = comptime!(tables.centroid_tiles());
    let stream = CUBE_POS_Y;
    let plane = CUBE_POS_X / (rows * tiles);
    let row = CUBE_POS_X / tiles % rows;
    let first_centroid = (CUBE_POS_X % tiles) * TILE_CENTROIDS;
    let ds = shape.pq.sub_dim;
    let group_books = (stream % kv_heads) * per_head_books * shape.pq.subspaces;
    let mut staged = SharedMemory::<Vector<E, N>>::new(comptime!((TILE_CENTROIDS * TILE_LD) as usize));
    #[unroll]
    for k in 0..comptime!((TILE_CENTROIDS * PLANE_COLUMNS).div_ceil(units)) {
        let e = UNIT_POS + k * units;
        let (column, local) = (e / TILE_CENTROIDS, e % TILE_CENTROIDS);
        let (s, c) = (row * PLANE_COLUMNS + column, first_centroid + local);
        let mut word = Vector::<E, N>::new(E::cast_from(0.0f32));
        #[unroll]
        for h in 0..2u32 {
            let g = 2 * plane + h;
            if column < PLANE_COLUMNS && g < shape.group && s < shape.pq.subspaces && c < centroids {
                let q_at = (stream * shape.group + g) * shape.pq.head_dim + s * ds;
                let book = ((group_books + s) * centroids + c) * ds;
                let mut dot = 0.0f32;
                for x in 0..ds {
                    dot += q[(q_at + x) as usize] * books[(book + x) as usize];
                }
                word[h as usize] = E::cast_from(dot * scale);
            }
        }
        if column < PLANE_COLUMNS {
            staged[(local * TILE_LD + column) as usize] = word;
        }
    }
    sync_cube();
    let entry_words = comptime!(tables.table_entry_words());
    let table_at = stream * tables.table_words() + plane;
    #[unroll]
    for k in 0..comptime!((TILE_CENTROIDS * PLANE_COLUMNS).div_ceil(units)) {
        let e = UNIT_POS + k * units;
        let (local, column) = (e / PLANE_COLUMNS, e % PLANE_COLUMNS);
        let c = first_centroid + local;
        if local < TILE_CENTROIDS && c < centroids {
            let entry = row * comptime!(tables.row_words()) + c * PLANE_COLUMNS + column;
            table[(table_at + entry * entry_words) as usize] = staged[(local * TILE_LD + column) as usize];
        }
    }
}

/// The f16 value codebooks of each group of codebooks (one cube row per group, one unit per
/// word): word `(plane p, s, c)` holds channels `2p, 2p + 1` of `C_V^s[c]` (0 for unused
/// columns and the rows' padding).
///
/// - `books`: `[groups, subspaces, centroids, sub_dim]`; `half_books`: `[groups, book_words]`.
#[cube(launch_unchecked)]
pub fn half_books_kernel<E: Float, N: Size>(
    books: &Array<f32>,
    half_books: &mut Array<Vector<E, N>>,
    #[comptime] tables: HalfTables,
) {
    let shape = tables.shape;
    let group = CUBE_POS_Y;
    let e = CUBE_POS_X * CUBE_DIM + UNIT_POS;
    if e < tables.book_words() {
        let plane = e / tables.plane_words();
        let (s, c) = word_entry(e % tables.plane_words(), tables);
        let mut word = Vector::<E, N>::new(E::cast_from(0.0f32));
        if s < shape.pq.subspaces && c < shape.pq.centroids {
            let at = ((group * shape.pq.subspaces + s) * shape.pq.centroids + c) * shape.pq.sub_dim + 2 * plane;
            word[0] = E::cast_from(books[at as usize]);
            word[1] = E::cast_from(books[(at + 1) as usize]);
        }
        half_books[(group * tables.book_words() + e) as usize] = word;
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::{word_base, DecodeShape, HalfTables, PLANE_COLUMNS};
    use crate::kernels::PqShape;

    /// The benchmark's tables: 64 subspaces of 2 channels, 8-bit codes (4 per word), head dim
    /// 128, GQA 4.
    pub(in crate::kernels::decode) fn benchmark_tables() -> HalfTables {
        let pq = PqShape { head_dim: 128, subspaces: 64, sub_dim: 2, centroids: 256, nbits: 8, words: 16 };
        HalfTables { shape: DecodeShape { pq, group: 4 } }
    }

    /// The word of subspace `s`'s entry for centroid `c` within a plane of
    /// [`benchmark_tables`], by the kernels' own [`word_base`].
    pub(in crate::kernels::decode) fn lane_word_host(s: u32, c: u32) -> u32 {
        word_base(s / 4, 4, benchmark_tables()) + c * PLANE_COLUMNS + s % 4
    }

    /// The most lanes of 32, looking up subspaces `s(l)` with arbitrary codes, on one bank.
    pub(in crate::kernels::decode) fn lanes_per_bank(s: impl Fn(u32) -> u32) -> usize {
        let mut lanes = [0usize; 32];
        for l in 0..32u32 {
            lanes[(lane_word_host(s(l), (l * 37 + 11) % 256) % 32) as usize] += 1;
        }
        lanes.into_iter().max().unwrap_or(0)
    }
}
