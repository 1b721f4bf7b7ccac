//! The fused prefill kernel's ([`prefill_kernel`](super::prefill_kernel::prefill_kernel)) query
//! and score steps: the tile's queries to 8 bits ([`quantize_queries`], step 1), a key block
//! staged in shared memory ([`stage_keys`], step 2a), and the block's scores ([`block_scores`],
//! step 2b).

use burn_kvcompress::kernels::{masked_score as masked, slot_visible};
use cubecl::prelude::*;

use super::prefill_kernel::{PrefillGeometry, SCORE_KEYS, SCORE_ROWS};
use crate::kernels::{
    eight_bit::{code8, scale8},
    params_word::{params_min, params_scale},
};

/// The tile's queries in 8 bits, in shared memory: `pairs`, `[rows / 2, head_dim]` codes of two
/// rows per `u32` (16-bit lanes); `min`, `scale`, `sum`, `[rows · parts]` per run `row · parts +
/// part` (a row's key channel group).
#[derive(CubeType)]
pub(super) struct QueryTile {
    pub(super) pairs: SharedMemory<u32>,
    pub(super) min: SharedMemory<f32>,
    pub(super) scale: SharedMemory<f32>,
    pub(super) sum: SharedMemory<f32>,
}

/// The cube's [`QueryTile`].
#[cube]
pub(super) fn query_tile(#[comptime] geo: PrefillGeometry) -> QueryTile {
    QueryTile {
        pairs: SharedMemory::<u32>::new(comptime!((geo.rows / 2 * geo.head_dim) as usize)),
        min: SharedMemory::<f32>::new(comptime!((geo.rows * geo.head_dim / geo.key_group) as usize)),
        scale: SharedMemory::<f32>::new(comptime!((geo.rows * geo.head_dim / geo.key_group) as usize)),
        sum: SharedMemory::<f32>::new(comptime!((geo.rows * geo.head_dim / geo.key_group) as usize)),
    }
}

/// One key block staged in shared memory: `words`, `[words_per_key, Π]` (transposed: a word
/// index's words of every key side by side); `min`, `scale`, `sum`, `[parts, Π]`.
#[derive(CubeType)]
pub(super) struct KeyTile {
    pub(super) words: SharedMemory<u32>,
    pub(super) min: SharedMemory<f32>,
    pub(super) scale: SharedMemory<f32>,
    pub(super) sum: SharedMemory<f32>,
}

/// The cube's [`KeyTile`].
#[cube]
pub(super) fn key_tile(#[comptime] geo: PrefillGeometry) -> KeyTile {
    KeyTile {
        words: SharedMemory::<u32>::new(comptime!((geo.words_per_key() * geo.partition) as usize)),
        min: SharedMemory::<f32>::new(comptime!((geo.parts() * geo.partition) as usize)),
        scale: SharedMemory::<f32>::new(comptime!((geo.parts() * geo.partition) as usize)),
        sum: SharedMemory::<f32>::new(comptime!((geo.parts() * geo.partition) as usize)),
    }
}

