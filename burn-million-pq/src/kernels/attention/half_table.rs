//! What the tensor-core decode kernel ([`mma_decode_kernel`](super::mma_kernel)) copies into
//! shared memory, prepared in f16 by two small kernels: the step's lookup table (two query
//! heads per 32-bit word) and the value codebooks (two channels per word), each laid out so that
//! the kernel's lanes, looking up distinct subspaces, hit distinct banks whatever their codes.
//!
//! The lookup table: `[centroid, key_columns]` entries, one column per code of a slot's code
//! words, code `i` of word `w` (subspace `w · per_word + i`) in column `w + words · i`
//! ([`HalfTables::key_columns`]). An entry holds every query head, its planes side by side
//! ([`HalfTables::table_entry_words`]), so that a lookup is one load. A lane holding word `w`
//! finds its codes' entries at `c · key_columns + w + words · i`: one base per word (its column),
//! a code's centroid and a compile-time offset; lanes on distinct words `w` of 16 (a half warp's
//! 8-byte loads) fall on distinct pairs of banks for every code `i` when `words` is a multiple
//! of 16.
//!
//! The value codebooks: a plane per pair of channels, of rows of 32 subspaces, each row
//! `[centroid, 32]` words followed by one word of padding ([`ROW_SKEW`]), subspace `s`'s word for
//! centroid `c` at `(s / 32) · row_words + c · 32 + s % 32`. Within a row a column is a bank, so
//! lanes on distinct subspaces of one row fall on distinct banks, and the padding shifts each row
//! by one word, so that subspaces `s` and `s + 32` fall on neighbouring banks rather than the
//! same one. The shift is additive: the decode kernel folds it, with the column of a code word's
//! first subspace, into one base per word ([`word_base`]), and adds a code's centroid and
//! position to it.

use cubecl::prelude::*;

use super::table::DecodeShape;

