//! Quantized rows on the device as the kernels produce and read them: [`Codes`] (the paper's
//! layout: packed codes, fp16 metadata and cached code sums) and [`PackedRows`] (the channel
//! layout: packed codes and fp16 metadata).

use burn::tensor::{backend::Backend, Int, Tensor};

use super::unpack_words;
use crate::quant::{word_minima, word_scales};

/// Rows quantized in partitions along their last axis, `[batch, kv_heads, rows, ·]`:
///
/// - `words`: `[batch, kv_heads, rows, parts * words_per_part]` packed codes, 32-bit words holding
///   `32 / bits` codes each, the first code in the lowest bits (stored as the backend's integer);
/// - `params`: `[batch, kv_heads, rows, parts]`, each partition's fp16 minimum and scale (the
///   paper's metadata type) in one word, the minimum's bits low
///   ([`GroupParams::word`](crate::quant::GroupParams::word));
/// - `sums`: `[batch, kv_heads, rows, parts]` cached code sums (summation elimination).
///
/// Keys keep one row per token (partitions = channel groups); values keep one row per (closed
/// block, channel), `rows = blocks * head_dim`, each row one partition of Π tokens.
#[derive(Debug, Clone)]
pub struct Codes<B: Backend> {
    /// Packed codes.
    pub words: Tensor<B, 4, Int>,
    /// Per-partition fp16 minimum and scale, one word each.
    pub params: Tensor<B, 4, Int>,
    /// Per-partition code sum.
    pub sums: Tensor<B, 4, Int>,
}

impl<B: Backend> Codes<B> {
    /// Rows held.
    pub fn rows(&self) -> usize {
        self.words.dims()[2]
    }

    /// `self` followed by `more` along the row axis.
    pub fn append(self, more: Codes<B>) -> Codes<B> {
        Codes {
            words: Tensor::cat(vec![self.words, more.words], 2),
            params: cat_dense_rows(self.params, more.params),
            sums: cat_dense_rows(self.sums, more.sums),
        }
    }

    /// Per-partition minima, `[batch, kv_heads, rows, parts]`.
    pub fn min(&self) -> Tensor<B, 4> {
        word_minima(self.params.clone())
    }

    /// Per-partition scales, `[batch, kv_heads, rows, parts]`.
    pub fn scale(&self) -> Tensor<B, 4> {
        word_scales(self.params.clone())
    }

    /// The values the codes stand for, `scale * code + min` per partition of `group` elements
    /// coded on `bits` bits: `[batch, kv_heads, rows, parts * group]`.
    pub fn dequantize(&self, bits: u8, group: usize) -> Tensor<B, 4> {
        let [a, b, rows, parts] = self.params.dims();
        let codes = unpack_words(self.words.clone(), bits).float().reshape([a, b, rows, parts, group]);
        let per_part = |t: Tensor<B, 4>| t.reshape([a, b, rows, parts, 1]);
        (codes * per_part(self.scale()) + per_part(self.min())).reshape([a, b, rows, parts * group])
    }
}

/// Packed codes and their (min, scale) words, `[batch, kv_heads, rows, ·]` (see
/// [`Codes`]; no code sums: the channel layout's products do not need them).
///
/// The codes are packed along the axis attention sums over, not the axis they were quantized
/// along: keys (quantized per channel over a block's slots) as one row of `head_dim` codes per
/// slot, values (quantized per slot in channel groups) as one row of Π codes per channel. A
/// word then holds consecutive terms of one dot product — what tensor-core operands take four at
/// a time and a scalar loop unpacks sixteen per load. The (min, scale) words keep the quantization
/// axis: one per (block, channel) for keys, one per (slot, group) for values.
#[derive(Debug, Clone)]
pub struct PackedRows<B: Backend> {
    /// Packed codes, `32 / bits` per word, the first in the lowest bits.
    pub words: Tensor<B, 4, Int>,
    /// Per partition, its fp16 minimum and scale in one word.
    pub params: Tensor<B, 4, Int>,
}

impl<B: Backend> PackedRows<B> {
    /// Rows of (min, scale) words held: `blocks · head_dim` for keys, `blocks · Π` for values.
    pub fn param_rows(&self) -> usize {
        self.params.dims()[2]
    }

    /// `this` followed by `more` along the row axis.
    pub(crate) fn append(this: Option<Self>, more: Self) -> Self {
        match this {
            None => more,
            Some(this) => Self {
                words: Tensor::cat(vec![this.words, more.words], 2),
                params: cat_dense_rows(this.params, more.params),
            },
        }
    }
}

/// `a` followed by `b` along axis 2, `[x, y, rows, width]`, through views of one element per row
/// (`[x, y, rows · width, 1]`): a backend that pads narrow rows in its allocations (CUDA's pads
/// two 4-byte values to 16 bytes) keeps the result dense, so the kernels read no padding between
/// two key groups' metadata.
fn cat_dense_rows<B: Backend, K>(a: Tensor<B, 4, K>, b: Tensor<B, 4, K>) -> Tensor<B, 4, K>
where
    K: burn::tensor::BasicOps<B>,
{
    let [x, y, first, width] = a.dims();
    let rows = first + b.dims()[2];
    let column = |t: Tensor<B, 4, K>| {
        let n = t.dims()[2];
        t.reshape([x, y, n * width, 1])
    };
    Tensor::cat(vec![column(a), column(b)], 2).reshape([x, y, rows, width])
}

/// Appends `more` to an optional `codes`.
pub(crate) fn append_codes<B: Backend>(codes: Option<Codes<B>>, more: Codes<B>) -> Codes<B> {
    match codes {
        Some(codes) => codes.append(more),
        None => more,
    }
}
