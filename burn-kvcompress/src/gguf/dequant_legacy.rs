//! The 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ggml-quants.c `dequantize_row_*`).
//!
//! Callers ([`dequantize`](super::dequantize)) guarantee that `bytes` holds exactly
//! `out.len() / 32` blocks. The arithmetic is the same sequence of f32 operations as ggml's
//! reference code (no fused multiply-add), so results are bit-identical.

use super::dequant::f16_at;

const QK: usize = 32;

/// Q4_0 block: f16 `d`, 16 bytes of nibbles; `y = (q - 8) * d`; low nibbles are elements
/// 0..16, high nibbles 16..32.
pub(crate) fn dequantize_q4_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(18).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(&b[0..2]);
        let qs = &b[2..18];
        for j in 0..QK / 2 {
            let x0 = (qs[j] & 0x0F) as i32 - 8;
            let x1 = (qs[j] >> 4) as i32 - 8;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

/// Q4_1 block: f16 `d`, f16 `m`, 16 bytes of nibbles; `y = q * d + m`.
pub(crate) fn dequantize_q4_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(20).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(&b[0..2]);
        let m = f16_at(&b[2..4]);
        let qs = &b[4..20];
        for j in 0..QK / 2 {
            let x0 = (qs[j] & 0x0F) as f32;
            let x1 = (qs[j] >> 4) as f32;
            y[j] = x0 * d + m;
            y[j + QK / 2] = x1 * d + m;
        }
    }
}

/// Q5_0 block: f16 `d`, u32 `qh` (fifth bits), 16 bytes of nibbles; `y = (q - 16) * d`.
pub(crate) fn dequantize_q5_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(22).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(&b[0..2]);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..22];
        for j in 0..QK / 2 {
            let xh0 = ((qh >> j) << 4) & 0x10;
            let xh1 = (qh >> (j + 12)) & 0x10;
            let x0 = ((qs[j] as u32 & 0x0F) | xh0) as i32 - 16;
            let x1 = ((qs[j] as u32 >> 4) | xh1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + QK / 2] = x1 as f32 * d;
        }
    }
}

/// Q5_1 block: f16 `d`, f16 `m`, u32 `qh`, 16 bytes of nibbles; `y = q * d + m`.
pub(crate) fn dequantize_q5_1(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(24).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(&b[0..2]);
        let m = f16_at(&b[2..4]);
        let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let qs = &b[8..24];
        for j in 0..QK / 2 {
            let xh0 = ((qh >> j) << 4) & 0x10;
            let xh1 = (qh >> (j + 12)) & 0x10;
            let x0 = (qs[j] as u32 & 0x0F) | xh0;
            let x1 = (qs[j] as u32 >> 4) | xh1;
            y[j] = x0 as f32 * d + m;
            y[j + QK / 2] = x1 as f32 * d + m;
        }
    }
}

/// Q8_0 block: f16 `d`, 32 signed bytes; `y = q * d`.
pub(crate) fn dequantize_q8_0(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(&b[0..2]);
        for (yj, &q) in y.iter_mut().zip(&b[2..34]) {
            *yj = q as i8 as f32 * d;
        }
    }
}
