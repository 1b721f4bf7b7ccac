//! The decode kernel of the channel layout (one query slot per sequence), flash-decoding style:
//! one cube per (sequence and KV head, split), serving the KV head's `group` query heads, so each
//! packed word is read once per cube. Splits `0 .. block_splits` take runs of closed blocks; the
//! last split takes the float slots (sinks and tail). Per closed block:
//!
//! 1. [`block_query_codes`]: the block's key (min, scale) per channel; per head the scaled query
//!    `q′ = q ⊙ s_b` quantized to symmetric 8-bit codes (scale `σ = max |q′| / 127`) and the
//!    block's offset `q · m_b`;
//! 2. [`block_scores`]: one unit per slot, `σ Σ_j a_j c_tj + q · m_b` per head, an integer product
//!    on the unpacked key codes; scaled, masked slots excluded;
//! 3. `split_softmax`/`split_masses`: the block's numerators `p = exp(s − m_block)` and mass;
//! 4. [`block_weight_codes`]: per head and value group, `p′ = p ⊙ s_t` quantized to 8-bit codes
//!    with their minimum at 0 (scale `τ = max p′ / 255`) and the offset `Σ_t p_t m_tg`;
//! 5. [`block_values`]: one unit per channel, `τ Σ_t e_t c_tj + Σ_t p_t m_tg` per head, merged
//!    into the running output with the log-sum-exp rescaling of the block's and the running max.
//!
//! The same quantizations as [`channel_attention_reference`](super::channel_attention_reference),
//! on block-local numerators (the codes of `p′` do not depend on the numerators' common factor).
//! Each cube writes its unnormalized output, max and mass; `merge_partials` combines the splits.

use burn_kvcompress::kernels::{
    decode_slot_visible, masked_score, min_max_runs, split_masses, split_softmax, sum_runs, SplitOut,
};
use cubecl::prelude::*;

use super::float_slots::FloatSlotRows;
use crate::kernels::params_word::{params_min, params_scale};

/// Shapes fixed at compile time (one compiled kernel per model geometry and configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChannelDecodeGeometry {
    /// Query heads per KV head.
    pub group: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// Π: slots per block.
    pub partition: u32,
    /// Key code width.
    pub key_bits: u32,
    /// Value code width.
    pub value_bits: u32,
    /// Channels per value group.
    pub value_group: u32,
}

impl ChannelDecodeGeometry {
    /// Units per cube: a unit per slot of a block and per channel, and 16 per head for the
    /// softmax reductions.
    pub fn units(&self) -> u32 {
        self.partition.max(self.head_dim).max(16 * self.group)
    }

    /// Value groups per head.
    pub fn value_groups(&self) -> u32 {
        self.head_dim / self.value_group
    }

    /// Length of a reduction run array: `group` runs of a head's channels, or `group · groups`
    /// runs of a block's slots.
    fn runs_len(&self) -> u32 {
        self.group * self.head_dim.max(self.value_groups() * self.partition)
    }

    /// Bytes of shared memory the kernel declares.
    pub fn shared_bytes(&self) -> u32 {
        let (g, d, pi, vg) = (self.group, self.head_dim, self.partition, self.value_groups());
        let floats = 2 * g * d + 2 * d + g * pi + 4 * self.runs_len() + g * vg * pi + 2 * pi * vg + 8 * g + 2 * g * vg;
        4 * floats
    }
}

