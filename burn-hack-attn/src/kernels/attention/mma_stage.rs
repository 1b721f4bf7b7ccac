//! The shared-memory stage of the tensor-core decode kernel: each warp's [`STAGES`] regions, each
//! holding one block of Π slots, its key words and metadata and its value words and metadata,
//! which the warp's lanes fill with asynchronous copies (`cp.async`) while they attend the block
//! in the other region.
//!
//! Per region, in elements of each buffer:
//! - `key_words`: `[Π, key_stride]` 16-byte vectors, a slot's `head_dim / 64` vectors then one of
//!   padding, so that the eight slots a product reads at once fall in distinct banks;
//! - `key_params`: `[Π · parts]` words, each slot's key groups' fp16 (min, scale) pairs; `key_sums`:
//!   `[Π · parts]`, unless the score product gives them (`MmaGeometry::key_sums_from_products`);
//! - `value_words`: `[head_dim, Π / 32]` pairs of words, the block's channels in order;
//! - `value_params`: `[head_dim]` words, the channels' fp16 (min, scale) pairs; `value_sums`:
//!   `[head_dim]`, unless the output product gives them (`MmaGeometry::value_sums_from_products`).
//!
//! Sums the products give are neither copied nor staged (their buffers keep one placeholder
//! element per region).
//!
//! Slots past the warp's last slot are staged as copies of it (the scores mask them), so every
//! copy reads inside the caches.

use burn_kvcompress::kernels::warp_mma::WARP;
use cubecl::prelude::{barrier::copy_async, *};

use super::mma_geometry::{MmaGeometry, STAGES};

/// Elements of a 16-byte copy of `u32` words.
const WORDS_PER_COPY: u32 = 4;

/// The calling warp's slots: `first .. end` of stream `stream`, of `len` slots whose rows start
/// at `row0` in the key tensors, of which the step's query sees those from `visible_from` on (see
/// `first_visible_slot`); `quantized` slots have closed value blocks.
#[derive(CubeType)]
pub struct WarpBlocks {
    pub stream: u32,
    pub row0: u32,
    pub first: u32,
    pub end: u32,
    pub len: u32,
    pub quantized: u32,
    pub visible_from: u32,
}

/// The cube's staged blocks: each warp has [`STAGES`] regions (region `w` and `warps + w` of warp
/// `w`), each holding one block; see the module documentation for a region's layout.
#[derive(CubeType)]
pub struct BlockStage {
    /// Key words, `[regions, Π, key_stride]` 16-byte vectors.
    pub key_words: SharedMemory<Vector<u32, Const<4>>>,
    /// Key (min, scale) words, `[regions, Π · parts]`.
    pub key_params: SharedMemory<u32>,
    /// Key code sums, `[regions, Π · parts]` (`[regions]` where not staged).
    pub key_sums: SharedMemory<u32>,
    /// Value words, `[regions, head_dim, Π / 32]` pairs.
    pub value_words: SharedMemory<Vector<u32, Const<2>>>,
    /// Value (min, scale) words, `[regions, head_dim]`.
    pub value_params: SharedMemory<u32>,
    /// Value code sums, `[regions, head_dim]` (`[regions]` where not staged).
    pub value_sums: SharedMemory<u32>,
}

/// The cube's stage, every region's buffers side by side.
#[cube]
pub fn block_stage(#[comptime] geo: MmaGeometry) -> BlockStage {
    let regions = comptime!(STAGES * geo.warps);
    BlockStage {
        key_words: SharedMemory::new_aligned(comptime!((regions * geo.warp_key_vectors()) as usize), 16usize),
        key_params: SharedMemory::new_aligned(comptime!((regions * geo.key_meta()) as usize), 16usize),
        key_sums: SharedMemory::new_aligned(comptime!((regions * geo.staged_key_sums().max(1)) as usize), 16usize),
        value_words: SharedMemory::new_aligned(comptime!((regions * geo.warp_value_pairs()) as usize), 16usize),
        value_params: SharedMemory::new_aligned(comptime!((regions * geo.head_dim) as usize), 16usize),
        value_sums: SharedMemory::new_aligned(comptime!((regions * geo.staged_value_sums().max(1)) as usize), 16usize),
    }
}

/// Issues the calling lane's copies of its warp's block of `slots` from slot `block_first` into
/// the warp's `region` of `stage`: its keys, and its values where the block is closed (none past
/// the warp's last slot).
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn copy_block(
    k_words: &Array<Vector<u32, Const<4>>>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    v_words: &Array<Vector<u32, Const<2>>>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    key_meta_pitch: u32,
    stage: &mut BlockStage,
    region: u32,
    slots: &WarpBlocks,
    blocks: u32,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    copy_block_keys(k_words, k_params, k_sums, key_meta_pitch, stage, region, slots, block_first, geo);
    copy_block_values(v_words, v_params, v_sums, stage, region, slots, blocks, block_first, geo);
}

