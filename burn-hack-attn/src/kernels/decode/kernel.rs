//! The fused HACK decode attention kernel (one query slot per sequence), flash-decoding style.
//!
//! One cube per (sequence, KV head, chunk of `chunk` slots); it serves all `group` query heads of
//! its KV head, so each packed key and value is read once per cube:
//! 1. quantize the queries to 8 bits per key channel group (shared memory);
//! 2. per slot, for every head: integer dot products of Q codes with the K codes per channel
//!    group (each packed word read once), plus Eq. 4's corrections with the cached K sums,
//!    scaled; masked slots excluded;
//! 3. per head: the chunk's max score `m` and `p = exp(s - m)`, and `l = Σ p`;
//! 4. per (head, Π-block of the chunk): P quantized to 8 bits (min/max of the unnormalized `p`:
//!    the same codes as quantizing the normalized P, up to float rounding), with its code sum;
//! 5. per (head, channel): Σ over closed blocks of Eq. 4 on P codes and unpacked V codes with the
//!    cached V sums, plus `p · v` in f32 over the tail's slots;
//! 6. write the unnormalized output, `m` and `l` of the chunk; `burn_kvcompress::kernels::merge_kernel` combines the
//!    chunks with a log-sum-exp.
//!
//! Chunks start at multiples of Π (`chunk` is a multiple of Π), so each of a chunk's blocks is
//! either a closed block or lies in the tail.

use burn_kvcompress::kernels::{decode_slot_visible, masked_score as masked};
use cubecl::prelude::*;

/// Shapes fixed at compile time (one compiled kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Channels per key group: a multiple of 16 (`HackCache::check_supported`), so whole packed
    /// words.
    pub key_group: u32,
    /// Π.
    pub partition: u32,
    /// K/V code width.
    pub bits: u32,
    /// Slots per cube (a multiple of Π).
    pub chunk: u32,
}

/// Quantizes `buf[start..start + n]` in place to 8-bit codes (asymmetric min/max, round to
/// nearest, scale 1 for a constant run) and stores its min, scale and code sum at `meta`.
#[cube]
fn quantize8_in_place(
    buf: &mut SharedMemory<f32>,
    start: u32,
    n: u32,
    mins: &mut SharedMemory<f32>,
    scales: &mut SharedMemory<f32>,
    sums: &mut SharedMemory<f32>,
    meta: u32,
) {
    let mut lo = buf[start as usize];
    let mut hi = lo;
    for i in 1..n {
        let v = buf[(start + i) as usize];
        lo = f32::min(lo, v);
        hi = f32::max(hi, v);
    }
    let mut s = (hi - lo) / 255.0;
    if hi <= lo {
        s = 1.0;
    }
    let mut total = 0.0f32;
    for i in 0..n {
        let c = f32::floor((buf[(start + i) as usize] - lo) / s + 0.5).clamp(0.0, 255.0);
        buf[(start + i) as usize] = c;
        total += c;
    }
    mins[meta as usize] = lo;
    scales[meta as usize] = s;
    sums[meta as usize] = total;
}

