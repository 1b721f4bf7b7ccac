//! The fused HACK prefill attention kernel (many query slots), flash-attention style.
//!
//! One cube per (sequence, KV head, tile of `queries` query slots). Its `rows` are the tile's
//! (query, head) pairs of every query head of the KV head, query-major (`row = i · group + g`),
//! padded with dead rows to a multiple of 4; rows pair up two to a packed `u32` (16-bit lanes),
//! so one integer multiply by a K or V code serves two rows, as in the decode kernel.
//!
//! 1. Q to 8 bits per (row, key channel group), once per cube: codes packed in row pairs, with
//!    min, scale and code sum.
//! 2. For each Π-slot block of keys that a row of the tile may see, in order (online softmax):
//!    a. the block's packed key words and metadata are staged in shared memory;
//!    b. scores: each unit takes 4 rows × 2 keys; integer dot products of the Q codes with the K
//!    codes per channel group, plus Eq. 4's corrections with the cached K sums, scaled;
//!    invisible pairs masked;
//!    c. row statistics: the block's min and max score per row (`stat_lanes` units per row
//!    pair), the running max `m`, the rescaling `α = exp(m_old − m)` of what came before, and
//!    for a closed block P's 8-bit min and scale: the min/max of `p = exp(s − m)` (the same
//!    codes as quantizing the normalized P, up to float rounding, see the reference);
//!    d. each unit codes its keys' `p` for both rows of its pair into one packed word (a tail
//!    block keeps the f32 `p`), with partial masses and code sums; one unit per row adds them
//!    up and keeps the row's running mass `l`;
//!    e. P·V: each unit owns `output_rows` rows of one channel and accumulates, after rescaling
//!    by `α`, Eq. 4 over the block (P codes, unpacked V codes, the cached V sums) in passes of
//!    `pass_rows` rows, or `p · v` in f32 over the tail's slots.
//! 3. Each unit writes its rows' `o / l`.
//!
//! Integer sums stay exact: a 16-bit lane's sum over one packed word is below 2^16 (16 codes ·
//! 255 · 3 at 2 bits, 8 · 255 · 15 at 4), and is added to 32-bit accumulators after every word.
//! Key blocks start at multiples of Π, so each is either a closed V block or lies in the tail.

use burn_kvcompress::kernels::{first_visible_slot, masked_score as masked, slot_visible};
use cubecl::prelude::*;

use crate::kernels::{
    eight_bit::{code8, numerator, scale8},
    params_word::{params_min, params_scale},
};

/// Rows per score item (two row pairs).
const SCORE_ROWS: u32 = 4;
/// Keys per score item.
const SCORE_KEYS: u32 = 2;
/// At most this many units share the statistics of one row pair.
const MAX_STAT_LANES: u32 = 8;
/// Static shared memory a CUDA kernel may declare.
const MAX_SHARED_BYTES: u32 = 48 * 1024;

/// Shapes fixed at compile time (one compiled kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrefillGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Channels per key group: a multiple of 16, so whole packed words.
    pub key_group: u32,
    /// Π: slots per key block (a multiple of 16, so whole packed value words).
    pub partition: u32,
    /// K/V code width.
    pub bits: u32,
    /// Query slots per cube.
    pub queries: u32,
    /// Rows per cube: `group · queries` rounded up to a multiple of 4.
    pub rows: u32,
    /// Rows each unit accumulates outputs for (even, divides `rows`).
    pub output_rows: u32,
}

impl PrefillGeometry {
    /// The geometry for `group` heads per KV head and `queries` query slots per cube: rows
    /// rounded up to a multiple of 4, and the fewest output rows per unit that keep a cube at
    /// 256 units or fewer.
    pub fn new(group: u32, head_dim: u32, key_group: u32, partition: u32, bits: u32, queries: u32) -> Self {
        let rows = (group * queries).div_ceil(SCORE_ROWS) * SCORE_ROWS;
        let output_rows = (1..=rows / 2)
            .map(|pairs| 2 * pairs)
            .find(|&n| rows.is_multiple_of(n) && rows / n * head_dim <= 256)
            .unwrap_or(rows);
        Self { group, head_dim, key_group, partition, bits, queries, rows, output_rows }
    }

