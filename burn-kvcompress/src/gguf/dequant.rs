//! Dequantization to f32: dispatch, and the plain float types (F32, F16, BF16).

use super::dequant_k::{dequantize_q4_k, dequantize_q6_k};
use super::dequant_legacy::{dequantize_q4_0, dequantize_q4_1, dequantize_q5_0, dequantize_q5_1, dequantize_q8_0};
use super::error::GgufError;
use super::ggml_type::GgmlType;

/// Reads the little-endian f16 at `b[0..2]` as f32 (`GGML_FP16_TO_FP32`, exact).
#[inline]
pub(crate) fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Whether [`dequantize`] handles `ty`.
pub fn is_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, F32 | F16 | BF16 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q4_K | Q6_K)
}

/// Dequantizes `n_elements` elements of type `ty` stored in `bytes`, exactly as ggml's
/// `dequantize_row_*` / `ggml_fp16_to_fp32` / `ggml_bf16_to_fp32` do.
///
/// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K; any other type gives
/// [`GgufError::UnsupportedTensorType`]. `n_elements` must be a whole number of blocks and
/// `bytes` exactly as long as they take, or [`GgufError::ShapeMismatch`].
pub fn dequantize(ty: GgmlType, bytes: &[u8], n_elements: usize) -> Result<Vec<f32>, GgufError> {
    if !is_supported(ty) {
        return Err(GgufError::UnsupportedTensorType(ty));
    }
    let block = ty.block_size();
    if !n_elements.is_multiple_of(block) {
        return Err(GgufError::ShapeMismatch {
            what: format!("{ty} element count (must be a multiple of the block size)"),
            expected: (n_elements.next_multiple_of(block)) as u64,
            found: n_elements as u64,
        });
    }
    let expected_bytes = (n_elements / block)
        .checked_mul(ty.type_size())
        .ok_or_else(|| GgufError::SizeOverflow { what: format!("{ty} byte size") })?;
    if bytes.len() != expected_bytes {
        return Err(GgufError::ShapeMismatch {
            what: format!("{ty} byte length for {n_elements} elements"),
            expected: expected_bytes as u64,
            found: bytes.len() as u64,
        });
    }
    let mut out = vec![0f32; n_elements];
    match ty {
        GgmlType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16_at(b);
            }
        }
        GgmlType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16);
            }
        }
        GgmlType::Q4_0 => dequantize_q4_0(bytes, &mut out),
        GgmlType::Q4_1 => dequantize_q4_1(bytes, &mut out),
        GgmlType::Q5_0 => dequantize_q5_0(bytes, &mut out),
        GgmlType::Q5_1 => dequantize_q5_1(bytes, &mut out),
        GgmlType::Q8_0 => dequantize_q8_0(bytes, &mut out),
        GgmlType::Q4_K => dequantize_q4_k(bytes, &mut out),
        GgmlType::Q6_K => dequantize_q6_k(bytes, &mut out),
        other => return Err(GgufError::UnsupportedTensorType(other)),
    }
    Ok(out)
}
