//! The kernels' transient 8-bit quantization of Q and of the softmax numerators P (asymmetric
//! min/max, round to nearest, f32 metadata), as `quantize8` in the reference.

use burn_kvcompress::kernels::masked_score as masked;
use cubecl::prelude::*;

/// The softmax numerator `exp(s − m)` of score `s` under max `m`, 0 for a masked slot.
#[cube]
pub fn numerator(s: f32, m: f32) -> f32 {
    let mut x = 0.0f32;
    if s > masked() {
        x = f32::exp(s - m);
    }
    x
}

/// The 8-bit scale of a run of min `lo` and max `hi` (1 for a constant run).
#[cube]
pub fn scale8(lo: f32, hi: f32) -> f32 {
    let mut s = (hi - lo) / 255.0;
    if hi <= lo {
        s = 1.0;
    }
    s
}

/// The 8-bit code of `x` in a run of min `lo` and scale `s` (asymmetric, round to nearest).
#[cube]
pub fn code8(x: f32, lo: f32, s: f32) -> f32 {
    f32::floor((x - lo) / s + 0.5).clamp(0.0, 255.0)
}
