//! The portable decode kernel's ([`decode_kernel`](super::portable_kernel::decode_kernel)) score
//! step: the calling unit's slot scored for every head of the group ([`slot_scores`], step 2).

use burn_kvcompress::kernels::{decode_slot_visible, masked_score as masked};
use cubecl::prelude::*;

use super::portable_kernel::DecodeGeometry;
use crate::kernels::params_word::{params_min, params_scale};

/// Adds, for every pair of heads, the products of the `32 / bits` codes packed in `word` with the
/// pair's 8-bit codes `packed[pair · stride + first + j]` (two heads per `u32`, 16-bit lanes) to
/// `dot[2 · pair]` and `dot[2 · pair + 1]`. A lane's sum over one word stays below 2^16.
#[cube]
pub(super) fn dot_word(
    word: u32,
    packed: &SharedMemory<u32>,
    first: u32,
    stride: u32,
    dot: &mut Array<u32>,
    #[comptime] pairs: u32,
    #[comptime] bits: u32,
) {
    let per_word = comptime!(32 / bits);
    let mask = (1u32 << bits) - 1;
    let mut sums = Array::<u32>::new(comptime!(pairs as usize));
    #[unroll]
    for pair in 0..pairs {
        sums[pair as usize] = 0;
    }
    #[unroll]
    for j in 0..per_word {
        let code = (word >> (j * bits)) & mask;
        #[unroll]
        for pair in 0..pairs {
            sums[pair as usize] += packed[(pair * stride + first + j) as usize] * code;
        }
    }
    #[unroll]
    for pair in 0..pairs {
        dot[(2 * pair) as usize] += sums[pair as usize] & 0xFFFF;
        dot[(2 * pair + 1) as usize] += sums[pair as usize] >> 16;
    }
}

/// Step 2: the scores of `slot` of `stream` (`len` slots) for every head of the group, scaled, or
/// masked where the step's query does not see the slot: each packed key word is read and unpacked
/// once, each code multiplied into both heads of a pair at once, with the group's query codes
/// `q_pairs` and their runs' `q_min`, `q_scale`, `q_sum` (per `head · parts + part`).
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn slot_scores(
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    key_start: &Array<u32>,
    q_pairs: &SharedMemory<u32>,
    q_min: &SharedMemory<f32>,
    q_scale: &SharedMemory<f32>,
    q_sum: &SharedMemory<f32>,
    stream: u32,
    batch_row: u32,
    slot: u32,
    key_meta_pitch: u32,
    len: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: DecodeGeometry,
) -> Array<f32> {
    let group = geo.group;
    let pairs = comptime!(geo.head_pairs());
    let d = geo.head_dim;
    let kg = geo.key_group;
    let parts = d / kg;
    let per_word = comptime!(32 / geo.bits);
    let words_per_key = d * geo.bits / 32;
    let words_per_part = comptime!(geo.key_group * geo.bits / 32);
    let mut score = Array::<f32>::new(comptime!(geo.group as usize));
    #[unroll]
    for g in 0..group {
        score[g as usize] = masked();
    }
    if slot < len && decode_slot_visible(slot, len, key_start[batch_row as usize], window) {
        let row = stream * len + slot;
        let mut acc = Array::<f32>::new(comptime!(geo.group as usize));
        #[unroll]
        for g in 0..group {
            acc[g as usize] = 0.0;
        }
        for part in 0..parts {
            let mut dot = Array::<u32>::new(comptime!(2 * geo.head_pairs() as usize));
            #[unroll]
            for g in 0..2 * pairs {
                dot[g as usize] = 0;
            }
            for w in 0..words_per_part {
                let word = k_words[(row * words_per_key + part * words_per_part + w) as usize];
                dot_word(word, q_pairs, part * kg + w * per_word, d, &mut dot, pairs, geo.bits);
            }
            let meta = (row * key_meta_pitch + part) as usize;
            let params = k_params[meta];
            let (ks, km, k_sum) = (params_scale(params), params_min(params), f32::cast_from(k_sums[meta]));
            #[unroll]
            for g in 0..group {
                let qm = (g * parts + part) as usize;
                acc[g as usize] += q_scale[qm] * ks * f32::cast_from(dot[g as usize])
                    + q_scale[qm] * q_sum[qm] * km
                    + q_min[qm] * ks * k_sum
                    + f32::cast_from(kg) * q_min[qm] * km;
            }
        }
        #[unroll]
        for g in 0..group {
            score[g as usize] = acc[g as usize] * scale;
        }
    }
    score
}
