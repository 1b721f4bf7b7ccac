//! HACK attention in plain tensor ops: Q and P quantized to 8 bits, both products computed
//! homomorphically from the codes (spec §3.3), softmax in f32, the float V tail multiplied in
//! f32. The reference the fused decode kernel is tested against, and the implementation of
//! prefill (and of decode on non-Cube backends).
//!
//! Choices (spec §2.2, §6, marked [A] there):
//! - Q is quantized per query row in the K channel groups, P per query row in the closed V
//!   blocks; both asymmetric min/max, 8 bits, round to nearest, f32 metadata (transient: never
//!   stored or sent, so there is no reason to round it to fp16);
//! - P is the *normalized* softmax. Quantization is scale-invariant (`min`, `scale` scale with the
//!   partition and the codes do not change), so a kernel that quantizes `exp(s - m)` before
//!   normalizing, as a flash-attention kernel does, gets the same codes up to float rounding;
//! - masked positions are exactly 0 in P and take part in its partitions (they can only lower the
//!   minimum to 0, which P's minimum nearly always is anyway);
//! - the softmax scale is applied to the homomorphic scores in f32.

use burn::tensor::{activation::softmax, backend::Backend, Tensor};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
};

use super::super::quantize::unpack_words;
use crate::kernels::{key_group, Codes};

/// The cached state attention reads, `kv_heads` heads of `head_dim` channels.
#[derive(Debug, Clone, Copy)]
pub struct CacheView<'a, B: Backend> {
    /// K/V code width (2 or 4).
    pub bits: u8,
    /// Π.
    pub partition: usize,
    /// Channels per head.
    pub head_dim: usize,
    /// Key codes, one row per slot: `[batch, kv_heads, len, ·]`.
    pub keys: &'a Codes<B>,
    /// Value codes of the closed blocks, `[batch, kv_heads, blocks * head_dim, ·]` (None before
    /// the first block closes).
    pub values: Option<&'a Codes<B>>,
    /// The float tail, `[batch, kv_heads, len - blocks * Π, head_dim]` (None when empty).
    pub tail: Option<&'a Tensor<B, 4>>,
}

impl<B: Backend> CacheView<'_, B> {
    /// Closed V blocks.
    pub fn blocks(&self) -> usize {
        self.values.map_or(0, |v| v.rows() / self.head_dim)
    }
}

/// 8-bit asymmetric quantization along the last axis (round to nearest, degenerate partitions get
/// scale 1): `(codes, min, scale, code sums)`, the last three with a last axis of 1.
fn quantize8<B: Backend, const D: usize>(x: Tensor<B, D>) -> [Tensor<B, D>; 4] {
    let min = x.clone().min_dim(D - 1);
    let range = x.clone().max_dim(D - 1) - min.clone();
    let scale = range.clone() / 255.0;
    let scale = scale.mask_fill(range.lower_equal_elem(0.0), 1.0);
    let codes = ((x - min.clone()) / scale.clone() + 0.5).floor().clamp(0.0, 255.0);
    let sums = codes.clone().sum_dim(D - 1);
    [codes, min, scale, sums]
}

/// Partition `part` of `[a, b, rows, parts]` metadata as `[a, b, 1, rows]` (to broadcast along
/// query rows).
fn per_column<B: Backend>(t: &Tensor<B, 4>, part: usize) -> Tensor<B, 4> {
    t.clone().narrow(3, part, 1).swap_dims(2, 3)
}

/// The cache's codes unpacked to floats and its metadata laid out for broadcasting.
struct Operands<B: Backend> {
    /// Per key channel group: `[batch, kv_heads, key_group, len]` codes, and `[batch, kv_heads, 1,
    /// len]` min, scale and code sum.
    keys: Vec<[Tensor<B, 4>; 4]>,
    /// `[batch, kv_heads, blocks, Π, head_dim]`, then `[batch, kv_heads, blocks, 1, head_dim]`.
    values: Option<[Tensor<B, 5>; 4]>,
}

impl<B: Backend> Operands<B> {
    fn new(cache: &CacheView<'_, B>, [batch, kv_heads, _, head_dim]: [usize; 4]) -> Self {
        let gk = key_group(head_dim, cache.partition);
        let parts = head_dim / gk;
        let k_codes = unpack_words(cache.keys.words.clone(), cache.bits).float();
        let k_sums = cache.keys.sums.clone().float();
        let (k_min, k_scale) = (cache.keys.min(), cache.keys.scale());
        let keys = (0..parts)
            .map(|p| {
                [
                    k_codes.clone().narrow(3, p * gk, gk).swap_dims(2, 3),
                    per_column(&k_min, p),
                    per_column(&k_scale, p),
                    per_column(&k_sums, p),
                ]
            })
            .collect();
        let blocks = cache.blocks();
        let values = cache.values.filter(|_| blocks > 0).map(|v| {
            let pi = cache.partition;
            let codes =
                unpack_words(v.words.clone(), cache.bits).float().reshape([batch, kv_heads, blocks, head_dim, pi]);
            let per_block = |t: Tensor<B, 4>| t.reshape([batch, kv_heads, blocks, 1, head_dim]);
            [codes.swap_dims(3, 4), per_block(v.min()), per_block(v.scale()), per_block(v.sums.clone().float())]
        });
        Self { keys, values }
    }
}

