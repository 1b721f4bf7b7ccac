//! The shared-memory stage of the tensor-core channel kernel, where it fits
//! ([`StagePlan`](super::StagePlan)): each warp has
//! [`StagePlan::regions`](super::StagePlan::regions) regions, each holding one product step's key
//! rows and metadata and its value rows and metadata, which the warp's lanes fill with
//! asynchronous copies (`cp.async`, [`copy_keys`], [`copy_values`]) ahead of the step that reads
//! them (`mma_runs`). Without it, a warp's loads of a step's codes wait on memory between its
//! products: with 8 warps an SM (the kernel takes every register), too few loads are in flight to
//! hide the latency.
//!
//! A closed block's four parts are contiguous in the caches, and so in a region, whose blocks
//! follow each other in each buffer (`per` = [`ChannelMmaGeometry::blocks_per_step`]):
//! - `key_words`: `[per · Π, key_row_words]` words, slot rows;
//! - `key_params`: `[per · head_dim]` words, the channels' (min, scale) pairs;
//! - `value_words`: `[per · head_dim, value_row_words]` words, channel rows;
//! - `value_params`: `[per · Π · groups]` words, the slots' (min, scale) pairs per value group.
//!
//! The reads keep the caches' addressing ([`PairAt`]): a region is laid out as a run of `per`
//! blocks.

use burn_kvcompress::kernels::warp_mma::WARP;
use cubecl::prelude::{barrier::copy_async, *};

use super::mma_kernel::ChannelMmaGeometry;

/// The copy barrier (of the warp's two, [`copy_barriers`](crate::kernels::copy_barriers)) on which
/// its key region's copies land, staged in [`StagePlan::Halves`](super::StagePlan::Halves).
pub(super) const KEY_BARRIER: bool = false;
/// The copy barrier on which its value region's copies land, staged in
/// [`StagePlan::Halves`](super::StagePlan::Halves).
pub(super) const VALUE_BARRIER: bool = true;
/// Scalars (`u32`) of one 16-byte copy.
const COPY_WORDS: u32 = 4;

/// The cube's stage, every region's buffers side by side (warp `w`'s regions from
/// `w · regions`). The key rows also hold each warp's tile (at `w ·`
/// [`ChannelMmaGeometry::warp_key_words`]); unstaged, they hold only the tiles, and the other
/// buffers one copy's words each.
#[derive(CubeType)]
pub(super) struct PairStage {
    pub key_words: SharedMemory<u32>,
    pub key_params: SharedMemory<u32>,
    pub value_words: SharedMemory<u32>,
    pub value_params: SharedMemory<u32>,
}

/// The cube's [`PairStage`].
#[cube]
pub(super) fn pair_stage(#[comptime] geo: ChannelMmaGeometry) -> PairStage {
    let words = comptime!(stage_buffer_words(geo).map(|words| words as usize));
    PairStage {
        key_words: SharedMemory::new_aligned(comptime!(words[0]), 16usize),
        key_params: SharedMemory::new_aligned(comptime!(words[1]), 16usize),
        value_words: SharedMemory::new_aligned(comptime!(words[2]), 16usize),
        value_params: SharedMemory::new_aligned(comptime!(words[3]), 16usize),
    }
}

/// Words of the [`PairStage`]'s buffers, in its fields' order: every warp's part of the key rows
/// ([`ChannelMmaGeometry::warp_key_words`]), and each other buffer's regions, at least one copy's
/// words (so that an unstaged cube's unused buffers are not empty).
pub(super) fn stage_buffer_words(geo: ChannelMmaGeometry) -> [u32; 4] {
    let regions = geo.stage.regions() * geo.warps;
    let buffer = |words: u32| (regions * words).max(COPY_WORDS);
    [
        geo.warps * geo.warp_key_words(),
        buffer(geo.step_key_params()),
        buffer(geo.step_value_words()),
        buffer(geo.step_value_params()),
    ]
}

/// The first word of the calling warp's part of the stage's key rows buffer: its first region's
/// key rows, where its tile lies until its first copies land (unstaged, its tile).
#[cube]
pub(super) fn warp_key_start(#[comptime] geo: ChannelMmaGeometry) -> u32 {
    (UNIT_POS / WARP) * comptime!(geo.warp_key_words())
}