/// Per head: the block's query scale `σ` and offset `q · m_b` (`query_meta[g]`,
/// `query_meta[group + g]`), and the symmetric 8-bit codes of `q ⊙ s_b` in `codes[g · d + j]`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn block_query_codes(
    queries: &SharedMemory<f32>,
    k_params: &Array<u32>,
    params_base: u32,
    key_scale: &mut SharedMemory<f32>,
    key_min: &mut SharedMemory<f32>,
    lo: &mut SharedMemory<f32>,
    hi: &mut SharedMemory<f32>,
    sum: &mut SharedMemory<f32>,
    spare: &mut SharedMemory<f32>,
    codes: &mut SharedMemory<i32>,
    query_meta: &mut SharedMemory<f32>,
    #[comptime] geo: ChannelDecodeGeometry,
) {
    let (g_count, d) = comptime!((geo.group, geo.head_dim));
    let unit = UNIT_POS;
    if unit < d {
        let word = k_params[(params_base + unit) as usize];
        key_scale[unit as usize] = params_scale(word);
        key_min[unit as usize] = params_min(word);
    }
    sync_cube();
    let mut item = unit;
    while item < g_count * d {
        let j = item % d;
        let q = queries[item as usize];
        let scaled = f32::abs(q * key_scale[j as usize]);
        lo[item as usize] = scaled;
        hi[item as usize] = scaled;
        sum[item as usize] = q * key_min[j as usize];
        spare[item as usize] = 0.0;
        item += CUBE_DIM;
    }
    sync_cube();
    min_max_runs(lo, hi, g_count, d);
    sum_runs(sum, spare, g_count, d);
    if unit < g_count {
        let amax = hi[(unit * d) as usize];
        query_meta[unit as usize] = select(amax > 0.0, amax / 127.0, 1.0);
        query_meta[(g_count + unit) as usize] = sum[(unit * d) as usize];
    }
    sync_cube();
    let mut item = unit;
    while item < g_count * d {
        let g = item / d;
        let j = item % d;
        let x = queries[item as usize] * key_scale[j as usize] / query_meta[g as usize];
        let magnitude = f32::min(f32::floor(f32::abs(x) + 0.5), 127.0);
        codes[item as usize] = select(x < 0.0, -i32::cast_from(magnitude), i32::cast_from(magnitude));
        item += CUBE_DIM;
    }
    sync_cube();
}

/// Unit `t < Π` scores slot `t` of the block for every head into `scores[g · Π + t]`: the
/// integer product of the query codes with the slot's key codes (unpacked from its row, a
/// word at a time), `σ` times it plus the offset, times the softmax scale; masked slots get
/// [`masked_score`].
#[allow(clippy::too_many_arguments)]
#[cube]
fn block_scores(
    k_words: &Array<u32>,
    words_base: u32,
    codes: &SharedMemory<i32>,
    query_meta: &SharedMemory<f32>,
    scores: &mut SharedMemory<f32>,
    visible: bool,
    scale: f32,
    #[comptime] geo: ChannelDecodeGeometry,
) {
    let (g_count, d, pi, bits) = comptime!((geo.group, geo.head_dim, geo.partition, geo.key_bits));
    let per_word = comptime!(32 / bits);
    let words_per_row = comptime!(d / per_word);
    let t = UNIT_POS;
    if t < pi {
        let mut dot = Array::<i32>::new(comptime!(g_count as usize));
        #[unroll]
        for g in 0..g_count {
            dot[g as usize] = 0;
        }
        let mask = comptime!((1u32 << bits) - 1);
        // The slot's row: `per_word` consecutive channels a word.
        for w in 0..words_per_row {
            let word = k_words[(words_base + t * words_per_row + w) as usize];
            #[unroll]
            for i in 0..per_word {
                let code = i32::cast_from((word >> comptime!(i * bits)) & mask);
                let j = w * per_word + i;
                #[unroll]
                for g in 0..g_count {
                    dot[g as usize] += codes[(g * d + j) as usize] * code;
                }
            }
        }
        #[unroll]
        for g in 0..g_count {
            let s =
                (query_meta[g as usize] * f32::cast_from(dot[g as usize]) + query_meta[(g_count + g) as usize]) * scale;
            scores[(g * pi + t) as usize] = select(visible, s, masked_score());
        }
    }
    sync_cube();
}