/// Step 1: the tile's queries of `q: [streams · group · q_len · head_dim]` to 8 bits per (row,
/// key group) = run `row · parts + part`, into `queries`. Dead rows (past the group's heads of the
/// tile's queries, or past the last query) get code 0, min 0, scale 0.
#[cube]
pub(super) fn quantize_queries(
    q: &Array<f32>,
    queries: &mut QueryTile,
    stream: u32,
    first_query: u32,
    q_len: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let t = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let d = geo.head_dim;
    let kg = geo.key_group;
    let parts = comptime!(geo.head_dim / geo.key_group);
    let rows = geo.rows;
    let pairs = comptime!(geo.rows / 2);
    let live_rows = comptime!(geo.group * geo.queries);
    let mut run = t;
    while run < rows * parts {
        let (row, part) = (run / parts, run % parts);
        let (i, g) = (row / group, row % group);
        let mut lo = 0.0f32;
        let mut sc = 0.0f32;
        if row < live_rows && first_query + i < q_len {
            let base = ((stream * group + g) * q_len + first_query + i) * d + part * kg;
            lo = q[base as usize];
            let mut hi = lo;
            for c in 1..kg {
                let v = q[(base + c) as usize];
                lo = f32::min(lo, v);
                hi = f32::max(hi, v);
            }
            sc = scale8(lo, hi);
        }
        queries.min[run as usize] = lo;
        queries.scale[run as usize] = sc;
        run += units;
    }
    sync_cube();
    let mut item = t;
    while item < pairs * d {
        let (pair, c) = (item / d, item % d);
        let mut packed = 0u32;
        #[unroll]
        for half in 0..2u32 {
            let row = 2 * pair + half;
            let (i, g) = (row / group, row % group);
            if row < live_rows && first_query + i < q_len {
                let run = (row * parts + c / kg) as usize;
                let v = q[(((stream * group + g) * q_len + first_query + i) * d + c) as usize];
                packed |= u32::cast_from(code8(v, queries.min[run], queries.scale[run])) << (16 * half);
            }
        }
        queries.pairs[item as usize] = packed;
        item += units;
    }
    sync_cube();
    let mut run = t;
    while run < rows * parts {
        let (row, part) = (run / parts, run % parts);
        let (pair, half) = (row / 2, row % 2);
        let mut total = 0u32;
        for c in 0..kg {
            total += (queries.pairs[(pair * d + part * kg + c) as usize] >> (16 * half)) & 0xFFFF;
        }
        queries.sum[run as usize] = f32::cast_from(total);
        run += units;
    }
}

/// Step 2a: stages the key block from slot `block_first` of `stream` (`len` slots; key words
/// `[streams · len, words_per_key]`, metadata rows of `key_meta_pitch`) in `keys`: its words
/// transposed (`[word, key]`) and its metadata (`[part, key]`); zeros past the last slot.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn stage_keys(
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    keys: &mut KeyTile,
    stream: u32,
    len: u32,
    block_first: u32,
    key_meta_pitch: u32,
    #[comptime] geo: PrefillGeometry,
) {
    let t = UNIT_POS;
    let units = CUBE_DIM;
    let parts = comptime!(geo.head_dim / geo.key_group);
    let pi = geo.partition;
    let wpk = comptime!(geo.words_per_key());
    let mut item = t;
    while item < pi * wpk {
        let (key, w) = (item / wpk, item % wpk);
        let slot = block_first + key;
        let mut word = 0u32;
        if slot < len {
            word = k_words[((stream * len + slot) * wpk + w) as usize];
        }
        keys.words[(w * pi + key) as usize] = word;
        item += units;
    }
    let mut item = t;
    while item < pi * parts {
        let (key, part) = (item / parts, item % parts);
        let slot = block_first + key;
        let mut km = 0.0f32;
        let mut ks = 0.0f32;
        let mut k_sum = 0.0f32;
        if slot < len {
            let at = ((stream * len + slot) * key_meta_pitch + part) as usize;
            let params = k_params[at];
            km = params_min(params);
            ks = params_scale(params);
            k_sum = f32::cast_from(k_sums[at]);
        }
        keys.min[(part * pi + key) as usize] = km;
        keys.scale[(part * pi + key) as usize] = ks;
        keys.sum[(part * pi + key) as usize] = k_sum;
        item += units;
    }
}

/// Adds the products of the 8-bit Q codes of row pairs `pair0` and `pair0 + 1` (packed two rows
/// per `u32`) with the K codes of two keys, over packed key words `words` of channels `first ..`,
/// to `dot[(2 · pp + half) · 2 + key]`. A lane's sum over one word stays below 2^16.
#[cube]
fn score_words(
    words: &Array<u32>,
    q_pairs: &SharedMemory<u32>,
    pair0: u32,
    first: u32,
    dot: &mut Array<u32>,
    #[comptime] head_dim: u32,
    #[comptime] bits: u32,
) {
    let per_word = comptime!(32 / bits);
    let mask = (1u32 << bits) - 1;
    let mut sums = Array::<u32>::new(4usize);
    #[unroll]
    for i in 0..4u32 {
        sums[i as usize] = 0;
    }
    #[unroll]
    for j in 0..per_word {
        let c0 = (words[0] >> (j * bits)) & mask;
        let c1 = (words[1] >> (j * bits)) & mask;
        #[unroll]
        for pp in 0..2u32 {
            let q = q_pairs[((pair0 + pp) * head_dim + first + j) as usize];
            sums[(2 * pp) as usize] += q * c0;
            sums[(2 * pp + 1) as usize] += q * c1;
        }
    }
    #[unroll]
    for pp in 0..2u32 {
        #[unroll]
        for key in 0..2u32 {
            let s = sums[(2 * pp + key) as usize];
            dot[((2 * pp) * 2 + key) as usize] += s & 0xFFFF;
            dot[((2 * pp + 1) * 2 + key) as usize] += s >> 16;
        }
    }
}