/// Where a step's blocks lie in the buffers it reads (the caches, or a region of the stage), as
/// block indices of those buffers: the first elements of the pair's key rows, value rows and the
/// lane's own block's metadata.
#[derive(CubeType)]
pub(super) struct PairAt {
    /// First key row of the pair's first and second block.
    pub key_rows: Array<u32>,
    /// First value row (channel) of the pair's first and second block.
    pub value_rows: Array<u32>,
    /// First key (min, scale) word of the lane's own block (of its operand column).
    pub key_params: u32,
    /// First value (min, scale) word of the lane's own block.
    pub value_params: u32,
}

/// A step's [`PairAt`] for blocks `first`, `second` and `own` of the buffers read.
#[cube]
pub(super) fn pair_at(first: u32, second: u32, own: u32, #[comptime] geo: ChannelMmaGeometry) -> PairAt {
    let (d, pi) = comptime!((geo.head_dim, geo.partition));
    let mut key_rows = Array::<u32>::new(2usize);
    let mut value_rows = Array::<u32>::new(2usize);
    key_rows[0] = first * pi;
    key_rows[1] = second * pi;
    value_rows[0] = first * d;
    value_rows[1] = second * d;
    PairAt {
        key_rows,
        value_rows,
        key_params: own * d,
        value_params: own * comptime!(geo.partition * geo.value_groups()),
    }
}

/// Issues the calling lane's copies of the key rows and key metadata of closed blocks `first`
/// and (paired) `second` of the caches into the stage's key `region`.
#[cube]
pub(super) fn copy_keys(
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    stage: &mut PairStage,
    region: u32,
    first: u32,
    second: u32,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let part = comptime!(BlockPart { words: geo.partition * geo.key_row_words(), params: geo.head_dim });
    copy_blocks(k_words, k_params, &mut stage.key_words, &mut stage.key_params, region, first, second, part, geo);
}

/// Issues the calling lane's copies of the value rows and value metadata of closed blocks `first`
/// and (paired) `second` of the caches into the stage's value `region`.
#[cube]
pub(super) fn copy_values(
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    stage: &mut PairStage,
    region: u32,
    first: u32,
    second: u32,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let part = comptime!(BlockPart {
        words: geo.head_dim * geo.value_row_words(),
        params: geo.partition * geo.value_groups()
    });
    copy_blocks(v_words, v_params, &mut stage.value_words, &mut stage.value_params, region, first, second, part, geo);
}

/// The size of one part (keys or values) of a closed block: `words` words of rows and `params`
/// metadata words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct BlockPart {
    words: u32,
    params: u32,
}

/// Issues the calling lane's copies of one `part` (rows in `words`, metadata in `params`) of
/// closed blocks `first` and (paired) `second` into `region` of the stage's buffers of that part.
#[allow(clippy::too_many_arguments)]
#[cube]
fn copy_blocks(
    words: &Array<u32>,
    params: &Array<u32>,
    stage_words: &mut SharedMemory<u32>,
    stage_params: &mut SharedMemory<u32>,
    region: u32,
    first: u32,
    second: u32,
    #[comptime] part: BlockPart,
    #[comptime] geo: ChannelMmaGeometry,
) {
    let per = comptime!(geo.blocks_per_step());
    #[unroll]
    for s in 0..per {
        let block = select(s == 0u32, first, second);
        let to = region * per + s;
        copy_run(words, block * part.words, stage_words, to * part.words, part.words, COPY_WORDS);
        copy_run(params, block * part.params, stage_params, to * part.params, part.params, COPY_WORDS);
    }
}