/// Per head and value group, the 8-bit codes (minimum 0) of the block's numerators scaled by the
/// slots' value scales into `weights[(g · groups + vg) · Π + t]`, their scale `τ` into
/// `weight_meta[g · groups + vg]` and the offset `Σ_t p_t m_t` into `weight_meta[G + …]` (`G =
/// group · groups`).
#[allow(clippy::too_many_arguments)]
#[cube]
fn block_weight_codes(
    numerators: &SharedMemory<f32>,
    v_params: &Array<u32>,
    params_base: u32,
    value_params: &mut SharedMemory<f32>,
    lo: &mut SharedMemory<f32>,
    hi: &mut SharedMemory<f32>,
    sum: &mut SharedMemory<f32>,
    spare: &mut SharedMemory<f32>,
    weights: &mut SharedMemory<i32>,
    weight_meta: &mut SharedMemory<f32>,
    #[comptime] geo: ChannelDecodeGeometry,
) {
    let (g_count, pi, groups) = comptime!((geo.group, geo.partition, geo.value_groups()));
    let unit = UNIT_POS;
    // value_params: the block's slots' scales, then their minima, `[t · groups + vg]`.
    let mut item = unit;
    while item < pi * groups {
        let word = v_params[(params_base + item) as usize];
        value_params[item as usize] = params_scale(word);
        value_params[(pi * groups + item) as usize] = params_min(word);
        item += CUBE_DIM;
    }
    sync_cube();
    let runs_count = comptime!(g_count * groups);
    let mut item = unit;
    while item < runs_count * pi {
        let run = item / pi;
        let t = item % pi;
        let (g, vg) = (run / groups, run % groups);
        let p = numerators[(g * pi + t) as usize];
        let scaled = p * value_params[(t * groups + vg) as usize];
        lo[item as usize] = scaled;
        hi[item as usize] = scaled;
        sum[item as usize] = p * value_params[(pi * groups + t * groups + vg) as usize];
        spare[item as usize] = 0.0;
        item += CUBE_DIM;
    }
    sync_cube();
    min_max_runs(lo, hi, runs_count, pi);
    sum_runs(sum, spare, runs_count, pi);
    if unit < runs_count {
        let max = hi[(unit * pi) as usize];
        weight_meta[unit as usize] = select(max > 0.0, max / 255.0, 1.0);
        weight_meta[(runs_count + unit) as usize] = sum[(unit * pi) as usize];
    }
    sync_cube();
    let mut item = unit;
    while item < runs_count * pi {
        let run = item / pi;
        let t = item % pi;
        let (g, vg) = (run / groups, run % groups);
        let scaled = numerators[(g * pi + t) as usize] * value_params[(t * groups + vg) as usize];
        let code = f32::min(f32::floor(scaled / weight_meta[run as usize] + 0.5), 255.0);
        weights[item as usize] = i32::cast_from(code);
        item += CUBE_DIM;
    }
    sync_cube();
}

/// Unit `j < head_dim`: the block's contribution to channel `j` of every head, `τ Σ_t e_t c_tj +
/// Σ_t p_t m_t` from the channel's row of the block's value codes (a word at a time), into
/// `block_out[g]`.
#[cube]
fn block_values(
    v_words: &Array<u32>,
    words_base: u32,
    weights: &SharedMemory<i32>,
    weight_meta: &SharedMemory<f32>,
    block_out: &mut Array<f32>,
    #[comptime] geo: ChannelDecodeGeometry,
) {
    let (g_count, pi, bits, groups) = comptime!((geo.group, geo.partition, geo.value_bits, geo.value_groups()));
    let per_word = comptime!(32 / bits);
    let words_per_row = comptime!(pi / per_word);
    let runs_count = comptime!(g_count * groups);
    let j = UNIT_POS;
    let vg = j / geo.value_group;
    let mask = comptime!((1u32 << bits) - 1);
    let mut sums = Array::<i32>::new(comptime!(g_count as usize));
    #[unroll]
    for g in 0..g_count {
        sums[g as usize] = 0;
    }
    // The channel's row: `per_word` consecutive slots a word.
    for w in 0..words_per_row {
        let word = v_words[(words_base + j * words_per_row + w) as usize];
        #[unroll]
        for i in 0..per_word {
            let code = i32::cast_from((word >> comptime!(i * bits)) & mask);
            let t = w * per_word + i;
            #[unroll]
            for g in 0..g_count {
                sums[g as usize] += weights[((g * groups + vg) * pi + t) as usize] * code;
            }
        }
    }
    #[unroll]
    for g in 0..g_count {
        let run = g * groups + vg;
        block_out[g as usize] =
            weight_meta[run as usize] * f32::cast_from(sums[g as usize]) + weight_meta[(runs_count + run) as usize];
    }
}

