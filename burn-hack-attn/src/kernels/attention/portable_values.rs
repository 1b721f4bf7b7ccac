//! The portable decode kernel's ([`decode_kernel`](super::portable_kernel::decode_kernel))
//! softmax and value steps: the numerators and 8-bit P codes per (head, block) ([`block_weights`],
//! step 3) and P·V per channel ([`chunk_values`], step 4).

use burn_kvcompress::kernels::{masked_score as masked, min_max_runs, sum_runs};
use cubecl::prelude::*;

use super::portable_kernel::DecodeGeometry;
use super::portable_scores::dot_word;
use crate::kernels::{
    eight_bit::{code8, numerator, scale8},
    params_word::{params_min, params_scale},
};

/// Step 3: from the calling unit's `score` per head, the softmax numerators (`p`, `[group,
/// chunk]`) and P to 8 bits per (head, block) of the chunk from slot `first`: run `g ·
/// chunk_blocks + b` of `g · chunk + t`, with `b = t / Π`; its codes (`p_pairs`, two heads per
/// `u32`), min, scale, code sum and mass (`block_mass`), through the tree scratch `lo` and `hi`.
/// Returns the chunk's max score per head.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn block_weights(
    score: &Array<f32>,
    lo: &mut SharedMemory<f32>,
    hi: &mut SharedMemory<f32>,
    p: &mut SharedMemory<f32>,
    p_pairs: &mut SharedMemory<u32>,
    p_min: &mut SharedMemory<f32>,
    p_scale: &mut SharedMemory<f32>,
    p_sum: &mut SharedMemory<f32>,
    block_mass: &mut SharedMemory<f32>,
    first: u32,
    quantized_len: u32,
    #[comptime] geo: DecodeGeometry,
) -> Array<f32> {
    let t = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let pairs = comptime!(geo.head_pairs());
    let chunk = geo.chunk;
    let pi = geo.partition;
    let chunk_blocks = comptime!(geo.chunk / geo.partition);
    #[unroll]
    for g in 0..group {
        lo[(g * chunk + t) as usize] = score[g as usize];
        hi[(g * chunk + t) as usize] = score[g as usize];
    }
    sync_cube();
    min_max_runs(lo, hi, group * chunk_blocks, pi);
    let own_block = t / pi;
    let closed = first + own_block * pi < quantized_len;
    let mut head_max = Array::<f32>::new(comptime!(geo.group as usize));
    let mut codes = Array::<u32>::new(comptime!(2 * geo.head_pairs() as usize));
    let mut e = Array::<f32>::new(comptime!(geo.group as usize));
    #[unroll]
    for g in 0..2 * pairs {
        codes[g as usize] = 0;
    }
    #[unroll]
    for g in 0..group {
        let mut m = masked();
        for bb in 0..chunk_blocks {
            m = f32::max(m, hi[((g * chunk_blocks + bb) * pi) as usize]);
        }
        head_max[g as usize] = m;
        let root = ((g * chunk_blocks + own_block) * pi) as usize;
        let (s_min, s_max) = (lo[root], hi[root]);
        e[g as usize] = numerator(score[g as usize], m);
        if closed {
            let p_lo = numerator(s_min, m);
            let s = scale8(p_lo, numerator(s_max, m));
            codes[g as usize] = u32::cast_from(code8(e[g as usize], p_lo, s));
            if t == own_block * pi {
                p_min[(g * chunk_blocks + own_block) as usize] = p_lo;
                p_scale[(g * chunk_blocks + own_block) as usize] = s;
            }
        }
    }
    sync_cube();
    #[unroll]
    for g in 0..group {
        p[(g * chunk + t) as usize] = e[g as usize];
        lo[(g * chunk + t) as usize] = e[g as usize];
        hi[(g * chunk + t) as usize] = f32::cast_from(codes[g as usize]);
    }
    #[unroll]
    for pair in 0..pairs {
        p_pairs[(pair * chunk + t) as usize] = codes[(2 * pair) as usize] | (codes[(2 * pair + 1) as usize] << 16);
    }
    sync_cube();
    sum_runs(lo, hi, group * chunk_blocks, pi);
    let mut run = t;
    while run < group * chunk_blocks {
        block_mass[run as usize] = lo[(run * pi) as usize];
        p_sum[run as usize] = hi[(run * pi) as usize];
        run += units;
    }
    head_max
}

/// Step 4: per channel, for every head, Eq. 4 over the chunk's closed blocks (P codes, unpacked V
/// codes, the cached V sums) and `p · v` in f32 over its tail slots; unit `(part, c)` takes blocks
/// `part, part + value_splits, …` and leaves its sums in `lo[(part · group + g) · head_dim + c]`.
#[allow(clippy::too_many_arguments)]
#[cube]
pub(super) fn chunk_values(
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    p: &SharedMemory<f32>,
    p_pairs: &SharedMemory<u32>,
    p_min: &SharedMemory<f32>,
    p_scale: &SharedMemory<f32>,
    p_sum: &SharedMemory<f32>,
    lo: &mut SharedMemory<f32>,
    stream: u32,
    len: u32,
    blocks: u32,
    first: u32,
    quantized_len: u32,
    tail_len: u32,
    #[comptime] geo: DecodeGeometry,
) {
    let t = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let pairs = comptime!(geo.head_pairs());
    let d = geo.head_dim;
    let chunk = geo.chunk;
    let pi = geo.partition;
    let chunk_blocks = comptime!(geo.chunk / geo.partition);
    let per_word = comptime!(32 / geo.bits);
    let value_splits = comptime!(geo.value_splits());
    let words_per_value = comptime!(geo.partition * geo.bits / 32);
    let mut item = t;
    while item < value_splits * d {
        let (part, c) = (item / d, item % d);
        let mut acc = Array::<f32>::new(comptime!(geo.group as usize));
        #[unroll]
        for g in 0..group {
            acc[g as usize] = 0.0;
        }
        let mut b = part;
        while b < chunk_blocks {
            let block_first = first + b * pi;
            if block_first < quantized_len {
                let row = (stream * blocks + block_first / pi) * d + c;
                let mut dot = Array::<u32>::new(comptime!(2 * geo.head_pairs() as usize));
                #[unroll]
                for g in 0..2 * pairs {
                    dot[g as usize] = 0;
                }
                for w in 0..words_per_value {
                    let word = v_words[(row * words_per_value + w) as usize];
                    dot_word(word, p_pairs, b * pi + w * per_word, chunk, &mut dot, pairs, geo.bits);
                }
                let params = v_params[row as usize];
                let (vs, vm, v_sum) = (params_scale(params), params_min(params), f32::cast_from(v_sums[row as usize]));
                #[unroll]
                for g in 0..group {
                    let pb = (g * chunk_blocks + b) as usize;
                    acc[g as usize] += p_scale[pb] * vs * f32::cast_from(dot[g as usize])
                        + p_scale[pb] * p_sum[pb] * vm
                        + p_min[pb] * vs * v_sum
                        + f32::cast_from(pi) * p_min[pb] * vm;
                }
            } else {
                for i in 0..pi {
                    let slot = block_first + i;
                    if slot < len {
                        let tail_row = stream * tail_len + (slot - quantized_len);
                        let v = tail[(tail_row * d + c) as usize];
                        #[unroll]
                        for g in 0..group {
                            acc[g as usize] += p[(g * chunk + b * pi + i) as usize] * v;
                        }
                    }
                }
            }
            b += value_splits;
        }
        #[unroll]
        for g in 0..group {
            lo[((part * group + g) * d + c) as usize] = acc[g as usize];
        }
        item += units;
    }
}
