//! The fused HACK decode attention kernel (one query slot per sequence), flash-decoding style.
//!
//! One cube per (sequence, KV head, chunk of `chunk` slots), one unit per slot of the chunk; it
//! serves all `group` query heads of its KV head, so each packed key and value word is read and
//! unpacked once per cube:
//! 1. read the group's 8-bit query codes per (head, key channel group) and their min, scale and
//!    code sum, which [`query_kernel`](super::query_kernel) computed once per (sequence, KV head)
//!    for all of its chunks;
//! 2. each unit scores its slot for every head: integer dot products of Q codes with the K codes
//!    per channel group, plus Eq. 4's corrections with the cached K sums, scaled; masked slots
//!    excluded;
//! 3. per (head, Π-block of the chunk): min/max score trees give the head's max `m` and the
//!    block's min/max of `p = exp(s − m)`; each unit quantizes its own `p` to 8 bits (the block's
//!    min/max of the unnormalized `p`: the same codes as quantizing the normalized P, up to float
//!    rounding); sum trees give each block's mass and P code sum;
//! 4. per channel, for every head: Σ over closed blocks of Eq. 4 on P codes and unpacked V codes
//!    with the cached V sums, plus `p · v` in f32 over the tail's slots; the chunk's blocks are
//!    split over `chunk / head_dim` units per channel and their sums added in shared memory;
//! 5. write the unnormalized output, `m` and `l = Σ p` of the chunk;
//!    `burn_kvcompress::kernels::merge_kernel` combines the chunks with a log-sum-exp.
//!
//! The integer products pack two heads' 8-bit codes into one `u32` (16-bit lanes): one multiply by
//! a K or V code serves both heads. A lane's sum over one packed word stays below 2^16
//! (16 codes · 255 · 3 at 2 bits, 8 · 255 · 15 at 4), and it is added to the heads' `u32` dot
//! products after every word.
//!
//! Chunks start at multiples of Π (`chunk` is a multiple of Π), so each of a chunk's blocks is
//! either a closed block or lies in the tail.

use burn_kvcompress::kernels::{decode_slot_visible, masked_score as masked, min_max_runs, sum_runs, SplitOut};
use cubecl::prelude::*;

use super::query_kernel::QueryShape;
use crate::kernels::{
    eight_bit::{code8, numerator, scale8},
    params_word::{params_min, params_scale},
};

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
    /// Slots per cube (a multiple of Π), and units per cube.
    pub chunk: u32,
}

/// Static shared memory a CUDA kernel may declare.
const MAX_SHARED_BYTES: u32 = 48 * 1024;

impl DecodeGeometry {
    /// Bytes of shared memory the kernel declares: two tree scratch arrays, the f32 numerators,
    /// the packed Q and P codes and the per-run metadata.
    pub fn shared_bytes(&self) -> u32 {
        let metadata = self.group * (3 * self.head_dim / self.key_group + 4 * self.chunk / self.partition);
        4 * (2 * self.scratch() + self.group * self.chunk + self.head_pairs() * (self.head_dim + self.chunk) + metadata)
    }

    /// Whether the kernel's shared memory fits a device that gives a cube `device_bytes` (and the
    /// static 48 KiB a CUDA kernel may declare). It grows with the group and the head size:
    /// lavapipe's 32 KiB take 8 query heads per KV head at 128 channels, not at 256.
    pub fn fits(&self, device_bytes: usize) -> bool {
        self.shared_bytes() as usize <= device_bytes.min(MAX_SHARED_BYTES as usize)
    }

    /// Pairs of heads whose codes share a packed word (the last one half empty for an odd group).
    pub fn head_pairs(&self) -> u32 {
        self.queries().pairs()
    }

    /// The shape of the group's queries.
    pub fn queries(&self) -> QueryShape {
        QueryShape { group: self.group, head_dim: self.head_dim, key_group: self.key_group }
    }

    /// Units per channel in the value phase: each takes every `value_splits`-th block of the
    /// chunk.
    pub fn value_splits(&self) -> u32 {
        (self.chunk / self.head_dim).clamp(1, self.chunk / self.partition)
    }

    /// Length of the two tree scratch arrays: a score per (head, slot), or a partial output per
    /// (value split, head, channel).
    fn scratch(&self) -> u32 {
        self.group * self.chunk.max(self.head_dim)
    }
}

