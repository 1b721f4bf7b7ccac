//! Quantize + pack on the host with the scalar quantizer of [`crate::quant`]: the reference the
//! quantize kernel is tested against bit for bit, and the implementation on non-Cube backends.

use burn::tensor::{backend::Backend, ElementConversion, Int, Tensor, TensorData};

use crate::{
    kernels::{Codes, PackedRows, QuantizeSpec, RowLayout},
    quant::{pack_codes, quantize_group, quantize_group_clipped, QuantError},
};

/// Quantizes `x: [batch, kv_heads, rows, z]` per `spec` into [`Codes`] on `x`'s device.
pub fn quantize_reference<B: Backend>(x: Tensor<B, 4>, spec: &QuantizeSpec) -> Result<Codes<B>, QuantError> {
    let [batch, kv_heads, rows, z] = x.dims();
    let device = x.device();
    let values: Vec<f32> = x.into_data().convert::<f32>().into_vec().expect("f32 data");
    let parts = z / spec.group;
    let mut words = Vec::with_capacity(batch * kv_heads * rows * parts * spec.words_per_group());
    let (mut params_words, mut sums) = (Vec::new(), Vec::new());
    for b in 0..batch {
        for h in 0..kv_heads {
            for row in 0..rows {
                let start = ((b * kv_heads + h) * rows + row) * z;
                for p in 0..parts {
                    let part = &values[start + p * spec.group..start + (p + 1) * spec.group];
                    let index = |i: usize| spec.index(batch, kv_heads, b, h, row, p * spec.group + i);
                    let (params, codes) = match spec.clip {
                        true => quantize_group_clipped(part, spec.bits, &spec.rounder, index)?,
                        false => quantize_group(part, spec.bits, &spec.rounder, index)?,
                    };
                    let packed = pack_codes(&codes, spec.bits);
                    words.extend(packed.chunks_exact(4).map(|w| i32::from_le_bytes(w.try_into().unwrap())));
                    params_words.push(params.word());
                    sums.push(codes.iter().map(|&c| c as i32).sum::<i32>());
                }
            }
        }
    }
    let meta = [batch, kv_heads, rows, parts];
    let int = |v: Vec<i32>, shape: [usize; 4]| Tensor::<B, 4, Int>::from_data(TensorData::new(v, shape), &device);
    Ok(Codes {
        words: int(words, [batch, kv_heads, rows, parts * spec.words_per_group()]),
        params: int(params_words, meta),
        sums: int(sums, meta),
    })
}

/// Quantizes the blocks of Π slots of `x: [batch, kv_heads, blocks · Π, head_dim]` for the
/// channel layout, the axes named by `spec.layout`:
/// - [`RowLayout::ValueBlocks`] (keys): partitions per channel over a block's Π slots (`group` =
///   Π); words `[batch, kv_heads, blocks · Π, head_dim · bits / 32]` (a row per slot), params
///   `[batch, kv_heads, blocks · head_dim, 1]` (a row per block and channel);
/// - [`RowLayout::Keys`] (values): partitions per slot over `group` channels; words `[batch,
///   kv_heads, blocks · head_dim, Π · bits / 32]` (a row per block and channel), params `[batch,
///   kv_heads, blocks · Π, head_dim / group]` (a row per slot).
///
/// Each partition quantized by [`quantize_reference`] (its rounding indices are the row
/// layout's), then each block's code matrix transposed so that words pack along the other axis.
pub fn quantize_blocks_reference<B: Backend>(
    x: Tensor<B, 4>,
    spec: &QuantizeSpec,
) -> Result<PackedRows<B>, QuantError> {
    let [batch, kv_heads, slots, d] = x.dims();
    let pi = spec.partition;
    let blocks = slots / pi;
    let (codes, rows, cols) = match spec.layout {
        RowLayout::ValueBlocks { .. } => {
            let channel_rows =
                x.reshape([batch, kv_heads, blocks, pi, d]).swap_dims(3, 4).reshape([batch, kv_heads, blocks * d, pi]);
            (quantize_reference(channel_rows, spec)?, d, pi)
        }
        RowLayout::Keys { .. } => (quantize_reference(x, spec)?, pi, d),
    };
    Ok(PackedRows { words: transpose_blocks(codes.words, spec.bits, rows, cols), params: codes.params })
}

/// Packed `bits`-bit codes `[batch, kv_heads, blocks · rows, cols · bits / 32]` (each block
/// `rows` rows of `cols` codes) as `[batch, kv_heads, blocks · cols, rows · bits / 32]`: each
/// block's code matrix transposed.
fn transpose_blocks<B: Backend>(words: Tensor<B, 4, Int>, bits: u8, rows: usize, cols: usize) -> Tensor<B, 4, Int> {
    let [batch, kv_heads, all_rows, _] = words.dims();
    let blocks = all_rows / rows;
    let codes = unpack_words(words, bits).reshape([batch * kv_heads, blocks, rows, cols]).swap_dims(2, 3);
    pack_words(codes.reshape([batch, kv_heads, blocks * cols, rows]), bits)
}

/// Unpacks `words: [a, b, rows, w]` into codes `[a, b, rows, w * 32 / bits]` with tensor ops.
pub fn unpack_words<B: Backend>(words: Tensor<B, 4, Int>, bits: u8) -> Tensor<B, 4, Int> {
    let [a, b, rows, w] = words.dims();
    let per_word = 32 / bits as usize;
    let shifts: Vec<i32> = (0..per_word).map(|i| (i * bits as usize) as i32).collect();
    let shifts = Tensor::<B, 1, Int>::from_data(TensorData::new(shifts, [per_word]), &words.device())
        .reshape([1, 1, 1, 1, per_word])
        .expand([a, b, rows, w, per_word]);
    let mask = (1i32 << bits) - 1;
    words
        .reshape([a, b, rows, w, 1])
        .expand([a, b, rows, w, per_word])
        .bitwise_right_shift(shifts)
        .bitwise_and_scalar(mask.elem())
        .reshape([a, b, rows, w * per_word])
}

/// Packs codes `[a, b, rows, n]` (each in `0 .. 2^bits`, `n` a multiple of `32 / bits`) into words
/// `[a, b, rows, n * bits / 32]` with tensor ops, the inverse of [`unpack_words`]. A word is held
/// as the `i32` with its bits on every integer width: the top code enters as its signed
/// `bits`-bit value times `2^(32 − bits)`, so no sum leaves the `i32` range.
pub fn pack_words<B: Backend>(codes: Tensor<B, 4, Int>, bits: u8) -> Tensor<B, 4, Int> {
    let [a, b, rows, n] = codes.dims();
    let per_word = 32 / bits as usize;
    let w = n / per_word;
    let codes = codes.reshape([a, b, rows, w, per_word]);
    let low_shifts: Vec<i32> = (0..per_word - 1).map(|i| (i * bits as usize) as i32).collect();
    let low_shifts = Tensor::<B, 1, Int>::from_data(TensorData::new(low_shifts, [per_word - 1]), &codes.device())
        .reshape([1, 1, 1, 1, per_word - 1])
        .expand([a, b, rows, w, per_word - 1]);
    let low = codes.clone().narrow(4, 0, per_word - 1).bitwise_left_shift(low_shifts).sum_dim(4);
    let top = codes.narrow(4, per_word - 1, 1);
    let sign = top.clone().bitwise_right_shift_scalar(((bits - 1) as i32).elem());
    let signed_top = top - sign.mul_scalar(1i32 << bits);
    let top = signed_top.mul_scalar(1i32 << (32 - bits as u32));
    (low + top).reshape([a, b, rows, w])
}
