//! The compile-time shapes of the tensor-core decode kernel
//! ([`mma_decode_kernel`](super::mma_kernel::mma_decode_kernel)): its warp products' dimensions and
//! how a model geometry, a configuration and a cube size map onto them.

use burn_kvcompress::kernels::warp_mma::WARP;

use super::query_kernel::QueryShape;
use crate::kernels::copy_barriers::CopyGroups;

/// Rows of a warp product (query rows of the scores, channels of the outputs).
pub const PRODUCT_ROWS: u32 = 16;
/// Columns of a warp product (slots of the scores, heads of the outputs).
pub const PRODUCT_COLUMNS: u32 = 8;
/// Depth of a warp product (channels of the scores, slots of the outputs).
pub const PRODUCT_DEPTH: u32 = 32;
/// Bytes of the two barriers of a cube's asynchronous copies.
pub const COPY_BARRIER_BYTES: u32 = 16;
/// Blocks a warp holds in shared memory: one attended while the next lands.
pub const STAGES: u32 = 2;
/// Groups of a cube's warps that wait for their copies apart. One barrier for the whole cube
/// made every warp wait each round for the slowest; a barrier per warp costs a chain of 16
/// branches wherever a warp picks its barrier (no array of barriers in CubeCL). On an H100 at 32K
/// batch 8 (16 warps): 1 group 89.6/94.6 µs a step, 2: 91.1/91.2, 4: 86.5/89.2, 8: 91.1/92.6,
/// 16: 101.3/103.9 (`results/decode-hack-groups-h100.md`).
pub const COPY_GROUPS: u32 = 4;

/// Shapes fixed at compile time (one compiled kernel per model geometry, configuration and cube
/// size).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MmaGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head, a multiple of 32.
    pub head_dim: u32,
    /// Channels per key group, a multiple of 16.
    pub key_group: u32,
    /// Π, a multiple of 32.
    pub partition: u32,
    /// Warps per cube.
    pub warps: u32,
    /// Key metadata values per asynchronous copy: 1, 2 or 4, dividing the key groups per head and
    /// the metadata rows' pitch.
    pub meta_vector: u32,
}

impl MmaGeometry {
    /// Units per cube.
    pub fn units(&self) -> u32 {
        WARP * self.warps
    }

    /// Groups of warps that wait for their staged blocks together, one pair of copy barriers
    /// each (`copy_barriers`): `COPY_GROUPS`, or fewer where the warps do not divide.
    pub fn copy_groups(&self) -> CopyGroups {
        let groups = [COPY_GROUPS, 2, 1].into_iter().find(|&groups| self.warps.is_multiple_of(groups)).unwrap_or(1);
        CopyGroups { groups, units: self.units() / groups }
    }

    /// The group padded to a divisor of 8 or a multiple of 8, so that every lane of a product's
    /// row groups sees whole heads.
    pub fn padded_group(&self) -> u32 {
        if self.group <= PRODUCT_COLUMNS {
            self.group.next_power_of_two()
        } else {
            self.group.next_multiple_of(PRODUCT_COLUMNS)
        }
    }

    /// Whether the score product's padding rows give the key code sums: with at most 8 query rows
    /// (one row tile), row `8 + g` holds ones on the channels of row `g`'s key group, so the
    /// accumulator leaves each lane the sums of its own rows' key groups beside their dot products,
    /// and the kernel neither copies nor reads the cached key sums.
    pub fn key_sums_from_products(&self) -> bool {
        self.score_rows() <= PRODUCT_ROWS / 2
    }

    /// Whether the output product's padding columns give the value code sums: with a padded group
    /// below 8, columns `padded_group ..` hold ones, so every row's last column is its channel's
    /// code sum over the block, and the kernel neither copies nor reads the cached value sums.
    pub fn value_sums_from_products(&self) -> bool {
        self.padded_group() < PRODUCT_COLUMNS
    }

    /// The shape of the group's queries, which the kernel quantizes itself.
    pub fn queries(&self) -> QueryShape {
        QueryShape { group: self.group, head_dim: self.head_dim, key_group: self.key_group }
    }

    /// Key channel groups per head.
    pub fn parts(&self) -> u32 {
        self.head_dim / self.key_group
    }

    /// Query rows of the score product: one per (key group, padded head).
    pub fn score_rows(&self) -> u32 {
        self.parts() * self.padded_group()
    }