    /// Units per cube: one per (output row group, channel).
    pub fn units(&self) -> u32 {
        self.rows / self.output_rows * self.head_dim
    }

    /// Rows per pass of the value phase: the largest of 8, 4 and 2 that divides `output_rows`.
    pub fn pass_rows(&self) -> u32 {
        [8, 4, 2].into_iter().find(|n| self.output_rows.is_multiple_of(*n)).unwrap_or(2)
    }

    /// Units that share the statistics of one row pair.
    pub fn stat_lanes(&self) -> u32 {
        (2 * self.units() / self.rows).min(MAX_STAT_LANES)
    }

    /// Packed words per key row.
    fn words_per_key(&self) -> u32 {
        self.head_dim * self.bits / 32
    }

    /// Key channel groups.
    fn parts(&self) -> u32 {
        self.head_dim / self.key_group
    }

    /// Bytes of shared memory the kernel declares: Q codes and metadata, the staged key block,
    /// scores, P codes, per-row statistics and the statistics' partials.
    pub fn shared_bytes(&self) -> u32 {
        let (rows, pi, parts) = (self.rows, self.partition, self.parts());
        let q = rows / 2 * self.head_dim + 3 * rows * parts;
        let keys = (self.words_per_key() + 3 * parts) * pi;
        let scores = rows * pi + rows / 2 * pi;
        let row_stats = 5 * rows + 4 * rows * self.stat_lanes();
        4 * (q + keys + scores + row_stats)
    }

