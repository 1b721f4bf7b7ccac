//! Lane-level pieces the two tensor-core decode kernels share (the paper layout's,
//! `attention/mma_kernel.rs`, and the channel layout's, `channel/mma_kernel.rs`): reductions over a
//! quad of lanes (`4g .. 4g + 4`, the lanes of one row of a warp product's fragments), the
//! float-add rounding of 8-bit codes, the floor that tells real scores from masked ones and the
//! log-sum-exp join of two running softmaxes; and the paper layout's lift, which turns a word of
//! 2-bit codes into an operand register (the channel layout masks one field of a lane's own
//! words instead, `channel/mma_operands.rs`).

use cubecl::prelude::*;

/// The four 2-bit codes of a lifted word that land in a register's bytes, at their tops.
pub const TOP_CODES: u32 = 0xC0C0_C0C0;
/// A lifted 2-bit code's weight in the products: a code `c` enters as `64 c`.
pub const LIFT: u32 = 64;

/// `2²³`: for `0 ≤ x < 2²²`, `x + 2²³` rounds `x` to the nearest integer (ties to even: floats in
/// `[2²³, 2²⁴)` are the integers) and holds it in its mantissa's low bits ([`ROUNDER_BITS`] plus
/// the integer), so an 8-bit code needs no float-to-integer conversion.
pub const ROUNDER: f32 = 8_388_608.0;
/// The bits of [`ROUNDER`]: a rounded code `c`'s bits are `ROUNDER_BITS + c`.
pub const ROUNDER_BITS: u32 = 0x4B00_0000;

/// Below every real score and far above the masked score
/// ([`masked_score`](burn_kvcompress::kernels::masked_score)): `exp(masked_score() −
/// VISIBLE_FLOOR)` is 0 (its argument, about −2e38, is finite).
pub const VISIBLE_FLOOR: f32 = -1.0e38;

/// Two running softmaxes' log-sum-exp join: the larger max and the weights `exp(top − max)` that
/// rescale what each side summed (0 for a side that has seen no visible score).
#[derive(CubeType)]
pub struct Join {
    pub max: f32,
    pub first: f32,
    pub second: f32,
}

/// The [`Join`] of running maxima `first` and `second`.
#[cube]
pub fn join_tops(first: f32, second: f32) -> Join {
    let max = f32::max(first, second);
    Join {
        max,
        first: select(first > VISIBLE_FLOOR, f32::exp(first - max), 0.0),
        second: select(second > VISIBLE_FLOOR, f32::exp(second - max), 0.0),
    }
}

/// The calling lane's lift, `4^(3 − t)` for lane `4g + t`: it moves the lane's codes `t, 4 + t,
/// 8 + t, 12 + t` of a word to the tops of their bytes.
#[cube]
pub fn lane_lift() -> u32 {
    let t = UNIT_POS % 4;
    LIFT >> (2 * t)
}

/// The operand register of the lane's four 2-bit codes of `word`, each 64 times its code: `(word
/// · lift) & TOP_CODES`, a multiply and a mask (`lift` from [`lane_lift`]).
#[cube]
pub fn lifted_codes(word: u32, lift: u32) -> Vector<u8, Const<4>> {
    Vector::<u8, Const<4>>::reinterpret((word * lift) & TOP_CODES)
}

/// Max-reduces `v` over the four lanes `4g + t` of the caller's `g`.
#[cube]
pub fn quad_max(v: f32) -> f32 {
    let v = f32::max(v, plane_shuffle_xor(v, 1));
    f32::max(v, plane_shuffle_xor(v, 2))
}

/// Min-reduces `v` over the four lanes `4g + t` of the caller's `g`.
#[cube]
pub fn quad_min(v: f32) -> f32 {
    let v = f32::min(v, plane_shuffle_xor(v, 1));
    f32::min(v, plane_shuffle_xor(v, 2))
}

/// Sums `v` over the four lanes `4g + t` of the caller's `g`.
#[cube]
pub fn quad_sum(v: f32) -> f32 {
    let v = v + plane_shuffle_xor(v, 1);
    v + plane_shuffle_xor(v, 2)
}