    /// Row tiles of the score product.
    pub fn score_tiles(&self) -> u32 {
        self.score_rows().div_ceil(PRODUCT_ROWS)
    }

    /// Query rows a lane holds in the score products: rows `8i + g` for lane `4g + t`.
    pub fn lane_rows(&self) -> u32 {
        2 * self.score_tiles()
    }

    /// Heads a lane holds scores of (`head_slot` `h` is head `g mod 8 + 8h`), and column tiles of
    /// the output product.
    pub fn lane_heads(&self) -> u32 {
        (self.padded_group() / PRODUCT_COLUMNS).max(1)
    }

    /// Exchanges that sum a head's key groups across lanes: lanes `4g + t` whose `g` agree modulo
    /// the padded group (none where it is 8 or more).
    pub fn lane_group_shuffles(&self) -> u32 {
        (PRODUCT_COLUMNS / self.padded_group().min(PRODUCT_COLUMNS)).ilog2()
    }

    /// Depth steps of the score product (channels / 32).
    pub fn channel_steps(&self) -> u32 {
        self.head_dim / PRODUCT_DEPTH
    }

    /// Packed words of one slot's key (16 codes each).
    pub fn key_words(&self) -> u32 {
        self.head_dim / 16
    }

    /// Packed words of one channel's values in a block.
    pub fn value_words(&self) -> u32 {
        self.partition / 16
    }

    /// Slot tiles (8 slots) of a block.
    pub fn slot_tiles(&self) -> u32 {
        self.partition / PRODUCT_COLUMNS
    }

    /// Depth steps of the output product (slots / 32).
    pub fn slot_steps(&self) -> u32 {
        self.partition / PRODUCT_DEPTH
    }

    /// Row tiles (16 channels) of the output product.
    pub fn channel_tiles(&self) -> u32 {
        self.head_dim / PRODUCT_ROWS
    }

    /// Output tiles whose corrections a lane shares out: with a padded group below 8 only the
    /// first `padded_group / 2` column pairs of an output product hold heads (lanes `4g + t`
    /// hold columns `2t, 2t + 1`), so the lanes of the other pairs take the real columns of the
    /// next tiles instead (`fold` tiles at a time; see [`Self::lane_columns`]). 1 where every
    /// pair is real or the tiles do not divide.
    pub fn value_fold(&self) -> u32 {
        let fold = 4 / self.padded_group().min(PRODUCT_COLUMNS).div_ceil(2);
        if self.channel_tiles().is_multiple_of(fold) {
            fold
        } else {
            1
        }
    }

    /// Column pairs of the output product whose corrections lanes take: `4 / value_fold`. Lane `4g
    /// + t` takes pair `t mod lane_columns` of tile `fold · q + t / lane_columns` for each `q`.
    pub fn lane_columns(&self) -> u32 {
        4 / self.value_fold()
    }

    /// Output values a lane accumulates: per tile it takes, head slot, and the two rows and two
    /// columns of its pair.
    pub fn lane_outputs(&self) -> u32 {
        self.channel_tiles() / self.value_fold() * self.lane_heads() * 4
    }

    /// 16-byte vectors between two staged slots' keys: their words and one of padding.
    pub fn key_stride(&self) -> u32 {
        self.key_words() / 4 + 1
    }

    /// 16-byte vectors of a warp's staged key words.
    pub fn warp_key_vectors(&self) -> u32 {
        self.partition * self.key_stride()
    }

    /// Key metadata words of a warp's staged block, per tensor (one per slot and key group).
    pub fn key_meta(&self) -> u32 {
        self.partition * self.parts()
    }

    /// Pairs of value words of a warp's staged block.
    pub fn warp_value_pairs(&self) -> u32 {
        self.head_dim * self.value_words() / 2
    }

    /// 16-byte copies per lane of a block's key words, and of its value words: `Π · head_dim /
    /// 16` words each, four per copy, over the warp's 32 lanes.
    pub fn word_copies(&self) -> u32 {
        self.partition * self.head_dim / (16 * 4 * WARP)
    }

    /// Key code sums of a warp's staged block: one per slot and key group, or none where the
    /// products give them ([`Self::key_sums_from_products`]).
    pub fn staged_key_sums(&self) -> u32 {
        if self.key_sums_from_products() {
            0
        } else {
            self.key_meta()
        }
    }