/// Issues the calling lane's share of the 16-byte copies of `count` elements from element `from`
/// of `source` to element `to` of `target`, `per_copy` elements a copy (a multiple of it). The
/// lane's copies are `per_copy · WARP` elements apart: their indices are the lane's first ones,
/// widened to 64 bits once, plus compile-time offsets (see `LaneRows` in `mma_operands`), and
/// only a round past the last full one checks which lanes still have a copy.
#[cube]
fn copy_run<E: CubePrimitive>(
    source: &Array<E>,
    from: u32,
    target: &mut SharedMemory<E>,
    to: u32,
    #[comptime] count: u32,
    #[comptime] per_copy: u32,
) {
    let lane = UNIT_POS % WARP;
    let copies = comptime!(count / per_copy);
    let (src, dst) = ((from + per_copy * lane) as usize, (to + per_copy * lane) as usize);
    let n = comptime!(per_copy as usize);
    #[unroll]
    for i in 0..comptime!(copies.div_ceil(WARP)) {
        let full = comptime!((i + 1) * WARP <= copies);
        if full || WARP * i + lane < copies {
            let at = comptime!((per_copy * WARP * i) as usize);
            copy_async(
                &source.slice(src + at, src + at + n),
                &mut target.slice_mut(dst + at, dst + at + n),
                COPY_WORDS,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{
        super::{StagePlan, TILE_PAD},
        *,
    };

    /// Shared memory a cube may take on a Hopper GPU (227 KiB).
    const HOPPER_SHARED_BYTES: u32 = 227 * 1024;

    fn geometry(partition: u32, key_bits: u32, value_bits: u32, stage: StagePlan) -> ChannelMmaGeometry {
        ChannelMmaGeometry {
            group: 4,
            head_dim: 128,
            partition,
            key_bits,
            value_bits,
            value_group: partition.min(128),
            warps: 8,
            stage,
        }
    }

    #[test]
    fn a_region_holds_one_steps_blocks_and_2_bit_stages_fit_a_hopper_cube() {
        // hack2 at Llama's heads: a pair of 128-slot blocks a step, 2-bit keys and values.
        let hack2 = geometry(128, 2, 2, StagePlan::Halves);
        let step =
            [hack2.step_key_words(), hack2.step_value_words(), hack2.step_key_params(), hack2.step_value_params()];
        // Key rows: 2 blocks × 128 slots × 8 words; value rows: 2 × 128 channels × 8; metadata:
        // 2 × 128 key words, 2 × 128 slots × 1 value group.
        assert_eq!(step, [2048, 2048, 256, 256]);
        // Per warp one region of 18 KiB (keys and values 9 KiB each, the key rows holding its
        // 4 KiB tile) and 16 bytes of barriers: 12 warps fit. Two regions a warp would not.
        assert!(hack2.tile_fits_keys());
        assert_eq!(hack2.shared_bytes(), 8 * (18 * 1024 + 16));
        let twelve = ChannelMmaGeometry { warps: 12, ..hack2 };
        assert!(twelve.shared_bytes() <= HOPPER_SHARED_BYTES);
        assert!(ChannelMmaGeometry { stage: StagePlan::Steps, ..hack2 }.shared_bytes() > HOPPER_SHARED_BYTES);
        // 64-slot blocks: two regions of 10 KiB a warp.
        let narrow = geometry(64, 2, 2, StagePlan::Steps);
        assert!(narrow.tile_fits_keys());
        assert_eq!(narrow.shared_bytes(), 8 * (2 * 10 * 1024 + 16));
        assert!(narrow.shared_bytes() <= HOPPER_SHARED_BYTES);
        // hack3 (4-bit keys, 2-bit values): one region of 26 KiB a warp fits 8 warps.
        assert!(geometry(128, 4, 2, StagePlan::Halves).shared_bytes() <= HOPPER_SHARED_BYTES);
        // hack4 (34 KiB a region) does not: it stages at 6 warps a cube (7 do not fit), or where
        // fewer fit loads from the caches, each warp's tile in shared memory (and one 16-byte
        // copy's words of each unused buffer).
        let staged = geometry(128, 4, 4, StagePlan::Halves);
        assert!(staged.shared_bytes() > HOPPER_SHARED_BYTES);
        assert_eq!(staged.shared_bytes(), 8 * (34 * 1024 + 16));
        assert!(ChannelMmaGeometry { warps: 6, ..staged }.shared_bytes() <= HOPPER_SHARED_BYTES);
        assert!(ChannelMmaGeometry { warps: 7, ..staged }.shared_bytes() > HOPPER_SHARED_BYTES);
        let direct = ChannelMmaGeometry { stage: StagePlan::Direct, ..staged };
        assert_eq!(direct.shared_bytes(), 4 * 8 * 8 * (128 + TILE_PAD) + 3 * 16);
        // One block a step (more than 4 query heads a KV head) at Π = 64: the step's 512 key row
        // words cannot hold the 8 heads' float slots outputs (1024 floats).
        let unpaired = ChannelMmaGeometry { group: 8, ..geometry(64, 2, 2, StagePlan::Halves) };
        assert!(!unpaired.tile_fits_keys());
    }

    #[test]
    fn a_warps_tile_holds_its_float_slots_outputs_and_a_blocks_numerators() {
        // Π = 64: 4 heads × 128 channels are 512 floats, 8 padded columns 544.
        assert_eq!(geometry(64, 2, 2, StagePlan::Steps).tile_floats(), 8 * (64 + TILE_PAD));
        // Π = 32: the float slots' outputs are the larger; Π = 128: the numerators.
        assert_eq!(geometry(32, 2, 2, StagePlan::Steps).tile_floats(), 4 * 128);
        assert_eq!(geometry(128, 4, 4, StagePlan::Direct).tile_floats(), 8 * (128 + TILE_PAD));
    }
}
