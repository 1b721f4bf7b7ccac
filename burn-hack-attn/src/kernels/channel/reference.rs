//! Attention on the channel layout in plain loops on the host: the reference the kernels are
//! tested against, and the implementation on backends without kernels (the CPU).
//!
//! For one query row `q` and a closed block `b` (key scale `s_bj`, minimum `m_bj` per channel
//! `j`; value scale `s_tg`, minimum `m_tg` per slot `t` and channel group `g`):
//!
//! - scores: `q · k̂_t = Σ_j (q_j s_bj) c_tj + q · m_b`. The scaled query `q′ = q ⊙ s_b` is
//!   quantized to 8 bits once per block, *symmetrically* (`q′ ≈ σ a`, `a ∈ [−127, 127]`), so the
//!   product is `σ Σ_j a_j c_tj`, an integer product with no code-sum term;
//! - outputs: `Σ_t p_t v̂_tj = Σ_t (p_t s_tg) c_tj + Σ_t p_t m_tg`. The scaled weights `p′ = p ⊙
//!   s_g` of the block's slots are quantized to 8 bits per group with their minimum at 0 (`p′ ≈
//!   τ e`, `e ∈ [0, 255]`; weights are never negative), so the product is `τ Σ_t e_t c_tj`, again
//!   with no code sums.
//!
//! Sinks and tail attend in f32 on their (f16-valued) keys and values; the softmax covers every
//! slot at once. Integer products are exact (at most `127 · 15 · 4096 < 2^24`), so the only
//! differences from attention on dequantized keys and values are the 8-bit codes of `q′` and
//! `p′`: per score at most `σ/2 · Σ_j c_tj`, per output channel at most `τ/2 · Σ_t c_tj` per
//! block and group (tested).

use burn::tensor::{backend::Backend, Tensor, TensorData};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
};
use rayon::prelude::*;

use super::ChannelView;
use crate::{kernels::PackedRows, quant::GroupParams};

/// Largest magnitude of a query code: symmetric 8-bit codes in `[−127, 127]`.
pub const QUERY_LEVELS: f32 = 127.0;
/// Largest attention-weight code: 8-bit codes in `[0, 255]`.
pub const WEIGHT_LEVELS: f32 = 255.0;

fn host<B: Backend, const D: usize>(t: &Tensor<B, D>) -> Vec<f32> {
    t.to_data().convert::<f32>().into_vec().expect("f32 data")
}

fn host_int<B: Backend>(t: &Tensor<B, 4, burn::tensor::Int>) -> Vec<i32> {
    t.to_data().convert::<i32>().into_vec().expect("i32 data")
}

/// One KV head's share of a host copy: `[rows, width]` row-major.
struct HeadRows<T> {
    data: Vec<T>,
    rows: usize,
    width: usize,
}

impl<T: Copy> HeadRows<T> {
    fn head(&self, head: usize) -> &[T] {
        &self.data[head * self.rows * self.width..(head + 1) * self.rows * self.width]
    }
}

fn float_rows<B: Backend>(t: Option<Tensor<B, 4>>) -> HeadRows<f32> {
    match t {
        Some(t) => HeadRows { data: host(&t), rows: t.dims()[2], width: t.dims()[3] },
        None => HeadRows { data: Vec::new(), rows: 0, width: 0 },
    }
}

fn packed_rows<B: Backend>(p: Option<&PackedRows<B>>) -> [HeadRows<i32>; 2] {
    match p {
        Some(p) => {
            let [_, _, rows, words] = p.words.dims();
            let [_, _, param_rows, parts] = p.params.dims();
            [
                HeadRows { data: host_int(&p.words), rows, width: words },
                HeadRows { data: host_int(&p.params), rows: param_rows, width: parts },
            ]
        }
        None => [(); 2].map(|_| HeadRows { data: Vec::new(), rows: 0, width: 0 }),
    }
}

/// A row of packed words as `count` codes of `bits` bits.
fn unpack_into(words: &[i32], bits: u8, out: &mut [u8]) {
    let per_word = 32 / bits as usize;
    let mask = (1u32 << bits) - 1;
    for (i, code) in out.iter_mut().enumerate() {
        *code = ((words[i / per_word] as u32 >> (bits as usize * (i % per_word))) & mask) as u8;
    }
}

fn params(word: i32) -> (f32, f32) {
    let p = GroupParams::from_word(word);
    (p.min.to_f32(), p.scale.to_f32())
}

/// One KV head's closed blocks unpacked: key codes `[block][channel][slot]` with (min, scale) per
/// block and channel, value codes `[slot][channel]` with (min, scale) per slot and group.
struct Blocks {
    keys: Vec<u8>,
    key_params: Vec<(f32, f32)>,
    values: Vec<u8>,
    value_params: Vec<(f32, f32)>,
}

