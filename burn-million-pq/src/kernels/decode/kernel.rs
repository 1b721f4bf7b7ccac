//! The fused PQ decode attention kernel (one query slot per sequence), flash-decoding style.
//!
//! One cube of `chunk * lanes` units per (sequence, KV head, split); it serves all `group` query
//! heads of its KV head, so each code word and recent vector is read once per cube. A split covers
//! `chunk` slots of the coded range, or of the recent window:
//! 1. scores: for a coded slot, per query head, `Σ_i T[i, code_i]` (in subspace order) from the
//!    lookup table `T` (query · key centroid, already scaled, built once per step); for a recent
//!    slot, `q · k` in f32, scaled. Masked slots (padding, sliding window) are excluded. The split's value code
//!    words are staged in shared memory;
//! 2. per head, the split's max score `m`, `p = exp(s - m)` and `l = Σ p`;
//! 3. per (head, channel): `Σ p · v`, with `v` rebuilt from its value code and the value
//!    codebook (coded slots) or read in f32 (recent slots);
//! 4. the unnormalized output, `m` and `l` go to the log-sum-exp merge
//!    (`burn_kvcompress::kernels::merge_partials`).

use burn_kvcompress::kernels::{decode_slot_visible, masked_score, split_softmax};
use cubecl::prelude::*;

/// Shapes fixed at compile time (one compiled kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Subspaces per vector.
    pub subspaces: u32,
    /// Channels per subspace.
    pub sub_dim: u32,
    /// Centroids per subspace.
    pub centroids: u32,
    /// Bits per code.
    pub nbits: u32,
    /// Packed words per vector.
    pub words: u32,
    /// Slots per split.
    pub chunk: u32,
    /// Units per slot when scoring (`chunk * lanes` = units per cube).
    pub lanes: u32,
}

/// Code `i` of the packed vector whose words start at `base` in `words`.
#[cube]
fn code_at(words: &SharedMemory<u32>, base: u32, i: u32, #[comptime] nbits: u32) -> u32 {
    let per_word = 32 / nbits;
    (words[(base + i / per_word) as usize] >> ((i % per_word) * nbits)) & ((1u32 << nbits) - 1)
}