/// Step 2b: the scores of the block from slot `block_first` into `s: [rows, Π]`, scaled, or
/// masked where the row's query does not see the slot: 4 rows × 2 keys per item (keys `key_lane`
/// and `key_lane + Π / 2`), integer dot products of the Q codes with the K codes per channel
/// group plus Eq. 4's corrections with the cached K sums.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_scores(
    keys: &KeyTile,
    queries: &QueryTile,
    s: &mut SharedMemory<f32>,
    block_first: u32,
    first_query: u32,
    first_pos: u32,
    q_len: u32,
    start: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: PrefillGeometry,
) {
    let t = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let d = geo.head_dim;
    let kg = geo.key_group;
    let parts = comptime!(geo.head_dim / geo.key_group);
    let pi = geo.partition;
    let rows = geo.rows;
    let live_rows = comptime!(geo.group * geo.queries);
    let per_word = comptime!(32 / geo.bits);
    let words_per_part = comptime!(geo.key_group * geo.bits / 32);
    let key_lanes = pi / SCORE_KEYS;
    let mut item = t;
    while item < rows / SCORE_ROWS * key_lanes {
        let (row0, key_lane) = ((item / key_lanes) * SCORE_ROWS, item % key_lanes);
        let mut sc = Array::<f32>::new(8usize);
        #[unroll]
        for i in 0..8u32 {
            sc[i as usize] = 0.0;
        }
        for part in 0..parts {
            let mut dot = Array::<u32>::new(8usize);
            #[unroll]
            for i in 0..8u32 {
                dot[i as usize] = 0;
            }
            for w in 0..words_per_part {
                let word_row = (part * words_per_part + w) * pi;
                let mut words = Array::<u32>::new(2usize);
                words[0] = keys.words[(word_row + key_lane) as usize];
                words[1] = keys.words[(word_row + key_lane + key_lanes) as usize];
                score_words(&words, &queries.pairs, row0 / 2, part * kg + w * per_word, &mut dot, d, geo.bits);
            }
            #[unroll]
            for key in 0..2u32 {
                let k_at = (part * pi + key_lane + key * key_lanes) as usize;
                let (ks, km, k_sum) = (keys.scale[k_at], keys.min[k_at], keys.sum[k_at]);
                #[unroll]
                for r in 0..SCORE_ROWS {
                    let qm = ((row0 + r) * parts + part) as usize;
                    sc[(r * 2 + key) as usize] += queries.scale[qm] * ks * f32::cast_from(dot[(r * 2 + key) as usize])
                        + queries.scale[qm] * queries.sum[qm] * km
                        + queries.min[qm] * ks * k_sum
                        + f32::cast_from(kg) * queries.min[qm] * km;
                }
            }
        }
        #[unroll]
        for r in 0..SCORE_ROWS {
            let row = row0 + r;
            let query = first_query + row / group;
            let live = row < live_rows && query < q_len;
            #[unroll]
            for key in 0..2u32 {
                let key_in_block = key_lane + key * key_lanes;
                let slot = block_first + key_in_block;
                let mut value = masked();
                if live && slot_visible(slot, first_pos + query, start, window) {
                    value = sc[(r * 2 + key) as usize] * scale;
                }
                s[(row * pi + key_in_block) as usize] = value;
            }
        }
        item += units;
    }
}