    /// Value code sums of a warp's staged block: one per channel, or none where the products give
    /// them ([`Self::value_sums_from_products`]).
    pub fn staged_value_sums(&self) -> u32 {
        if self.value_sums_from_products() {
            0
        } else {
            self.head_dim
        }
    }

    /// Bytes of shared memory a warp stages one block in (one region of `mma_stage`).
    pub fn block_stage_bytes(&self) -> u32 {
        let words = 16 * self.warp_key_vectors() + 8 * self.warp_value_pairs();
        let params = 4 * (self.key_meta() + self.head_dim);
        words + params + 4 * (self.staged_key_sums() + self.staged_value_sums())
    }

    /// Bytes of shared memory of a warp's `STAGES` regions.
    pub fn warp_shared_bytes(&self) -> u32 {
        STAGES * self.block_stage_bytes()
    }

    /// Bytes of shared memory of a cube besides its warps' stages: the two barriers of their
    /// copies and the quantization of the stream's queries.
    pub fn cube_shared_bytes(&self) -> u32 {
        COPY_BARRIER_BYTES + self.queries().shared_bytes()
    }

    /// Bytes of shared memory of a cube: its warps' stages, the barriers and the queries.
    pub fn shared_bytes(&self) -> u32 {
        self.warps * self.warp_shared_bytes() + self.cube_shared_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_groups_divide_the_warps() {
        let groups =
            |warps| MmaGeometry { group: 4, head_dim: 128, key_group: 64, partition: 64, warps, meta_vector: 2 };
        let counts: Vec<(u32, u32)> = [16, 12, 6, 5, 1]
            .iter()
            .map(|&w| groups(w).copy_groups())
            .map(|split| (split.groups, split.units))
            .collect();
        assert_eq!(counts, [(4, 128), (4, 96), (2, 96), (1, 160), (1, 32)]);
    }

    #[test]
    fn padded_groups_divide_or_fill_the_product_columns() {
        let geo = |group| MmaGeometry { group, head_dim: 128, key_group: 64, partition: 64, warps: 4, meta_vector: 2 };
        let padded: Vec<u32> = [1, 2, 3, 4, 5, 8, 9, 16, 32].iter().map(|&g| geo(g).padded_group()).collect();
        assert_eq!(padded, [1, 2, 4, 4, 8, 8, 16, 16, 32]);
        // The benchmark geometry: 4 heads × 2 key groups fill one row tile's first 8 rows.
        let bench = geo(4);
        assert_eq!((bench.score_rows(), bench.score_tiles(), bench.lane_heads()), (8, 1, 1));
        // 32 heads: 64 rows in 4 tiles; a lane holds heads g + 8h for 4 head slots.
        assert_eq!((geo(32).score_tiles(), geo(32).lane_heads()), (4, 4));
    }

    #[test]
    fn code_sums_come_from_padding_rows_and_columns_where_there_are_some() {
        let sums = |group, head_dim, key_group| {
            let geo = MmaGeometry { group, head_dim, key_group, partition: 64, warps: 4, meta_vector: 1 };
            (geo.key_sums_from_products(), geo.value_sums_from_products())
        };
        // The benchmark (4 heads × 2 key groups: 8 of 16 rows, 4 of 8 columns) and SmolLM2 (3
        // heads, one key group of 64 channels).
        assert_eq!([sums(4, 128, 64), sums(3, 64, 64)], [(true, true); 2]);
        // 4 heads × 4 key groups fill the rows; 8 heads fill the columns too; 1 and 2 heads leave
        // both.
        assert_eq!(
            [sums(4, 128, 32), sums(8, 128, 64), sums(8, 128, 128)],
            [(false, true), (false, false), (true, false)]
        );
        assert_eq!([sums(1, 128, 32), sums(2, 64, 16)], [(true, true); 2]);
        // Where the output product gives the value sums, a lane reads its rows' sums from column
        // 7 (lane 4g + 3) in its share's first tile, and from its own first column 2t in the
        // others: both must be padding columns.
        // (Groups 1 to 4: 5 and more pad to 8.)
        for group in 1..=4 {
            for head_dim in [32, 64, 96, 128] {
                let geo = MmaGeometry { group, head_dim, key_group: 32, partition: 64, warps: 4, meta_vector: 1 };
                assert!(geo.value_sums_from_products() && geo.padded_group() < PRODUCT_COLUMNS);
                for t in 0..4 {
                    if t / geo.lane_columns() > 0 {
                        assert!(2 * t >= geo.padded_group(), "group {group}, {head_dim} channels, t {t}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_warp_stages_a_block_in_its_bytes() {
        // The benchmark geometry: keys 64 slots × 3 vectors (3 KiB), their (min, scale) words 128
        // × 4 bytes, values 128 channels × 16 bytes (2 KiB), their words 128 × 4 bytes; the
        // products give the code sums. Two such regions a warp.
        let bench = MmaGeometry { group: 4, head_dim: 128, key_group: 64, partition: 64, warps: 16, meta_vector: 2 };
        assert_eq!((bench.staged_key_sums(), bench.staged_value_sums()), (0, 0));
        assert_eq!((bench.block_stage_bytes(), bench.warp_shared_bytes(), bench.word_copies()), (6144, 12288, 4));
        // The queries: two trees of 4 × 128 f32, 2 × 128 words of codes, 3 × 8 metadata values.
        assert_eq!(bench.queries().shared_bytes(), 4 * (2 * 512 + 256 + 24));
        assert_eq!(bench.shared_bytes(), 16 * 12288 + COPY_BARRIER_BYTES + 5216);
        assert!(bench.shared_bytes() <= 227 * 1024);
        // 8 heads fill both products: the cached sums are staged (512 bytes each).
        let full = MmaGeometry { group: 8, ..bench };
        assert_eq!((full.staged_key_sums(), full.staged_value_sums()), (128, 128));
        assert_eq!(full.block_stage_bytes(), 7168);
        // Π = 128, one key group: 6 + 0.5 + 4 + 0.5 KiB a region; 10 warps fit an H100's 227 KiB.
        let long = MmaGeometry { key_group: 128, partition: 128, ..bench };
        assert_eq!((long.block_stage_bytes(), long.word_copies()), (11264, 8));
        assert!(MmaGeometry { warps: 10, ..long }.shared_bytes() <= 227 * 1024);
        assert!(MmaGeometry { warps: 11, ..long }.shared_bytes() > 227 * 1024);
        // 16 heads at Π = 128 stage the sums (12 KiB a region) and quantize 16 heads' queries (20
        // KiB): 8 warps fit.
        let wide = MmaGeometry { group: 16, ..long };
        assert_eq!((wide.block_stage_bytes(), wide.queries().shared_bytes()), (12288, 4 * (2 * 2048 + 1024 + 48)));
        assert!(MmaGeometry { warps: 8, ..wide }.shared_bytes() <= 227 * 1024);
        assert!(MmaGeometry { warps: 9, ..wide }.shared_bytes() > 227 * 1024);
        // The smallest: Π = 32, 64 channels, one 16-byte copy of words per lane.
        let small = MmaGeometry { head_dim: 64, key_group: 32, partition: 32, ..bench };
        assert_eq!(small.word_copies(), 1);
    }

    #[test]
    fn lanes_take_every_real_column_pair_of_every_output_tile_once() {
        for (group, head_dim) in [(1, 128), (2, 128), (3, 64), (4, 128), (4, 32), (8, 128), (32, 64)] {
            let geo = MmaGeometry { group, head_dim, key_group: 32, partition: 64, warps: 4, meta_vector: 1 };
            let (fold, columns) = (geo.value_fold(), geo.lane_columns());
            let real_pairs = geo.padded_group().min(PRODUCT_COLUMNS).div_ceil(2);
            let mut taken = vec![0u32; (geo.channel_tiles() * 4) as usize];
            for t in 0..4 {
                for q in 0..geo.channel_tiles() / fold {
                    let (tile, pair) = (fold * q + t / columns, t % columns);
                    taken[(tile * 4 + pair) as usize] += 1;
                }
            }
            for tile in 0..geo.channel_tiles() {
                for pair in 0..real_pairs {
                    assert_eq!(
                        taken[(tile * 4 + pair) as usize],
                        1,
                        "group {group}, {head_dim} channels: tile {tile} pair {pair}"
                    );
                }
            }
            assert_eq!(geo.lane_outputs(), geo.channel_tiles() / fold * geo.lane_heads() * 4);
        }
        // The benchmark geometry (4 heads): two tiles per lane pair, half the running outputs.
        let bench = MmaGeometry { group: 4, head_dim: 128, key_group: 64, partition: 64, warps: 16, meta_vector: 2 };
        assert_eq!((bench.value_fold(), bench.lane_columns(), bench.lane_outputs()), (2, 2, 16));
    }
}