/// Subspaces per row of a value codebook plane: a bank each.
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
    /// Codes per 32-bit code word.
    pub fn per_word(&self) -> u32 {
        32 / self.shape.pq.nbits
    }

    /// Columns of the lookup table: one per code of a slot's `words` code words (`words ·
    /// per_word`; those past the last subspace hold zeros).
    pub fn key_columns(&self) -> u32 {
        self.shape.pq.words * self.per_word()
    }

    /// Entries of one stream's lookup table: `centroids · key_columns`.
    pub fn table_entries(&self) -> u32 {
        self.shape.pq.centroids * self.key_columns()
    }

    /// Tiles of `TILE_COLUMNS` columns of the lookup table.
    pub fn column_tiles(&self) -> u32 {
        self.key_columns().div_ceil(TILE_COLUMNS)
    }

    /// Rows of 32 subspaces of a value codebook plane: `⌈subspaces / 32⌉`.
    pub fn rows(&self) -> u32 {
        self.shape.pq.subspaces.div_ceil(PLANE_COLUMNS)
    }

    /// Entries of one row of a plane: `centroids · 32` and the padding.
    pub fn row_words(&self) -> u32 {
        self.shape.pq.centroids * PLANE_COLUMNS + ROW_SKEW
    }

    /// Words of one plane of the value codebooks: `rows · row_words`.
    pub fn plane_words(&self) -> u32 {
        self.rows() * self.row_words()
    }

    /// Tiles of 32 centroids (`TILE_CENTROIDS`) of a row.
    pub fn centroid_tiles(&self) -> u32 {
        self.shape.pq.centroids.div_ceil(TILE_CENTROIDS)
    }

    /// Cubes of `half_table_kernel` per stream: one per (plane of an entry, tile of 32
    /// columns, tile of 32 centroids).
    pub fn table_cubes(&self) -> u32 {
        self.table_entry_words() * self.column_tiles() * self.centroid_tiles()
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

    /// Words of one stream's lookup table: `table_entries` entries.
    pub fn table_words(&self) -> u32 {
        self.table_entry_words() * self.table_entries()
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

/// The subspace of column `column` of the lookup table (the inverse of its layout): code
/// `column / words` of code word `column % words`; past the last subspace for unused columns.
#[cube]
pub fn key_subspace(column: u32, #[comptime] tables: HalfTables) -> u32 {
    let words = tables.shape.pq.words;
    (column % words) * comptime!(tables.per_word()) + column / words
}

/// The entry of the lookup table for centroid `c` of code `i` of code word `w`: `c · key_columns
/// + w + words · i` (the column's offset `words · i` a compile-time constant).
#[cube]
pub fn key_entry(w: u32, c: u32, #[comptime] i: u32, #[comptime] tables: HalfTables) -> u32 {
    (c * comptime!(tables.key_columns()) + w) + comptime!(i * tables.shape.pq.words)
}

/// Centroids of one cube of [`half_table_kernel`]: a tile of 32 centroids by 32 columns.
pub const TILE_CENTROIDS: u32 = 32;
/// Columns of the lookup table in one cube of [`half_table_kernel`].
pub const TILE_COLUMNS: u32 = 32;

/// Words between the centroids of [`half_table_kernel`]'s staged tile: 32 columns, padded by one
/// so that a column's 32 centroids fall in distinct banks.
const TILE_LD: u32 = TILE_COLUMNS + 1;

/// The f16 lookup table of each stream (one cube row per stream = batch row · KV heads + KV
/// head), `[centroid, key_columns]` entries of [`HalfTables::table_entry_words`] words (see the
/// module documentation): word `p` of entry `(c, column)` holds `scale · <q_g^(s), C_K^s[c]>`
/// for query heads `g = 2p, 2p + 1` and subspace `s = key_subspace(column)` (0 past the group
/// and for unused columns). A cube computes one word of the entries of a tile of 32 centroids by
/// 32 columns, consecutive units on consecutive centroids (the codebook reads are contiguous),
/// stages it in shared memory, and writes it out a centroid's 32 columns at a time.
///
/// - `q`: `[batch, kv_heads · group, head_dim]`; `books`: `[groups, subspaces, centroids,
///   sub_dim]` (`groups` is 1, or `kv_heads` when `per_head_books` is 1);
/// - `table`: `[streams, table_words]` words of two f16;
/// - cube `(x, stream)`: word `x / (column_tiles · tiles)` of the entries, columns `32 · (x /
///   tiles % column_tiles) ..`, centroids `32 · (x % tiles) ..`.
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
    let column_tiles = comptime!(tables.column_tiles());
    let tiles = comptime!(tables.centroid_tiles());
    let stream = CUBE_POS_Y;
    let plane = CUBE_POS_X / (column_tiles * tiles);
    let first_column = (CUBE_POS_X / tiles % column_tiles) * TILE_COLUMNS;
    let first_centroid = (CUBE_POS_X % tiles) * TILE_CENTROIDS;
    let ds = shape.pq.sub_dim;
    let group_books = (stream % kv_heads) * per_head_books * shape.pq.subspaces;
    let mut staged = SharedMemory::<Vector<E, N>>::new(comptime!((TILE_CENTROIDS * TILE_LD) as usize));
    #[unroll]
    for k in 0..comptime!((TILE_CENTROIDS * TILE_COLUMNS).div_ceil(units)) {
        let e = UNIT_POS + k * units;
        let (local_column, local) = (e / TILE_CENTROIDS, e % TILE_CENTROIDS);
        let column = first_column + local_column;
        let (s, c) = (key_subspace(column, tables), first_centroid + local);
        let mut word = Vector::<E, N>::new(E::cast_from(0.0f32));
        #[unroll]
        for h in 0..2u32 {
            let g = 2 * plane + h;
            let used = column < comptime!(tables.key_columns()) && s < shape.pq.subspaces;
            if local_column < TILE_COLUMNS && g < shape.group && used && c < centroids {
                let q_at = (stream * shape.group + g) * shape.pq.head_dim + s * ds;
                let book = ((group_books + s) * centroids + c) * ds;
                let mut dot = 0.0f32;
                for x in 0..ds {
                    dot += q[(q_at + x) as usize] * books[(book + x) as usize];
                }
                word[h as usize] = E::cast_from(dot * scale);
            }
        }
        if local_column < TILE_COLUMNS {
            staged[(local * TILE_LD + local_column) as usize] = word;
        }
    }
    sync_cube();
    let entry_words = comptime!(tables.table_entry_words());
    let table_at = stream * tables.table_words() + plane;
    #[unroll]
    for k in 0..comptime!((TILE_CENTROIDS * TILE_COLUMNS).div_ceil(units)) {
        let e = UNIT_POS + k * units;
        let (local, local_column) = (e / TILE_COLUMNS, e % TILE_COLUMNS);
        let (c, column) = (first_centroid + local, first_column + local_column);
        if local < TILE_CENTROIDS && c < centroids && column < comptime!(tables.key_columns()) {
            let entry = c * comptime!(tables.key_columns()) + column;
            table[(table_at + entry * entry_words) as usize] = staged[(local * TILE_LD + local_column) as usize];
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
    use super::{key_entry, key_subspace, word_base, DecodeShape, HalfTables, PLANE_COLUMNS};
    use crate::kernels::PqShape;

    /// The benchmark's tables: 64 subspaces of 2 channels, 8-bit codes (4 per word), head dim
    /// 128, GQA 4.
    pub(in crate::kernels::attention) fn benchmark_tables() -> HalfTables {
        let pq = PqShape { head_dim: 128, subspaces: 64, sub_dim: 2, centroids: 256, nbits: 8, words: 16 };
        HalfTables { shape: DecodeShape { pq, group: 4 } }
    }

    /// The word of subspace `s`'s centroid `c` within a value codebook plane of
    /// [`benchmark_tables`], by the kernels' own [`word_base`].
    fn book_word_host(s: u32, c: u32) -> u32 {
        word_base(s / 4, 4, benchmark_tables()) + c * PLANE_COLUMNS + s % 4
    }

    /// The most lanes of 32, looking up subspaces `s(l)` of a value codebook plane with arbitrary
    /// codes, on one bank.
    pub(in crate::kernels::attention) fn lanes_per_bank(s: impl Fn(u32) -> u32) -> usize {
        let mut lanes = [0usize; 32];
        for l in 0..32u32 {
            lanes[(book_word_host(s(l), (l * 37 + 11) % 256) % 32) as usize] += 1;
        }
        lanes.into_iter().max().unwrap_or(0)
    }

    #[test]
    fn a_key_column_holds_its_codes_subspace() {
        let pq = |subspaces, nbits: u32, words| PqShape {
            head_dim: 2 * subspaces,
            subspaces,
            sub_dim: 2,
            centroids: 1 << nbits,
            nbits,
            words,
        };
        for tables in [
            benchmark_tables(),
            HalfTables { shape: DecodeShape { pq: pq(30, 8, 8), group: 3 } },
            HalfTables { shape: DecodeShape { pq: pq(40, 4, 5), group: 1 } },
        ] {
            let (words, per_word, columns) = (tables.shape.pq.words, tables.per_word(), tables.key_columns());
            let mut seen = vec![0u32; (columns * tables.shape.pq.centroids) as usize];
            for w in 0..words {
                for i in 0..per_word {
                    let column = key_entry(w, 0, i, tables);
                    assert_eq!(key_subspace(column, tables), w * per_word + i, "word {w}, code {i}");
                    for c in 0..tables.shape.pq.centroids {
                        seen[key_entry(w, c, i, tables) as usize] += 1;
                    }
                }
            }
            assert_eq!(seen, vec![1; seen.len()], "every entry once: {tables:?}");
        }
    }
}