/// One split of PQ decode attention; see the module documentation.
///
/// - `table`: `[batch, kv_heads, subspaces, centroids, group]`, scaled query·centroid products;
/// - `k_codes`, `v_codes`: `[batch, kv_heads, coded, words]`; `v_books`: `[groups, subspaces,
///   centroids, sub_dim]`; `k_recent`, `v_recent`: `[batch, kv_heads, len - coded, head_dim]`;
/// - `q`: `[batch, kv_heads * group, head_dim]`; `key_start`: `[batch]`;
/// - outputs per (query head, split): `out` (`head_dim` each), `out_max`, `out_sum`.
#[allow(clippy::too_many_arguments)]
#[cube(launch)]
pub fn decode_kernel(
    q: &Array<f32>,
    table: &Array<f32>,
    k_codes: &Array<u32>,
    v_codes: &Array<u32>,
    v_books: &Array<f32>,
    k_recent: &Array<f32>,
    v_recent: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    coded: u32,
    coded_splits: u32,
    window: u32,
    scale: f32,
    per_head_books: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let splits = CUBE_COUNT_X;
    let split = CUBE_POS_X;
    let stream = CUBE_POS_Y; // batch row * kv_heads + kv head
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let batch_row = stream / kv_heads;
    let kv_head = stream % kv_heads;
    let unit = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let d = geo.head_dim;
    let chunk = geo.chunk;
    let is_coded = split < coded_splits;
    let recent_len = len - coded;
    // The split's slots: `chunk` of the coded range, or of the recent window.
    let mut first = split * chunk;
    let mut end = coded;
    if !is_coded {
        first = coded + (split - coded_splits) * chunk;
        end = len;
    }
    let count = u32::min(chunk, end - first);

    let mut p = SharedMemory::<f32>::new((geo.group * geo.chunk) as usize);
    let mut words = SharedMemory::<u32>::new((geo.chunk * geo.words) as usize);
    let mut head_max = SharedMemory::<f32>::new(geo.group as usize);
    let mut partial = SharedMemory::<f32>::new((geo.group * geo.chunk * geo.lanes) as usize);

    // 1. Scores per (slot, head). `lanes` units share a slot: lane `l` takes the slot's code
    //    words `l, l + lanes, ...` (or channels, for a recent slot) and writes a partial sum;
    //    per subspace, the `group` heads' table entries of a code are adjacent. The slot's value
    //    code words go to shared memory. Then one unit per (slot, head) adds the lanes in order.
    let lanes = geo.lanes;
    let t = unit / lanes;
    let lane = unit % lanes;
    let slot = first + t;
    let mut allowed = false;
    if t < count {
        allowed = decode_slot_visible(slot, len, key_start[batch_row as usize], window);
    }
    for g in 0..group {
        partial[((g * chunk + t) * lanes + lane) as usize] = 0.0;
    }
    if allowed && is_coded {
        let row = stream * coded + slot;
        let per_word = 32 / geo.nbits;
        let mask = (1u32 << geo.nbits) - 1;
        let mut w = lane;
        while w < geo.words {
            words[(t * geo.words + w) as usize] = v_codes[(row * geo.words + w) as usize];
            let word = k_codes[(row * geo.words + w) as usize];
            for j in 0..per_word {
                let i = w * per_word + j;
                if i < geo.subspaces {
                    let c = (word >> (j * geo.nbits)) & mask;
                    let base = ((stream * geo.subspaces + i) * geo.centroids + c) * group;
                    for g in 0..group {
                        partial[((g * chunk + t) * lanes + lane) as usize] += table[(base + g) as usize];
                    }
                }
            }
            w += lanes;
        }
    }
    if allowed && !is_coded {
        let row = stream * recent_len + (slot - coded);
        for g in 0..group {
            let q_base = (stream * group + g) * d;
            let mut acc = 0.0f32;
            let mut c = lane;
            while c < d {
                acc += q[(q_base + c) as usize] * k_recent[(row * d + c) as usize];
                c += lanes;
            }
            partial[((g * chunk + t) * lanes + lane) as usize] = acc * scale;
        }
    }
    sync_cube();
    let mut pair = unit;
    while pair < group * chunk {
        let g = pair / chunk;
        let t = pair % chunk;
        let slot = first + t;
        let mut score = masked_score();
        let mut allowed = false;
        if t < count {
            allowed = decode_slot_visible(slot, len, key_start[batch_row as usize], window);
        }
        if allowed {
            score = 0.0;
            for l in 0..lanes {
                score += partial[((g * chunk + t) * lanes + l) as usize];
            }
        }
        p[pair as usize] = score;
        pair += units;
    }
    sync_cube();

    // 2. Per head: the split's max score (16 lanes per head, then one), then p = exp(s - m)
    //    (0 where masked).
    split_softmax(&mut p, &mut head_max, count, geo.group, geo.chunk);

    // 3. Per (head, channel): Σ p · v.
    let book_group = kv_head * per_head_books;
    let mut pair = unit;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let i = c / geo.sub_dim;
        let within = c % geo.sub_dim;
        let book_base = (book_group * geo.subspaces + i) * geo.centroids;
        let mut acc = 0.0f32;
        let mut l = 0.0f32;
        for t in 0..count {
            let weight = p[(g * chunk + t) as usize];
            l += weight;
            if weight > 0.0 {
                if is_coded {
                    let code = code_at(&words, t * geo.words, i, geo.nbits);
                    acc += weight * v_books[((book_base + code) * geo.sub_dim + within) as usize];
                } else {
                    let row = stream * recent_len + (first - coded + t);
                    acc += weight * v_recent[(row * d + c) as usize];
                }
            }
        }
        let head = stream * group + g;
        out[((head * splits + split) * d + c) as usize] = acc;
        if c == 0 {
            out_max[(head * splits + split) as usize] = head_max[g as usize];
            out_sum[(head * splits + split) as usize] = l;
        }
        pair += units;
    }
}