impl Blocks {
    fn unpack(
        view: &ChannelView<'_, impl Backend>,
        keys: &[HeadRows<i32>; 2],
        values: &[HeadRows<i32>; 2],
        head: usize,
    ) -> Self {
        let (d, pi, n) = (view.head_dim, view.partition, view.blocks());
        let mut blocks = Self {
            keys: vec![0; n * d * pi],
            key_params: keys[1].head(head).iter().map(|&w| params(w)).collect(),
            values: vec![0; n * pi * d],
            value_params: values[1].head(head).iter().map(|&w| params(w)).collect(),
        };
        // Stored a row per slot (keys) and per channel (values), see `PackedRows`.
        let mut row = vec![0u8; d.max(pi)];
        for block in 0..n {
            for t in 0..pi {
                let at = (block * pi + t) * keys[0].width;
                unpack_into(&keys[0].head(head)[at..at + keys[0].width], view.key_bits, &mut row[..d]);
                for (j, &code) in row[..d].iter().enumerate() {
                    blocks.keys[(block * d + j) * pi + t] = code;
                }
            }
            for j in 0..d {
                let at = (block * d + j) * values[0].width;
                unpack_into(&values[0].head(head)[at..at + values[0].width], view.value_bits, &mut row[..pi]);
                for (t, &code) in row[..pi].iter().enumerate() {
                    blocks.values[(block * pi + t) * d + j] = code;
                }
            }
        }
        blocks
    }
}

/// HACK attention of `q: [batch, heads, q_len, head_dim]` (rotated; the last `q_len` slots) over a
/// channel-layout cache; returns `[batch, heads, q_len, head_dim]` on `q`'s device.
pub fn channel_attention_reference<B: Backend>(
    q: Tensor<B, 4>,
    view: &ChannelView<'_, B>,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let (d, len) = (view.head_dim, view.len);
    let (batch, heads, q_len, _) = check_attend_shapes(q.dims(), [view.batch, view.kv_heads, len, d], options)?;
    let group = heads / view.kv_heads;
    let device = q.device();
    let queries = host(&q);
    let sinks = [float_rows(view.sinks.map(|s| s.k.filled())), float_rows(view.sinks.map(|s| s.v.filled()))];
    let tail = [float_rows(view.tail.map(|s| s.k.filled())), float_rows(view.tail.map(|s| s.v.filled()))];
    let (keys, values) = (packed_rows(view.keys), packed_rows(view.values));
    let per_head: Vec<Vec<f32>> = (0..batch * view.kv_heads)
        .into_par_iter()
        .map(|stream| {
            let (b, h) = (stream / view.kv_heads, stream % view.kv_heads);
            let blocks = Blocks::unpack(view, &keys, &values, stream);
            let mut out = vec![0.0f32; group * q_len * d];
            for (row, out) in out.chunks_exact_mut(d).enumerate() {
                let (g, i) = (row / q_len, row % q_len);
                let query_head = h * group + g;
                let start = ((b * heads + query_head) * q_len + i) * d;
                let slot = len - q_len + i;
                let allowed = |key: usize| options.allows(b, slot, key);
                let head_rows = HeadSlots { sinks: &sinks, tail: &tail, stream };
                attend_row(&queries[start..start + d], view, &blocks, &head_rows, allowed, options.scale, out);
            }
            out
        })
        .collect();
    // [batch, kv_heads, group, q_len, d] is [batch, heads, q_len, d].
    let data: Vec<f32> = per_head.concat();
    Ok(Tensor::from_data(TensorData::new(data, [batch, heads, q_len, d]), &device))
}

/// One KV head's float slots: `sinks` and `tail` as `[keys, values]`.
struct HeadSlots<'a> {
    sinks: &'a [HeadRows<f32>; 2],
    tail: &'a [HeadRows<f32>; 2],
    stream: usize,
}