    /// Whether the kernel's shared memory fits a device that gives a cube `device_bytes` (and the
    /// static 48 KiB a CUDA kernel may declare), and a cube needs at most 256 units.
    pub fn fits(&self, device_bytes: usize) -> bool {
        self.units() <= 256 && self.shared_bytes() as usize <= device_bytes.min(MAX_SHARED_BYTES as usize)
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

/// One tile of HACK prefill attention; see the module documentation.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn prefill_kernel(
    q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    k_sums: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    v_sums: &Array<u32>,
    tail: &Array<f32>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    key_meta_pitch: u32,
    len: u32,
    q_len: u32,
    blocks: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: PrefillGeometry,
) {
    let stream = CUBE_POS_Y; // batch row * kv_heads + kv head
    let kv_heads = CUBE_COUNT_Y / key_start.len() as u32;
    let batch_row = stream / kv_heads;
    let start = key_start[batch_row as usize];
    let t = UNIT_POS;
    let units = CUBE_DIM;
    let group = geo.group;
    let d = geo.head_dim;
    let kg = geo.key_group;
    let parts = comptime!(geo.head_dim / geo.key_group);
    let pi = geo.partition;
    let rows = geo.rows;
    let pairs = comptime!(geo.rows / 2);
    let live_rows = comptime!(geo.group * geo.queries);
    let per_word = comptime!(32 / geo.bits);
    let mask = (1u32 << geo.bits) - 1;
    let wpk = comptime!(geo.words_per_key());
    let words_per_part = comptime!(geo.key_group * geo.bits / 32);
    let words_per_value = comptime!(geo.partition * geo.bits / 32);
    let lanes = comptime!(geo.stat_lanes());
    let output_rows = comptime!(geo.output_rows);
    let pass_rows = comptime!(geo.pass_rows());
    let first_query = CUBE_POS_X * geo.queries; // index among the q_len queries
    let first_pos = len - q_len; // slot of query 0
    let quantized_len = blocks * pi;
    let tail_len = len - quantized_len;

    let mut q_pairs = SharedMemory::<u32>::new(comptime!((geo.rows / 2 * geo.head_dim) as usize));
    let mut q_min = SharedMemory::<f32>::new(comptime!((geo.rows * geo.head_dim / geo.key_group) as usize));
    let mut q_scale = SharedMemory::<f32>::new(comptime!((geo.rows * geo.head_dim / geo.key_group) as usize));
    let mut q_sum = SharedMemory::<f32>::new(comptime!((geo.rows * geo.head_dim / geo.key_group) as usize));
    let mut k_tile = SharedMemory::<u32>::new(comptime!((geo.words_per_key() * geo.partition) as usize));
    let mut kt_min = SharedMemory::<f32>::new(comptime!((geo.parts() * geo.partition) as usize));
    let mut kt_scale = SharedMemory::<f32>::new(comptime!((geo.parts() * geo.partition) as usize));
    let mut kt_sum = SharedMemory::<f32>::new(comptime!((geo.parts() * geo.partition) as usize));
    let mut s = SharedMemory::<f32>::new(comptime!((geo.rows * geo.partition) as usize));
    let mut p_pairs = SharedMemory::<u32>::new(comptime!((geo.rows / 2 * geo.partition) as usize));
    let mut p_min = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut p_scale = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut p_sum = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut alpha = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut row_mass = SharedMemory::<f32>::new(comptime!(geo.rows as usize));
    let mut part_hi = SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize));
    let mut part_lo = SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize));
    let mut part_mass = SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize));
    let mut part_codes = SharedMemory::<f32>::new(comptime!((geo.rows * geo.stat_lanes()) as usize));

    // 1. Q to 8 bits per (row, key group) = run `row · parts + part`. Dead rows (past the group's
    //    heads of the tile's queries, or past the last query) get code 0, min 0, scale 0.
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
        q_min[run as usize] = lo;
        q_scale[run as usize] = sc;
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
                packed |= u32::cast_from(code8(v, q_min[run], q_scale[run])) << (16 * half);
            }
        }
        q_pairs[item as usize] = packed;
        item += units;
    }
    sync_cube();
    let mut run = t;
    while run < rows * parts {
        let (row, part) = (run / parts, run % parts);
        let (pair, half) = (row / 2, row % 2);
        let mut total = 0u32;
        for c in 0..kg {
            total += (q_pairs[(pair * d + part * kg + c) as usize] >> (16 * half)) & 0xFFFF;
        }
        q_sum[run as usize] = f32::cast_from(total);
        run += units;
    }

    // The key blocks any row of the tile sees.
    let last_query = u32::min(first_query + geo.queries, q_len) - 1;
    let first_block = first_visible_slot(first_pos + first_query, start, window) / pi;
    let last_block = (first_pos + last_query) / pi;

    // Row statistics (units `t < pairs · lanes`): `stat_pair`'s two rows, this unit's lane.
    let stat_pair = t / lanes;
    let lane = t % lanes;
    let mut run_max = Array::<f32>::new(2usize);
    run_max[0] = masked();
    run_max[1] = masked();
    // The running mass of row `t` (units `t < rows`).
    let mut mass = 0.0f32;
    // Outputs: rows `out_row0 ..` of channel `out_c`.
    let out_row0 = (t / d) * output_rows;
    let out_c = t % d;
    let mut acc = Array::<f32>::new(comptime!(geo.output_rows as usize));
    #[unroll]
    for r in 0..output_rows {
        acc[r as usize] = 0.0;
    }

    for kb in first_block..last_block + 1 {
        let block_first = kb * pi;
        let closed = kb < blocks;
        // a. Stage the block's key words (transposed: `[word, key]`) and metadata (`[part, key]`).
        sync_cube();
        let mut item = t;
        while item < pi * wpk {
            let (key, w) = (item / wpk, item % wpk);
            let slot = block_first + key;
            let mut word = 0u32;
            if slot < len {
                word = k_words[((stream * len + slot) * wpk + w) as usize];
            }
            k_tile[(w * pi + key) as usize] = word;
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
            kt_min[(part * pi + key) as usize] = km;
            kt_scale[(part * pi + key) as usize] = ks;
            kt_sum[(part * pi + key) as usize] = k_sum;
            item += units;
        }
        sync_cube();

        // b. Scores of 4 rows × 2 keys per item (keys `key_lane` and `key_lane + Π / 2`).
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
                    words[0] = k_tile[(word_row + key_lane) as usize];
                    words[1] = k_tile[(word_row + key_lane + key_lanes) as usize];
                    score_words(&words, &q_pairs, row0 / 2, part * kg + w * per_word, &mut dot, d, geo.bits);
                }
                #[unroll]
                for key in 0..2u32 {
                    let k_at = (part * pi + key_lane + key * key_lanes) as usize;
                    let (ks, km, k_sum) = (kt_scale[k_at], kt_min[k_at], kt_sum[k_at]);
                    #[unroll]
                    for r in 0..SCORE_ROWS {
                        let qm = ((row0 + r) * parts + part) as usize;
                        sc[(r * 2 + key) as usize] += q_scale[qm] * ks * f32::cast_from(dot[(r * 2 + key) as usize])
                            + q_scale[qm] * q_sum[qm] * km
                            + q_min[qm] * ks * k_sum
                            + f32::cast_from(kg) * q_min[qm] * km;
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
        sync_cube();

        // c. Per row of the pair: the block's min and max score over this lane's keys.
        if t < pairs * lanes {
            #[unroll]
            for half in 0..2u32 {
                let row = 2 * stat_pair + half;
                let mut lo = f32::new(3.0e38);
                let mut hi = masked();
                let mut key = lane;
                while key < pi {
                    let v = s[(row * pi + key) as usize];
                    lo = f32::min(lo, v);
                    hi = f32::max(hi, v);
                    key += lanes;
                }
                part_lo[(row * lanes + lane) as usize] = lo;
                part_hi[(row * lanes + lane) as usize] = hi;
            }
        }
        sync_cube();

        // d. The running max, α, P's 8-bit metadata; this lane's codes (or f32 numerators in the
        //    tail), masses and code sums.
        if t < pairs * lanes {
            let mut p_lo = Array::<f32>::new(2usize);
            let mut p_step = Array::<f32>::new(2usize);
            #[unroll]
            for half in 0..2u32 {
                let row = 2 * stat_pair + half;
                let mut lo = f32::new(3.0e38);
                let mut hi = masked();
                for l in 0..lanes {
                    lo = f32::min(lo, part_lo[(row * lanes + l) as usize]);
                    hi = f32::max(hi, part_hi[(row * lanes + l) as usize]);
                }
                let m = f32::max(run_max[half as usize], hi);
                let a = f32::exp(run_max[half as usize] - m);
                run_max[half as usize] = m;
                p_lo[half as usize] = numerator(lo, m);
                p_step[half as usize] = scale8(p_lo[half as usize], numerator(hi, m));
                if lane == 0 {
                    alpha[row as usize] = a;
                    p_min[row as usize] = p_lo[half as usize];
                    p_scale[row as usize] = p_step[half as usize];
                }
            }
            let mut masses = Array::<f32>::new(2usize);
            let mut code_sums = Array::<f32>::new(2usize);
            masses[0] = 0.0;
            masses[1] = 0.0;
            code_sums[0] = 0.0;
            code_sums[1] = 0.0;
            let mut key = lane;
            while key < pi {
                let mut packed = 0u32;
                #[unroll]
                for half in 0..2u32 {
                    let at = ((2 * stat_pair + half) * pi + key) as usize;
                    let e = numerator(s[at], run_max[half as usize]);
                    masses[half as usize] += e;
                    if closed {
                        let code = code8(e, p_lo[half as usize], p_step[half as usize]);
                        code_sums[half as usize] += code;
                        packed |= u32::cast_from(code) << (16 * half);
                    } else {
                        s[at] = e;
                    }
                }
                p_pairs[(stat_pair * pi + key) as usize] = packed;
                key += lanes;
            }
            #[unroll]
            for half in 0..2u32 {
                let at = ((2 * stat_pair + half) * lanes + lane) as usize;
                part_mass[at] = masses[half as usize];
                part_codes[at] = code_sums[half as usize];
            }
        }
        sync_cube();
        if t < rows {
            let mut block_mass = 0.0f32;
            let mut codes = 0.0f32;
            for l in 0..lanes {
                block_mass += part_mass[(t * lanes + l) as usize];
                codes += part_codes[(t * lanes + l) as usize];
            }
            mass = mass * alpha[t as usize] + block_mass;
            p_sum[t as usize] = codes;
        }
        sync_cube();

        // e. P·V for rows `out_row0 ..` of channel `out_c`.
        #[unroll]
        for r in 0..output_rows {
            acc[r as usize] *= alpha[(out_row0 + r) as usize];
        }
        if closed {
            let row = (stream * blocks + kb) * d + out_c;
            let params = v_params[row as usize];
            let (vs, vm, v_sum) = (params_scale(params), params_min(params), f32::cast_from(v_sums[row as usize]));
            // In passes of `pass_rows` rows, so that only one pass's integer sums are live.
            #[unroll]
            for pass in 0..comptime!(geo.output_rows / geo.pass_rows()) {
                let r0 = pass * pass_rows;
                let mut dot = Array::<u32>::new(comptime!(geo.pass_rows() as usize));
                #[unroll]
                for r in 0..pass_rows {
                    dot[r as usize] = 0;
                }
                for w in 0..words_per_value {
                    let word = v_words[(row * words_per_value + w) as usize];
                    let mut sums = Array::<u32>::new(comptime!((geo.pass_rows() / 2) as usize));
                    #[unroll]
                    for pp in 0..comptime!(geo.pass_rows() / 2) {
                        sums[pp as usize] = 0;
                    }
                    #[unroll]
                    for j in 0..per_word {
                        let code = (word >> (j * geo.bits)) & mask;
                        #[unroll]
                        for pp in 0..comptime!(geo.pass_rows() / 2) {
                            sums[pp as usize] +=
                                p_pairs[(((out_row0 + r0) / 2 + pp) * pi + w * per_word + j) as usize] * code;
                        }
                    }
                    #[unroll]
                    for pp in 0..comptime!(geo.pass_rows() / 2) {
                        dot[(2 * pp) as usize] += sums[pp as usize] & 0xFFFF;
                        dot[(2 * pp + 1) as usize] += sums[pp as usize] >> 16;
                    }
                }
                #[unroll]
                for r in 0..pass_rows {
                    let pr = (out_row0 + r0 + r) as usize;
                    acc[(r0 + r) as usize] += p_scale[pr] * vs * f32::cast_from(dot[r as usize])
                        + p_scale[pr] * p_sum[pr] * vm
                        + p_min[pr] * vs * v_sum
                        + f32::cast_from(pi) * p_min[pr] * vm;
                }
            }
        } else {
            for key in 0..pi {
                let slot = block_first + key;
                if slot < len {
                    let v = tail[((stream * tail_len + slot - quantized_len) * d + out_c) as usize];
                    #[unroll]
                    for r in 0..output_rows {
                        acc[r as usize] += s[((out_row0 + r) * pi + key) as usize] * v;
                    }
                }
            }
        }
    }

    // 3. Normalize and write the live rows.
    sync_cube();
    if t < rows {
        row_mass[t as usize] = mass;
    }
    sync_cube();
    #[unroll]
    for r in 0..output_rows {
        let row = out_row0 + r;
        let (i, g) = (row / group, row % group);
        if row < live_rows && first_query + i < q_len {
            let at = ((stream * group + g) * q_len + first_query + i) * d + out_c;
            out[at as usize] = acc[r as usize] / row_mass[row as usize];
        }
    }
}
