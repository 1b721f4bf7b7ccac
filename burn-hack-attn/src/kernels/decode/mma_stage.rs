//! The shared-memory stage of the tensor-core decode kernel: each warp's buffers for one block of
//! Π slots, its key words and metadata and its value words and metadata, which the warp's lanes
//! fill with asynchronous copies (`cp.async`) one phase ahead of the products that read them.
//!
//! Per warp, in elements of each buffer:
//! - `key_words`: `[Π, key_stride]` 16-byte vectors, a slot's `head_dim / 64` vectors then one of
//!   padding, so that the eight slots a product reads at once fall in distinct banks;
//! - `key_scales`: `[2, Π · parts]` f32, the slots' key minima then their scales; `key_sums`:
//!   `[Π · parts]`, unless the score product gives them (`MmaGeometry::key_sums_from_products`);
//! - `value_words`: `[head_dim, Π / 32]` pairs of words, the block's channels in order;
//! - `value_scales`: `[2, head_dim]` f32, the channels' minima then their scales; `value_sums`:
//!   `[head_dim]`, unless the output product gives them (`MmaGeometry::value_sums_from_products`).
//!
//! Sums the products give are neither copied nor staged (their buffers keep one placeholder
//! element per warp).
//!
//! Slots past the warp's last slot are staged as copies of it (the scores mask them), so every
//! copy reads inside the caches.

use burn_kvcompress::kernels::warp_mma::WARP;
use cubecl::prelude::{barrier::copy_async, *};

use super::mma_geometry::MmaGeometry;

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

/// One warp's staged block; see the module documentation for the layouts.
#[derive(CubeType)]
pub struct BlockStage {
    /// Key words, `[warps, Π, key_stride]` 16-byte vectors.
    pub key_words: SharedMemory<Vector<u32, Const<4>>>,
    /// Key minima and scales, `[warps, 2, Π · parts]`.
    pub key_scales: SharedMemory<f32>,
    /// Key code sums, `[warps, Π · parts]` (`[warps]` where not staged).
    pub key_sums: SharedMemory<u32>,
    /// Value words, `[warps, head_dim, Π / 32]` pairs.
    pub value_words: SharedMemory<Vector<u32, Const<2>>>,
    /// Value minima and scales, `[warps, 2, head_dim]`.
    pub value_scales: SharedMemory<f32>,
    /// Value code sums, `[warps, head_dim]` (`[warps]` where not staged).
    pub value_sums: SharedMemory<u32>,
}

/// The cube's stage, every warp's buffers side by side.
#[cube]
pub fn block_stage(#[comptime] geo: MmaGeometry) -> BlockStage {
    let warps = geo.warps;
    BlockStage {
        key_words: SharedMemory::new_aligned(comptime!((warps * geo.warp_key_vectors()) as usize), 16usize),
        key_scales: SharedMemory::new_aligned(comptime!((warps * 2 * geo.key_meta()) as usize), 16usize),
        key_sums: SharedMemory::new_aligned(comptime!((warps * geo.staged_key_sums().max(1)) as usize), 16usize),
        value_words: SharedMemory::new_aligned(comptime!((warps * geo.warp_value_pairs()) as usize), 16usize),
        value_scales: SharedMemory::new_aligned(comptime!((warps * 2 * geo.head_dim) as usize), 16usize),
        value_sums: SharedMemory::new_aligned(comptime!((warps * geo.staged_value_sums().max(1)) as usize), 16usize),
    }
}

