//! The counter-based rounding numbers of [`crate::quant::uniform`], as cube functions: the same
//! wrapping 32-bit arithmetic, so kernels draw exactly the host's numbers.

use cubecl::prelude::*;

/// [`crate::quant::mix32`] in a kernel.
#[cube]
pub fn mix32_cube(x: u32) -> u32 {
    let mut x = x;
    x ^= x >> 16u32;
    x *= 0x7feb_352du32;
    x ^= x >> 15u32;
    x *= 0x846c_a68bu32;
    x ^= x >> 16u32;
    x
}

/// [`crate::quant::uniform`] in a kernel.
#[cube]
pub fn uniform_cube(stream: u32, index: u32) -> f32 {
    f32::cast_from(mix32_cube(mix32_cube(index) ^ stream) >> 8u32) * (1.0 / 16_777_216.0)
}