impl<'a> HeadSlots<'a> {
    /// Slot `j` of `rows` (`[keys, values]`), keys (`which = 0`) or values (`1`).
    fn slot(&self, rows: &'a [HeadRows<f32>; 2], which: usize, j: usize, d: usize) -> &'a [f32] {
        &rows[which].head(self.stream)[j * d..(j + 1) * d]
    }
}

/// One query row's attention: scores over sinks, blocks and tail, one softmax, then outputs.
fn attend_row(
    q: &[f32],
    view: &ChannelView<'_, impl Backend>,
    blocks: &Blocks,
    slots: &HeadSlots<'_>,
    allowed: impl Fn(usize) -> bool,
    scale: f32,
    out: &mut [f32],
) {
    let (d, pi, n) = (view.head_dim, view.partition, view.blocks());
    let (sinks, tail) = (view.sinks_len(), view.tail_len());
    let first_tail = sinks + n * pi;
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let (float_key, float_value) = (|rows, j| slots.slot(rows, 0, j, d), |rows, j| slots.slot(rows, 1, j, d));

    let mut scores = vec![0.0f32; view.len];
    for (j, score) in scores[..sinks].iter_mut().enumerate() {
        *score = dot(q, float_key(slots.sinks, j));
    }
    let mut codes = vec![0i32; d];
    let mut products = vec![0i32; pi];
    for block in 0..n {
        let key_params = &blocks.key_params[block * d..(block + 1) * d];
        let scaled: Vec<f32> = q.iter().zip(key_params).map(|(x, (_, s))| x * s).collect();
        let sigma = symmetric_codes(&scaled, &mut codes);
        let offset: f32 = q.iter().zip(key_params).map(|(x, (m, _))| x * m).sum();
        products.fill(0);
        for (c, &a) in codes.iter().enumerate() {
            let row = &blocks.keys[(block * d + c) * pi..(block * d + c + 1) * pi];
            for (p, &code) in products.iter_mut().zip(row) {
                *p += a * code as i32;
            }
        }
        for (t, &p) in products.iter().enumerate() {
            scores[sinks + block * pi + t] = sigma * p as f32 + offset;
        }
    }
    for j in 0..tail {
        scores[first_tail + j] = dot(q, float_key(slots.tail, j));
    }

    // Softmax over the allowed slots (the query's own slot always is).
    let mut max = f32::NEG_INFINITY;
    for (key, s) in scores.iter_mut().enumerate() {
        *s = if allowed(key) { *s * scale } else { f32::NEG_INFINITY };
        max = max.max(*s);
    }
    let mut total = 0.0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        total += *s;
    }
    let probs: Vec<f32> = scores.iter().map(|s| s / total).collect();

    out.fill(0.0);
    for (j, p) in probs[..sinks].iter().enumerate() {
        for (o, v) in out.iter_mut().zip(float_value(slots.sinks, j)) {
            *o += p * v;
        }
    }
    let width = view.value_group();
    let groups = d / width;
    let mut weight_codes = vec![0i32; pi];
    let mut sums = vec![0i32; width];
    for block in 0..n {
        let first = sinks + block * pi;
        for g in 0..groups {
            let param = |t: usize| blocks.value_params[(block * pi + t) * groups + g];
            let scaled: Vec<f32> = (0..pi).map(|t| probs[first + t] * param(t).1).collect();
            let tau = weight_codes_of(&scaled, &mut weight_codes);
            let offset: f32 = (0..pi).map(|t| probs[first + t] * param(t).0).sum();
            sums.fill(0);
            for (t, &e) in weight_codes.iter().enumerate() {
                let row = &blocks.values[(block * pi + t) * d + g * width..(block * pi + t) * d + (g + 1) * width];
                for (s, &code) in sums.iter_mut().zip(row) {
                    *s += e * code as i32;
                }
            }
            for (o, &s) in out[g * width..(g + 1) * width].iter_mut().zip(&sums) {
                *o += tau * s as f32 + offset;
            }
        }
    }
    for j in 0..tail {
        for (o, v) in out.iter_mut().zip(float_value(slots.tail, j)) {
            *o += probs[first_tail + j] * v;
        }
    }
}

/// Symmetric 8-bit codes of `x` into `codes` (round to nearest, ties away from zero); returns the
/// scale `σ = max |x| / 127` (1 for an all-zero `x`, whose codes are 0).
pub fn symmetric_codes(x: &[f32], codes: &mut [i32]) -> f32 {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let sigma = if amax > 0.0 { amax / QUERY_LEVELS } else { 1.0 };
    for (c, v) in codes.iter_mut().zip(x) {
        *c = (v / sigma).round().clamp(-QUERY_LEVELS, QUERY_LEVELS) as i32;
    }
    sigma
}

/// 8-bit codes of the non-negative `x` with their minimum at 0 into `codes`; returns the scale
/// `τ = max x / 255` (1 for an all-zero `x`).
pub fn weight_codes_of(x: &[f32], codes: &mut [i32]) -> f32 {
    let max = x.iter().fold(0.0f32, |m, &v| m.max(v));
    let tau = if max > 0.0 { max / WEIGHT_LEVELS } else { 1.0 };
    for (c, v) in codes.iter_mut().zip(x) {
        *c = (v / tau).round().clamp(0.0, WEIGHT_LEVELS) as i32;
    }
    tau
}