/// Issues the calling lane's copies of its warp's key words and metadata for the block of `slots`
/// from slot `block_first` into `region` (none past the warp's last slot).
#[allow(clippy::too_many_arguments)]
#[cube]
fn copy_block_keys(
    k_words: &Array<Vector<u32, Const<4>>>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    key_meta_pitch: u32,
    stage: &mut BlockStage,
    region: u32,
    slots: &WarpBlocks,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    if block_first < slots.end {
        let (first_row, last_row) = (slots.row0 + block_first, slots.row0 + slots.end - 1);
        let lane = UNIT_POS % WARP;
        let vectors = comptime!(geo.key_words() / WORDS_PER_COPY);
        let words_at = region * comptime!(geo.warp_key_vectors());
        #[unroll]
        for i in 0..geo.word_copies() {
            let copy = WARP * i + lane;
            let (slot, vector) = (copy / vectors, copy % vectors);
            let from = (u32::min(first_row + slot, last_row) * vectors + vector) as usize;
            let to = (words_at + slot * comptime!(geo.key_stride()) + vector) as usize;
            copy_async(&k_words.slice(from, from + 1), &mut stage.key_words.slice_mut(to, to + 1), WORDS_PER_COPY);
        }
        // Metadata: each slot's `parts` values in copies of `meta_vector`.
        let per_slot = comptime!(geo.parts() / geo.meta_vector);
        let copies = comptime!(geo.partition * geo.parts() / geo.meta_vector);
        let meta_at = region * comptime!(geo.key_meta());
        #[unroll]
        for i in 0..comptime!(copies.div_ceil(WARP)) {
            let copy = WARP * i + lane;
            if copy < copies {
                let (slot, chunk) = (copy / per_slot, copy % per_slot);
                let from = (u32::min(first_row + slot, last_row) * key_meta_pitch + chunk * geo.meta_vector) as usize;
                let to = (meta_at + slot * geo.parts() + chunk * geo.meta_vector) as usize;
                let n = comptime!(geo.meta_vector as usize);
                copy_async(
                    &k_params.slice(from, from + n),
                    &mut stage.key_params.slice_mut(to, to + n),
                    geo.meta_vector,
                );
                if comptime!(geo.staged_key_sums() > 0) {
                    copy_async(
                        &k_sums.slice(from, from + n),
                        &mut stage.key_sums.slice_mut(to, to + n),
                        geo.meta_vector,
                    );
                }
            }
        }
    }
}

/// Issues the calling lane's copies of its warp's value words and metadata for the block of
/// `slots` from slot `block_first` into `region`, where it is closed (none past the warp's last
/// slot); the stream has `blocks` closed blocks.
#[allow(clippy::too_many_arguments)]
#[cube]
fn copy_block_values(
    v_words: &Array<Vector<u32, Const<2>>>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    stage: &mut BlockStage,
    region: u32,
    slots: &WarpBlocks,
    blocks: u32,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    if block_first < u32::min(slots.end, slots.quantized) {
        let block = slots.stream * blocks + block_first / geo.partition;
        let lane = UNIT_POS % WARP;
        let d = geo.head_dim;
        // Words: the block's channels are contiguous, two pairs per copy.
        let pairs = comptime!(geo.warp_value_pairs());
        #[unroll]
        for i in 0..geo.word_copies() {
            let pair = 2 * (WARP * i + lane);
            let from = (block * pairs + pair) as usize;
            let to = (region * pairs + pair) as usize;
            copy_async(&v_words.slice(from, from + 2), &mut stage.value_words.slice_mut(to, to + 2), WORDS_PER_COPY);
        }
        // Metadata: `head_dim` contiguous words per tensor, four per copy.
        #[unroll]
        for i in 0..comptime!((d / WORDS_PER_COPY).div_ceil(WARP)) {
            let channel = WORDS_PER_COPY * (WARP * i + lane);
            if channel < d {
                let from = (block * d + channel) as usize;
                let to = (region * d + channel) as usize;
                let n = comptime!(WORDS_PER_COPY as usize);
                copy_async(
                    &v_params.slice(from, from + n),
                    &mut stage.value_params.slice_mut(to, to + n),
                    WORDS_PER_COPY,
                );
                if comptime!(geo.staged_value_sums() > 0) {
                    copy_async(
                        &v_sums.slice(from, from + n),
                        &mut stage.value_sums.slice_mut(to, to + n),
                        WORDS_PER_COPY,
                    );
                }
            }
        }
    }
}