/// Merges a block's (or chunk's) numerators of max `block_max[g]` and mass `block_mass[g]` into
/// the running max and mass (`head_stats[g]`, `head_stats[group + g]`), and leaves in `factors`
/// the rescaling of the running output (`factors[g]`) and of the block's (`factors[group + g]`).
#[cube]
fn merge_block(
    head_stats: &mut SharedMemory<f32>,
    block_max: &SharedMemory<f32>,
    block_mass: &SharedMemory<f32>,
    factors: &mut SharedMemory<f32>,
    #[comptime] group: u32,
) {
    let g = UNIT_POS;
    if g < group {
        let (m, l) = (head_stats[g as usize], head_stats[(group + g) as usize]);
        let (bm, bl) = (block_max[g as usize], block_mass[g as usize]);
        let top = f32::max(m, bm);
        let old = select(m > masked_score(), f32::exp(m - top), 0.0);
        let new = select(bm > masked_score(), f32::exp(bm - top), 0.0);
        head_stats[g as usize] = top;
        head_stats[(group + g) as usize] = l * old + bl * new;
        factors[g as usize] = old;
        factors[(group + g) as usize] = new;
    }
    sync_cube();
}

/// One split of channel-layout decode attention; see the module documentation. Slots: `sinks`
/// float sink slots, `blocks` closed blocks of Π, `tail` float tail slots; `len` in all (the query
/// is the last). The float slots lie in buffers of `F` with `sink_rows` and `tail_rows` rows per
/// stream (their capacities). Splits `0 .. block_splits` take `blocks_per_split` closed blocks
/// each, split `block_splits` the float slots.
#[allow(clippy::too_many_arguments)]
#[cube(launch_unchecked)]
pub fn channel_decode_kernel<F: Float>(
    q: &Array<f32>,
    k_words: &Array<u32>,
    k_params: &Array<u32>,
    v_words: &Array<u32>,
    v_params: &Array<u32>,
    sinks_k: &Array<F>,
    sinks_v: &Array<F>,
    tail_k: &Array<F>,
    tail_v: &Array<F>,
    key_start: &Array<u32>,
    out: &mut Array<f32>,
    out_max: &mut Array<f32>,
    out_sum: &mut Array<f32>,
    len: u32,
    sinks: u32,
    blocks: u32,
    tail: u32,
    sink_rows: u32,
    tail_rows: u32,
    kv_heads: u32,
    block_splits: u32,
    blocks_per_split: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: ChannelDecodeGeometry,
    #[define(F)] _float: StorageType,
) {
    let (g_count, d, pi, groups) = comptime!((geo.group, geo.head_dim, geo.partition, geo.value_groups()));
    let split = CUBE_POS_X;
    let stream = CUBE_POS_Y;
    let unit = UNIT_POS;
    let start = key_start[(stream / kv_heads) as usize];

    let mut queries = SharedMemory::<f32>::new(comptime!((g_count * d) as usize));
    let mut query_codes = SharedMemory::<i32>::new(comptime!((g_count * d) as usize));
    let mut key_scale = SharedMemory::<f32>::new(comptime!(d as usize));
    let mut key_min = SharedMemory::<f32>::new(comptime!(d as usize));
    let mut scores = SharedMemory::<f32>::new(comptime!((g_count * pi) as usize));
    let mut lo = SharedMemory::<f32>::new(comptime!(geo.runs_len() as usize));
    let mut hi = SharedMemory::<f32>::new(comptime!(geo.runs_len() as usize));
    let mut sum = SharedMemory::<f32>::new(comptime!(geo.runs_len() as usize));
    let mut spare = SharedMemory::<f32>::new(comptime!(geo.runs_len() as usize));
    let mut weights = SharedMemory::<i32>::new(comptime!((g_count * groups * pi) as usize));
    let mut value_params = SharedMemory::<f32>::new(comptime!((2 * pi * groups) as usize));
    let mut query_meta = SharedMemory::<f32>::new(comptime!((2 * g_count) as usize));
    let mut weight_meta = SharedMemory::<f32>::new(comptime!((2 * g_count * groups) as usize));
    // Per head: the running max and mass; the current block's max and mass; the rescalings.
    let mut head_stats = SharedMemory::<f32>::new(comptime!((2 * g_count) as usize));
    let mut block_max = SharedMemory::<f32>::new(comptime!(g_count as usize));
    let mut block_mass = SharedMemory::<f32>::new(comptime!(g_count as usize));
    let mut factors = SharedMemory::<f32>::new(comptime!((2 * g_count) as usize));

    let mut item = unit;
    while item < g_count * d {
        queries[item as usize] = q[(stream * g_count * d + item) as usize];
        item += CUBE_DIM;
    }
    if unit < g_count {
        head_stats[unit as usize] = masked_score();
        head_stats[(g_count + unit) as usize] = 0.0;
    }
    let mut acc = Array::<f32>::new(comptime!(g_count as usize));
    let mut block_out = Array::<f32>::new(comptime!(g_count as usize));
    #[unroll]
    for g in 0..g_count {
        acc[g as usize] = 0.0;
        block_out[g as usize] = 0.0;
    }
    sync_cube();

    if split < block_splits {
        let first = split * blocks_per_split;
        let last = u32::min(first + blocks_per_split, blocks);
        for block in first..last {
            let closed = stream * blocks + block;
            let visible = decode_slot_visible(sinks + block * pi + unit, len, start, window);
            block_query_codes(
                &queries,
                k_params,
                closed * d,
                &mut key_scale,
                &mut key_min,
                &mut lo,
                &mut hi,
                &mut sum,
                &mut spare,
                &mut query_codes,
                &mut query_meta,
                geo,
            );
            let key_words_base = closed * pi * comptime!(d * geo.key_bits / 32);
            block_scores(k_words, key_words_base, &query_codes, &query_meta, &mut scores, visible, scale, geo);
            split_softmax(&mut scores, &mut block_max, pi, g_count, pi);
            split_masses(&scores, &mut block_mass, pi, g_count, pi);
            block_weight_codes(
                &scores,
                v_params,
                closed * pi * groups,
                &mut value_params,
                &mut lo,
                &mut hi,
                &mut sum,
                &mut spare,
                &mut weights,
                &mut weight_meta,
                geo,
            );
            if unit < d {
                let value_words_base = closed * d * comptime!(pi * geo.value_bits / 32);
                block_values(v_words, value_words_base, &weights, &weight_meta, &mut block_out, geo);
            }
            merge_block(&mut head_stats, &block_max, &block_mass, &mut factors, g_count);
            accumulate(&mut acc, &block_out, &factors, g_count, d);
            sync_cube();
        }
    } else {
        // The float slots, Π at a time: the sinks, then the tail.
        let float_slots = sinks + tail;
        let slots = FloatSlotRows { stream, sinks, sink_rows, tail_rows, first_tail: sinks + blocks * pi };
        let mut chunk_start = 0u32;
        while chunk_start < float_slots {
            float_scores(
                &queries,
                sinks_k,
                tail_k,
                &mut scores,
                chunk_start,
                &slots,
                float_slots,
                len,
                start,
                window,
                scale,
                geo,
            );
            split_softmax(&mut scores, &mut block_max, pi, g_count, pi);
            split_masses(&scores, &mut block_mass, pi, g_count, pi);
            if unit < d {
                float_values(&scores, sinks_v, tail_v, &mut block_out, chunk_start, &slots, float_slots, geo);
            }
            merge_block(&mut head_stats, &block_max, &block_mass, &mut factors, g_count);
            accumulate(&mut acc, &block_out, &factors, g_count, d);
            sync_cube();
            chunk_start += pi;
        }
    }

    let target = SplitOut { first_head: stream * g_count, split, splits: block_splits + 1 };
    if unit < d {
        #[unroll]
        for g in 0..g_count {
            target.write_output(out, g, unit, acc[g as usize], d);
        }
    }
    if unit < g_count {
        target.write_stats(out_max, out_sum, unit, head_stats[unit as usize], head_stats[(g_count + unit) as usize]);
    }
}

