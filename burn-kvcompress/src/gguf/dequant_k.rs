//! The k-quant types Q4_K and Q6_K (256-element super-blocks; ggml-quants.c
//! `dequantize_row_q4_K` / `dequantize_row_q6_K`).
//!
//! Callers ([`dequantize`](super::dequantize)) guarantee that `bytes` holds exactly
//! `out.len() / 256` blocks; the f32 operations follow ggml's reference order exactly.

use super::dequant::f16_at;
use super::ggml_type::QK_K;

/// Q4_K block size in bytes: f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit scales/mins, 128
/// bytes of nibbles.
const Q4_K_BYTES: usize = 2 + 2 + 12 + QK_K / 2;
/// Q6_K block size in bytes: 128 bytes low nibbles, 64 bytes high 2-bit pairs, 16 i8 scales,
/// f16 `d`.
const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8).
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        let d = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        let m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        (d, m)
    }
}

/// Q4_K: each 64-element chunk uses two sub-blocks, low nibbles first, then high nibbles;
/// `y = (d * sc) * q - (dmin * m)`.
pub(crate) fn dequantize_q4_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(Q4_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let d = f16_at(&b[0..2]);
        let min = f16_at(&b[2..4]);
        let scales = &b[4..16];
        let qs = &b[16..Q4_K_BYTES];
        for (chunk, (q, yc)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc1, m1) = scale_min_k4(2 * chunk, scales);
            let (sc2, m2) = scale_min_k4(2 * chunk + 1, scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            for l in 0..32 {
                yc[l] = d1 * (q[l] & 0x0F) as f32 - m1;
                yc[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
            }
        }
    }
}

/// Q6_K: two 128-element halves; 6-bit values from a nibble of `ql` and two bits of `qh`,
/// minus 32; `y = (d * sc) * q` with one i8 scale per 16 elements.
pub(crate) fn dequantize_q6_k(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(Q6_K_BYTES).zip(out.chunks_exact_mut(QK_K)) {
        let ql_all = &b[0..QK_K / 2];
        let qh_all = &b[QK_K / 2..QK_K / 2 + QK_K / 4];
        let sc_all = &b[QK_K / 2 + QK_K / 4..QK_K / 2 + QK_K / 4 + QK_K / 16];
        let d = f16_at(&b[Q6_K_BYTES - 2..Q6_K_BYTES]);
        for half in 0..2 {
            let ql = &ql_all[64 * half..64 * half + 64];
            let qh = &qh_all[32 * half..32 * half + 32];
            let sc = &sc_all[8 * half..8 * half + 8];
            let yh = &mut y[128 * half..128 * half + 128];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                yh[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                yh[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                yh[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                yh[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
            }
        }
    }
}