/// One chunk of HACK decode attention; see the module documentation.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn decode_kernel(
    q: &Array<f32>,
    k_words: &Array<u32>,
    k_min: &Array<f32>,
    k_scale: &Array<f32>,
    k_sums: &Array<u32>,
    v_words: &Array<u32>,
    v_min: &Array<f32>,
    v_scale: &Array<f32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    blocks: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: DecodeGeometry,
) {
    let splits = CUBE_COUNT_X;
    let split = CUBE_POS_X;
    let stream = CUBE_POS_Y; // batch row * kv_heads + kv head
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let batch_row = stream / kv_heads;
    let unit = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let d = geo.head_dim;
    let parts = d / geo.key_group;
    let chunk = geo.chunk;
    let pi = geo.partition;
    let chunk_blocks = chunk / pi;
    let first = split * chunk;
    let quantized_len = blocks * pi;
    let tail_len = len - quantized_len;

    let mut q_codes = SharedMemory::<f32>::new((geo.group * geo.head_dim) as usize);
    let mut q_min = SharedMemory::<f32>::new((geo.group * geo.head_dim / geo.key_group) as usize);
    let mut q_scale = SharedMemory::<f32>::new((geo.group * geo.head_dim / geo.key_group) as usize);
    let mut q_sum = SharedMemory::<f32>::new((geo.group * geo.head_dim / geo.key_group) as usize);
    let mut p = SharedMemory::<f32>::new((geo.group * geo.chunk) as usize);
    let mut p_min = SharedMemory::<f32>::new((geo.group * geo.chunk / geo.partition) as usize);
    let mut p_scale = SharedMemory::<f32>::new((geo.group * geo.chunk / geo.partition) as usize);
    let mut p_sum = SharedMemory::<f32>::new((geo.group * geo.chunk / geo.partition) as usize);
    let mut head_max = SharedMemory::<f32>::new(geo.group as usize);
    let mut block_mass = SharedMemory::<f32>::new((geo.group * geo.chunk / geo.partition) as usize);

    // 1. Q to 8 bits per (head, key group), in shared memory.
    let q_base = stream * group * d;
    let mut i = unit;
    while i < group * d {
        q_codes[i as usize] = q[(q_base + i) as usize];
        i += units;
    }
    sync_cube();
    let mut pair = unit;
    while pair < group * parts {
        quantize8_in_place(
            &mut q_codes,
            pair * geo.key_group,
            geo.key_group,
            &mut q_min,
            &mut q_scale,
            &mut q_sum,
            pair,
        );
        pair += units;
    }
    sync_cube();

    // 2. Scores, one unit per slot of the chunk for all the group's heads: each packed key word is
    //    read once, and its codes are dotted with every head's Q codes.
    let words_per_key = d * geo.bits / 32;
    let per_word = comptime!(32 / geo.bits);
    let words_per_part = comptime!(geo.key_group * geo.bits / 32);
    let mask = (1u32 << geo.bits) - 1;
    let mut t = unit;
    while t < chunk {
        let slot = first + t;
        let mut score = Array::<f32>::new(geo.group as usize);
        #[unroll]
        for g in 0..geo.group {
            score[g as usize] = masked();
        }
        if slot < len && decode_slot_visible(slot, len, key_start[batch_row as usize], window) {
            let row = stream * len + slot;
            let mut acc = Array::<f32>::new(geo.group as usize);
            #[unroll]
            for g in 0..geo.group {
                acc[g as usize] = 0.0;
            }
            for part in 0..parts {
                let mut dot = Array::<u32>::new(geo.group as usize);
                #[unroll]
                for g in 0..geo.group {
                    dot[g as usize] = 0;
                }
                for w in 0..words_per_part {
                    let word = k_words[(row * words_per_key + part * words_per_part + w) as usize];
                    let c0 = part * geo.key_group + w * per_word;
                    #[unroll]
                    for j in 0..per_word {
                        let code = (word >> (j * geo.bits)) & mask;
                        #[unroll]
                        for g in 0..geo.group {
                            dot[g as usize] += u32::cast_from(q_codes[(g * d + c0 + j) as usize]) * code;
                        }
                    }
                }
                let meta = (row * parts + part) as usize;
                let (ks, km, k_sum) = (k_scale[meta], k_min[meta], f32::cast_from(k_sums[meta]));
                #[unroll]
                for g in 0..geo.group {
                    let qm = (g * parts + part) as usize;
                    acc[g as usize] += q_scale[qm] * ks * f32::cast_from(dot[g as usize])
                        + q_scale[qm] * q_sum[qm] * km
                        + q_min[qm] * ks * k_sum
                        + f32::cast_from(geo.key_group) * q_min[qm] * km;
                }
            }
            #[unroll]
            for g in 0..geo.group {
                score[g as usize] = acc[g as usize] * scale;
            }
        }
        #[unroll]
        for g in 0..geo.group {
            p[(g * chunk + t) as usize] = score[g as usize];
        }
        t += units;
    }
    sync_cube();

    // 3. Per head: the chunk's max score, then p = exp(s - m) (0 where masked).
    if unit < group {
        let mut m = masked();
        for t in 0..chunk {
            m = f32::max(m, p[(unit * chunk + t) as usize]);
        }
        head_max[unit as usize] = m;
    }
    sync_cube();
    let mut pair = unit;
    while pair < group * chunk {
        let g = pair % group;
        let s = p[(g * chunk + pair / group) as usize];
        let mut e = 0.0f32;
        if s > masked() {
            e = f32::exp(s - head_max[g as usize]);
        }
        p[(g * chunk + pair / group) as usize] = e;
        pair += units;
    }
    sync_cube();

    // 4. Per (head, block of the chunk): its exact mass (for the softmax denominator) and, for a
    //    closed block, P to 8 bits in place.
    let mut pair = unit;
    while pair < group * chunk_blocks {
        let start = (pair / chunk_blocks) * chunk + (pair % chunk_blocks) * pi;
        let mut mass = 0.0f32;
        for i in 0..pi {
            mass += p[(start + i) as usize];
        }
        block_mass[pair as usize] = mass;
        if first + (pair % chunk_blocks) * pi < quantized_len {
            quantize8_in_place(&mut p, start, pi, &mut p_min, &mut p_scale, &mut p_sum, pair);
        }
        pair += units;
    }
    sync_cube();

    // 5. Per (head, channel): Eq. 4 over the closed blocks, f32 over the tail.
    let words_per_value = pi * geo.bits / 32;
    let mut pair = unit;
    while pair < group * d {
        let g = pair / d;
        let c = pair % d;
        let mut acc = 0.0f32;
        for b in 0..chunk_blocks {
            let block_first = first + b * pi;
            let pb = (g * chunk_blocks + b) as usize;
            let p_base = g * chunk + b * pi;
            if block_first < quantized_len {
                let row = (stream * blocks + block_first / pi) * d + c;
                let mut dot = 0u32;
                for w in 0..words_per_value {
                    let word = v_words[(row * words_per_value + w) as usize];
                    #[unroll]
                    for j in 0..per_word {
                        let code = (word >> (j * geo.bits)) & mask;
                        dot += u32::cast_from(p[(p_base + w * per_word + j) as usize]) * code;
                    }
                }
                let (vs, vm) = (v_scale[row as usize], v_min[row as usize]);
                acc += p_scale[pb] * vs * f32::cast_from(dot)
                    + p_scale[pb] * p_sum[pb] * vm
                    + p_min[pb] * vs * f32::cast_from(v_sums[row as usize])
                    + f32::cast_from(pi) * p_min[pb] * vm;
            } else {
                for i in 0..pi {
                    let slot = block_first + i;
                    if slot < len {
                        let tail_row = stream * tail_len + (slot - quantized_len);
                        acc += p[(p_base + i) as usize] * tail[(tail_row * d + c) as usize];
                    }
                }
            }
        }
        let head = stream * group + g;
        out[((head * splits + split) * d + c) as usize] = acc;
        if c == 0 {
            let mut l = 0.0f32;
            for b in 0..chunk_blocks {
                l += block_mass[(g * chunk_blocks + b) as usize];
            }
            out_max[(head * splits + split) as usize] = head_max[g as usize];
            out_sum[(head * splits + split) as usize] = l;
        }
        pair += units;
    }
}