/// Unit `j < head_dim`: the running output of channel `j` rescaled and the block's added.
#[cube]
fn accumulate(
    acc: &mut Array<f32>,
    block_out: &Array<f32>,
    factors: &SharedMemory<f32>,
    #[comptime] group: u32,
    #[comptime] d: u32,
) {
    if UNIT_POS < d {
        #[unroll]
        for g in 0..group {
            acc[g as usize] =
                acc[g as usize] * factors[g as usize] + block_out[g as usize] * factors[(group + g) as usize];
        }
    }
}

/// Unit `t < Π` scores float slot `chunk_start + t` of the `count` in `slots` (a sink, then a
/// tail slot) for every head into `scores[g · Π + t]` (f32 dot products, scaled; [`masked_score`]
/// past the float slots or where masked).
#[allow(clippy::too_many_arguments)]
#[cube]
fn float_scores<F: Float>(
    queries: &SharedMemory<f32>,
    sinks_k: &Array<F>,
    tail_k: &Array<F>,
    scores: &mut SharedMemory<f32>,
    chunk_start: u32,
    slots: &FloatSlotRows,
    count: u32,
    len: u32,
    start: u32,
    window: u32,
    scale: f32,
    #[comptime] geo: ChannelDecodeGeometry,
) {
    let (g_count, d, pi) = comptime!((geo.group, geo.head_dim, geo.partition));
    let t = UNIT_POS;
    if t < pi {
        let index = chunk_start + t;
        let visible = index < count && decode_slot_visible(slots.position(index), len, start, window);
        #[unroll]
        for g in 0..g_count {
            let mut dot = 0.0f32;
            if visible {
                let row = slots.row_start(index, d);
                for j in 0..d {
                    dot += queries[(g * d + j) as usize] * slots.read(sinks_k, tail_k, index, row + j);
                }
            }
            scores[(g * pi + t) as usize] = select(visible, dot * scale, masked_score());
        }
    }
    sync_cube();
}

/// Unit `j < head_dim`: `Σ_t p_t v_tj` over the chunk's float slots (of the `count` in `slots`)
/// into `block_out[g]`.
#[allow(clippy::too_many_arguments)]
#[cube]
fn float_values<F: Float>(
    numerators: &SharedMemory<f32>,
    sinks_v: &Array<F>,
    tail_v: &Array<F>,
    block_out: &mut Array<f32>,
    chunk_start: u32,
    slots: &FloatSlotRows,
    count: u32,
    #[comptime] geo: ChannelDecodeGeometry,
) {
    let (g_count, d, pi) = comptime!((geo.group, geo.head_dim, geo.partition));
    let j = UNIT_POS;
    #[unroll]
    for g in 0..g_count {
        block_out[g as usize] = 0.0;
    }
    let chunk = u32::min(pi, count - chunk_start);
    for t in 0..chunk {
        let index = chunk_start + t;
        let value = slots.read(sinks_v, tail_v, index, slots.row_start(index, d) + j);
        #[unroll]
        for g in 0..g_count {
            block_out[g as usize] += numerators[(g * pi + t) as usize] * value;
        }
    }
}
