//! Lookup-table attention in plain tensor ops.
//!
//! For the coded slots, the scores come from a table (MILLION Eq. 7, step ①–②): per query row
//! and subspace `i`, `T[i, c] = <q^(i), C_K^i[c]>` for every centroid `c`; a slot's score is
//! `Σ_i T[i, code_i]`, equal to `q · K̂` in exact arithmetic. Values are rebuilt from their codes
//! (`V̂^(i) = C_V^i[code_i]`). The recent window's slots are scored and weighted in f32. All
//! slots share one softmax, which equals the paper's log-sum-exp merge of the two parts.

use burn::tensor::{activation::softmax, backend::Backend, Int, Tensor};
use burn_kvcompress::{
    cache::{check_attend_shapes, AttendOptions},
    error::CacheError,
};

use crate::kernels::{unpack_codes, PqView};

/// Most elements of the gathered table and scores per query step (bounds the reference's memory).
const STEP_ELEMENTS: usize = 1 << 24;

/// Per query row, the score of every coded slot by table lookups.
///
/// `q: [batch, kv_heads, rows, head_dim]` (a KV head's query rows), `codes: [batch, kv_heads,
/// coded, subspaces]`, `books: [groups, subspaces, centroids, sub_dim]`; returns `[batch,
/// kv_heads, rows, coded]` (unscaled).
pub fn lut_scores<B: Backend>(q: Tensor<B, 4>, codes: Tensor<B, 4, Int>, books: &Tensor<B, 4>) -> Tensor<B, 4> {
    let [batch, kv_heads, rows, _] = q.dims();
    let [_, _, coded, m] = codes.dims();
    let ds = books.dims()[3];
    let q = q.reshape([batch, kv_heads, rows, m, ds]).permute([0, 1, 3, 2, 4]);
    let books = books_per_head(books, batch, kv_heads).swap_dims(3, 4);
    // [batch, kv_heads, m, rows, centroids] -> [batch, kv_heads, rows, m, centroids]
    let table = q.matmul(books).permute([0, 1, 3, 2, 4]);
    let index = codes.swap_dims(2, 3).reshape([batch, kv_heads, 1, m, coded]).expand([batch, kv_heads, rows, m, coded]);
    table.gather(4, index).sum_dim(3).reshape([batch, kv_heads, rows, coded])
}

/// `books: [groups, m, centroids, sub_dim]` broadcast to `[batch, kv_heads, m, centroids, sub_dim]`.
fn books_per_head<B: Backend>(books: &Tensor<B, 4>, batch: usize, kv_heads: usize) -> Tensor<B, 5> {
    let [groups, m, centroids, ds] = books.dims();
    books.clone().reshape([1, groups, m, centroids, ds]).expand([batch, kv_heads, m, centroids, ds])
}

/// Vectors rebuilt from codes: `codes: [batch, kv_heads, n, subspaces]`, `books: [groups,
/// subspaces, centroids, sub_dim]`; returns `[batch, kv_heads, n, subspaces * sub_dim]`.
pub fn reconstruct<B: Backend>(codes: Tensor<B, 4, Int>, books: &Tensor<B, 4>) -> Tensor<B, 4> {
    let [batch, kv_heads, n, m] = codes.dims();
    let ds = books.dims()[3];
    let index = codes.swap_dims(2, 3).reshape([batch, kv_heads, m, n, 1]).expand([batch, kv_heads, m, n, ds]);
    books_per_head(books, batch, kv_heads).gather(3, index).permute([0, 1, 3, 2, 4]).reshape([
        batch,
        kv_heads,
        n,
        m * ds,
    ])
}

/// Attention of `q: [batch, heads, q_len, head_dim]` (the last `q_len` slots) over `view`,
/// `[batch, heads, q_len, head_dim]`. Long query runs are split into steps so that the gathered
/// table and the scores stay under 2^24 elements.
pub fn attention_reference<B: Backend>(
    q: Tensor<B, 4>,
    view: &PqView<'_, B>,
    options: &AttendOptions,
) -> Result<Tensor<B, 4>, CacheError> {
    let first = view.codes.map(|(k, _)| k).map(|k| k.dims()).or(view.recent.map(|(k, _)| k.dims()));
    let [batch, kv_heads, _, _] = first.ok_or_else(|| CacheError::Request("attention over an empty cache".into()))?;
    let head_dim = q.dims()[3];
    let total = view.len();
    let (_, heads, q_len, _) = check_attend_shapes(q.dims(), [batch, kv_heads, total, head_dim], options)?;
    let group = heads / kv_heads;
    let coded = view.coded();
    // Per query: its gathered table entries and its scores.
    let per_query = batch * kv_heads * group * (view.config.subspaces * coded + total);
    let step = (STEP_ELEMENTS / per_query).clamp(1, q_len);
    if step == q_len {
        return Ok(attend_last(q, view, options, kv_heads, total));
    }
    let parts = (0..q_len)
        .step_by(step)
        .map(|start| {
            let n = step.min(q_len - start);
            // The queries of slots [end - n, end) see at most the first `end` slots.
            let end = total - q_len + start + n;
            attend_last(q.clone().narrow(2, start, n), view, options, kv_heads, end)
        })
        .collect();
    Ok(Tensor::cat(parts, 2))
}

/// Attention of queries that are the last of the view's first `end` slots.
fn attend_last<B: Backend>(
    q: Tensor<B, 4>,
    view: &PqView<'_, B>,
    options: &AttendOptions,
    kv_heads: usize,
    end: usize,
) -> Tensor<B, 4> {
    let [batch, heads, q_len, d] = q.dims();
    let coded = view.coded().min(end);
    let recent = end - coded;
    let group = heads / kv_heads;
    let rows = q.reshape([batch, kv_heads, group * q_len, d]);
    let (mut scores, mut values) = (Vec::new(), Vec::new());
    if let (Some((k_codes, v_codes)), true) = (view.codes, coded > 0) {
        let k = unpack_codes(k_codes.clone().narrow(2, 0, coded), &view.config);
        let v = unpack_codes(v_codes.clone().narrow(2, 0, coded), &view.config);
        scores.push(lut_scores(rows.clone(), k, view.key_books));
        values.push(reconstruct(v, view.value_books));
    }
    if let (Some((k, v)), true) = (view.recent, recent > 0) {
        scores.push(rows.matmul(k.clone().narrow(2, 0, recent).swap_dims(2, 3)));
        values.push(v.clone().narrow(2, 0, recent));
    }
    let scores = Tensor::cat(scores, 3) * options.scale;
    let forbidden = options.forbidden_mask::<B>(q_len, end, &scores.device()).repeat_dim(2, group).expand([
        batch,
        kv_heads,
        group * q_len,
        end,
    ]);
    let probs = softmax(scores.mask_fill(forbidden, f32::NEG_INFINITY), 3);
    probs.matmul(Tensor::cat(values, 2)).reshape([batch, heads, q_len, d])
}