/// Adds, for every pair of heads, the products of the `32 / bits` codes packed in `word` with the
/// pair's 8-bit codes `packed[pair · stride + first + j]` (two heads per `u32`, 16-bit lanes) to
/// `dot[2 · pair]` and `dot[2 · pair + 1]`. A lane's sum over one word stays below 2^16.
#[cube]
fn dot_word(
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

/// One chunk of HACK decode attention; see the module documentation.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn decode_kernel(
    q_codes: &Array<u32>,
    q_meta: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    key_meta_pitch: u32,
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
    let t = UNIT_POS; // this unit's slot in the chunk
    let units = CUBE_DIM;
    let group = geo.group;
    let pairs = comptime!(geo.head_pairs());
    let d = geo.head_dim;
    let kg = geo.key_group;
    let parts = d / kg;
    let chunk = geo.chunk;
    let pi = geo.partition;
    let chunk_blocks = comptime!(geo.chunk / geo.partition);
    let first = split * chunk;
    let quantized_len = blocks * pi;
    let tail_len = len - quantized_len;
    let per_word = comptime!(32 / geo.bits);

    let mut lo = SharedMemory::<f32>::new(comptime!(geo.scratch() as usize));
    let mut hi = SharedMemory::<f32>::new(comptime!(geo.scratch() as usize));
    let mut q_pairs = SharedMemory::<u32>::new(comptime!((geo.head_pairs() * geo.head_dim) as usize));
    let mut q_min = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim / geo.key_group) as usize));
    let mut q_scale = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim / geo.key_group) as usize));
    let mut q_sum = SharedMemory::<f32>::new(comptime!((geo.group * geo.head_dim / geo.key_group) as usize));
    let mut p = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk) as usize));
    let mut p_pairs = SharedMemory::<u32>::new(comptime!((geo.head_pairs() * geo.chunk) as usize));
    let mut p_min = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));
    let mut p_scale = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));
    let mut p_sum = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));
    let mut block_mass = SharedMemory::<f32>::new(comptime!((geo.group * geo.chunk / geo.partition) as usize));

    // 1. The group's 8-bit query codes (two heads per word) and their runs' metadata, from
    //    `query_kernel`.
    let runs = comptime!(geo.group * geo.head_dim / geo.key_group);
    let mut item = t;
    while item < pairs * d {
        q_pairs[item as usize] = q_codes[(stream * pairs * d + item) as usize];
        item += units;
    }
    let mut run = t;
    while run < runs {
        let at = stream * 3 * runs + run;
        q_min[run as usize] = q_meta[at as usize];
        q_scale[run as usize] = q_meta[(at + runs) as usize];
        q_sum[run as usize] = q_meta[(at + 2 * runs) as usize];
        run += units;
    }
    sync_cube();

    // 2. This unit's slot, scored for every head: each packed key word is read and unpacked once,
    //    each code multiplied into both heads of a pair at once.
    let slot = first + t;
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
                dot_word(word, &q_pairs, part * kg + w * per_word, d, &mut dot, pairs, geo.bits);
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

    // 3. Softmax numerators and P to 8 bits per (head, block): run `g · chunk_blocks + b` of
    //    `g · chunk + t`, with `b = t / Π`.
    #[unroll]
    for g in 0..group {
        lo[(g * chunk + t) as usize] = score[g as usize];
        hi[(g * chunk + t) as usize] = score[g as usize];
    }
    sync_cube();
    min_max_runs(&mut lo, &mut hi, group * chunk_blocks, pi);
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
    sum_runs(&mut lo, &mut hi, group * chunk_blocks, pi);
    let mut run = t;
    while run < group * chunk_blocks {
        block_mass[run as usize] = lo[(run * pi) as usize];
        p_sum[run as usize] = hi[(run * pi) as usize];
        run += units;
    }
    sync_cube();

    // 4. Per channel, for every head: Eq. 4 over the closed blocks, f32 over the tail; unit
    //    `(part, c)` takes blocks `part, part + value_splits, …` and leaves its sums in `lo`.
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
                    dot_word(word, &p_pairs, b * pi + w * per_word, chunk, &mut dot, pairs, geo.bits);
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
    sync_cube();

    // 5. The chunk's unnormalized output, max and mass per head.
    let mut item = t;
    while item < group * d {
        let (g, c) = (item / d, item % d);
        let mut total = 0.0f32;
        #[unroll]
        for part in 0..value_splits {
            total += lo[((part * group + g) * d + c) as usize];
        }
        let target = SplitOut { first_head: stream * group, split, splits };
        target.write_output(out, g, c, total, d);
        if c == 0 {
            let mut l = 0.0f32;
            for bb in 0..chunk_blocks {
                l += block_mass[(g * chunk_blocks + bb) as usize];
            }
            target.write_stats(out_max, out_sum, g, head_max[g as usize], l);
        }
        item += units;
    }
}