/// Issues the calling lane's copies of its warp's key words and metadata for the block of `slots`
/// from slot `block_first` (none past the warp's last slot).
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn copy_block_keys(
    k_words: &Array<Vector<u32, Const<4>>>,
    k_min: &Array<f32>,
    k_scale: &Array<f32>,
    k_sums: &Array<u32>,
    key_meta_pitch: u32,
    stage: &mut BlockStage,
    slots: &WarpBlocks,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    if block_first < slots.end {
        let (first_row, last_row) = (slots.row0 + block_first, slots.row0 + slots.end - 1);
        let lane = UNIT_POS % WARP;
        let warp = UNIT_POS / WARP;
        let vectors = comptime!(geo.key_words() / WORDS_PER_COPY);
        let words_at = warp * comptime!(geo.warp_key_vectors());
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
        let meta_at = warp * comptime!(geo.key_meta());
        #[unroll]
        for i in 0..comptime!(copies.div_ceil(WARP)) {
            let copy = WARP * i + lane;
            if copy < copies {
                let (slot, chunk) = (copy / per_slot, copy % per_slot);
                let from = (u32::min(first_row + slot, last_row) * key_meta_pitch + chunk * geo.meta_vector) as usize;
                let to = slot * geo.parts() + chunk * geo.meta_vector;
                let lo_at = (2 * meta_at + to) as usize;
                let step_at = lo_at + comptime!(geo.key_meta() as usize);
                let sum_at = (meta_at + to) as usize;
                let n = comptime!(geo.meta_vector as usize);
                copy_async(
                    &k_min.slice(from, from + n),
                    &mut stage.key_scales.slice_mut(lo_at, lo_at + n),
                    geo.meta_vector,
                );
                copy_async(
                    &k_scale.slice(from, from + n),
                    &mut stage.key_scales.slice_mut(step_at, step_at + n),
                    geo.meta_vector,
                );
                if comptime!(geo.staged_key_sums() > 0) {
                    copy_async(
                        &k_sums.slice(from, from + n),
                        &mut stage.key_sums.slice_mut(sum_at, sum_at + n),
                        geo.meta_vector,
                    );
                }
            }
        }
    }
}

/// Issues the calling lane's copies of its warp's value words and metadata for the block of
/// `slots` from slot `block_first`, where it is closed (none past the warp's last slot); the
/// stream has `blocks` closed blocks.
#[allow(clippy::too_many_arguments)]
#[cube]
pub fn copy_block_values(
    v_words: &Array<Vector<u32, Const<2>>>,
    v_min: &Array<f32>,
    v_scale: &Array<f32>,
    v_sums: &Array<u32>,
    stage: &mut BlockStage,
    slots: &WarpBlocks,
    blocks: u32,
    block_first: u32,
    #[comptime] geo: MmaGeometry,
) {
    if block_first < u32::min(slots.end, slots.quantized) {
        let block = slots.stream * blocks + block_first / geo.partition;
        let lane = UNIT_POS % WARP;
        let warp = UNIT_POS / WARP;
        let d = geo.head_dim;
        // Words: the block's channels are contiguous, two pairs per copy.
        let pairs = comptime!(geo.warp_value_pairs());
        #[unroll]
        for i in 0..geo.word_copies() {
            let pair = 2 * (WARP * i + lane);
            let from = (block * pairs + pair) as usize;
            let to = (warp * pairs + pair) as usize;
            copy_async(&v_words.slice(from, from + 2), &mut stage.value_words.slice_mut(to, to + 2), WORDS_PER_COPY);
        }
        // Metadata: `head_dim` contiguous values per tensor, four per copy.
        #[unroll]
        for i in 0..comptime!((d / WORDS_PER_COPY).div_ceil(WARP)) {
            let channel = WORDS_PER_COPY * (WARP * i + lane);
            if channel < d {
                let from = (block * d + channel) as usize;
                let lo_at = (warp * 2 * d + channel) as usize;
                let step_at = lo_at + d as usize;
                let sum_at = (warp * d + channel) as usize;
                let n = comptime!(WORDS_PER_COPY as usize);
                copy_async(
                    &v_min.slice(from, from + n),
                    &mut stage.value_scales.slice_mut(lo_at, lo_at + n),
                    WORDS_PER_COPY,
                );
                copy_async(
                    &v_scale.slice(from, from + n),
                    &mut stage.value_scales.slice_mut(step_at, step_at + n),
                    WORDS_PER_COPY,
                );
                if comptime!(geo.staged_value_sums() > 0) {
                    copy_async(
                        &v_sums.slice(from, from + n),
                        &mut stage.value_sums.slice_mut(sum_at, sum_at + n),
                        WORDS_PER_COPY,
                    );
                }
            }
        }
    }
}