/// Query slots per step: the largest count whose score tensor stays under 2^27 elements (512 MiB
/// in f32), so long prefills run in bounded memory.
fn query_chunk(batch: usize, heads: usize, len: usize, parts: usize) -> usize {
    ((1usize << 27) / (batch * heads * len * parts).max(1)).max(1)
}

/// HACK attention of `q: [batch, heads, q_len, head_dim]` (the last `q_len` slots) over `cache`;
/// returns `[batch, heads, q_len, head_dim]`. Long prefills run in chunks of query slots.
pub fn attention_reference<B: Backend>(
    q: Tensor<B, 4>,
    cache: &CacheView<'_, B>,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let [batch, kv_heads, len, _] = cache.keys.params.dims();
    let head_dim = cache.head_dim;
    let (_, heads, _, _) = check_attend_shapes(q.dims(), [batch, kv_heads, len, head_dim], options)?;
    let parts = head_dim / key_group(head_dim, cache.partition);
    attention_reference_in_steps(q, cache, options, query_chunk(batch, heads, len, parts))
}

/// [`attention_reference`] computed `step` query slots at a time (the result does not depend on
/// `step`).
pub fn attention_reference_in_steps<B: Backend>(
    q: Tensor<B, 4>,
    cache: &CacheView<'_, B>,
    options: &AttendOptions,
    step: usize,
) -> Result<Tensor<B, 4>, CacheError> {
    let [batch, kv_heads, len, _] = cache.keys.params.dims();
    let head_dim = cache.head_dim;
    let (_, _, q_len, _) = check_attend_shapes(q.dims(), [batch, kv_heads, len, head_dim], options)?;
    let step = step.max(1);
    let operands = Operands::new(cache, [batch, kv_heads, len, head_dim]);
    let forbidden = options.forbidden_mask::<B>(q_len, len, &q.device());
    let outputs: Vec<Tensor<B, 4>> = (0..q_len)
        .step_by(step)
        .map(|start| {
            let n = step.min(q_len - start);
            let mask = forbidden.clone().narrow(2, start, n);
            attend_rows(q.clone().narrow(2, start, n), mask, cache, &operands, options.scale)
        })
        .collect();
    Ok(Tensor::cat(outputs, 2))
}

/// Attention of the query slots `q: [batch, heads, n, head_dim]` whose forbidden keys are
/// `forbidden: [batch, 1, n, len]`.
fn attend_rows<B: Backend>(
    q: Tensor<B, 4>,
    forbidden: Tensor<B, 4, burn::tensor::Bool>,
    cache: &CacheView<'_, B>,
    operands: &Operands<B>,
    softmax_scale: f32,
) -> Tensor<B, 4> {
    let [batch, heads, n, head_dim] = q.dims();
    let [_, kv_heads, len, _] = cache.keys.params.dims();
    let (group, rows) = (heads / kv_heads, heads / kv_heads * n);
    let gk = key_group(head_dim, cache.partition);

    // Scores: Σ over channel groups of Eq. 4, each group one [rows, gk] x [gk, len] product.
    let q = q.reshape([batch, kv_heads, rows, head_dim]);
    let o = operands;
    let mut scores = Tensor::<B, 4>::zeros([batch, kv_heads, rows, len], &q.device());
    for (p, [k_codes, k_min, k_scale, k_sum]) in o.keys.iter().enumerate() {
        let [qc, qmin, qscale, qsum] = quantize8(q.clone().narrow(3, p * gk, gk));
        let dot = qc.matmul(k_codes.clone());
        scores = scores
            + qscale.clone() * k_scale.clone() * dot
            + qscale * qsum * k_min.clone()
            + qmin.clone() * k_scale.clone() * k_sum.clone()
            + qmin * k_min.clone() * gk as f32;
    }
    let scores = scores * softmax_scale;
    let forbidden = forbidden.repeat_dim(2, group).expand([batch, kv_heads, rows, len]);
    let probs = softmax(scores.mask_fill(forbidden, f32::NEG_INFINITY), 3);

    // Closed blocks: Σ over blocks of Eq. 4 with P (8 bits) and V (per channel, Π tokens).
    let blocks = cache.blocks();
    let quantized_len = blocks * cache.partition;
    let mut out = Tensor::<B, 4>::zeros([batch, kv_heads, rows, head_dim], &probs.device());
    if let Some([v_codes, v_min, v_scale, v_sum]) = &o.values {
        let pi = cache.partition;
        let p = probs.clone().narrow(3, 0, quantized_len).reshape([batch, kv_heads, rows, blocks, pi]).swap_dims(2, 3);
        let [pc, pmin, pscale, psum] = quantize8(p);
        let dot = pc.matmul(v_codes.clone());
        let pv = pscale.clone() * v_scale.clone() * dot
            + pscale * psum * v_min.clone()
            + pmin.clone() * v_scale.clone() * v_sum.clone()
            + pmin * v_min.clone() * pi as f32;
        out = out + pv.sum_dim(2).reshape([batch, kv_heads, rows, head_dim]);
    }
    if let Some(tail) = cache.tail {
        let tail_probs = probs.narrow(3, quantized_len, len - quantized_len);
        out = out + tail_probs.matmul(tail.clone());
    }
    out.reshape([batch, heads, n, head_dim])
}
