//! A partition's fp16 (min, scale) word in a kernel
//! ([`GroupParams::word`](crate::quant::GroupParams::word)), written and read with integer
//! arithmetic where every backend runs the kernel (WGSL has no bitcast between a 32-bit word and
//! two f16), and with the hardware's conversion in the CUDA-only tensor-core kernel.

use cubecl::prelude::*;
use half::f16;

/// `2⁻²⁴`, the unit of fp16's subnormal numbers.
const SUBNORMAL_UNIT: f32 = 5.9604645e-8;
/// Bits of the smallest normal fp16, `2⁻¹⁴`, as an f32.
const SMALLEST_NORMAL_F32_BITS: u32 = 0x3880_0000;
/// The exponent bias of f32 less that of fp16, at f32's exponent field.
const REBIAS: u32 = 112 << 23;

/// The fp16 bits of `x`, an f32 that is exactly an fp16 number (as the quantize kernel's rounded
/// minima and scales are): the sign, the exponent rebiased and the mantissa's top 10 bits for a
/// normal number, `|x| · 2²⁴` for a subnormal one.
#[cube]
fn half_bits(x: f32) -> u32 {
    let bits = u32::reinterpret(x);
    let sign = (bits >> 16) & 0x8000;
    let magnitude = bits & 0x7FFF_FFFF;
    let normal = (magnitude - REBIAS) >> 13;
    let subnormal = u32::cast_from(f32::abs(x) * (1.0 / SUBNORMAL_UNIT));
    sign | select(magnitude >= SMALLEST_NORMAL_F32_BITS, normal, subnormal)
}

/// The fp16 number whose bits are the low 16 bits of `bits`, as f32 (exact; `bits`' exponent
/// field below 31): its sign, exponent rebiased and mantissa widened for a normal number, its
/// mantissa times `2⁻²⁴` for a subnormal one.
#[cube]
fn half_value(bits: u32) -> f32 {
    let sign = (bits & 0x8000) << 16;
    let magnitude = bits & 0x7FFF;
    let normal = f32::reinterpret(sign | ((magnitude << 13) + REBIAS));
    let subnormal = f32::reinterpret(sign | u32::reinterpret(f32::cast_from(magnitude) * SUBNORMAL_UNIT));
    select(magnitude >= 0x400, normal, subnormal)
}

/// A partition's word from its fp16 minimum and scale (held exactly in f32).
#[cube]
pub fn params_word(min: f32, scale: f32) -> u32 {
    (half_bits(scale) << 16) | half_bits(min)
}

/// A partition's minimum from its word.
#[cube]
pub fn params_min(word: u32) -> f32 {
    half_value(word)
}

/// A partition's scale from its word.
#[cube]
pub fn params_scale(word: u32) -> f32 {
    half_value(word >> 16)
}

/// A partition's `(min, scale)` from its word by the hardware's conversion of an f16 pair
/// (CUDA), as f32 (exact): `[0]` the minimum, `[1]` the scale.
#[cube]
pub fn params_pair(word: u32) -> Vector<f32, Const<2>> {
    Vector::<f32, Const<2>>::cast_from(Vector::<f16, Const<2>>::reinterpret(word))
}
