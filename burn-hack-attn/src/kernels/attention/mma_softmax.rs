//! A block's softmax in the tensor-core decode kernel ([`mma_kernel`](super::mma_kernel)): per
//! head slot, the block's max score, the numerators and their mass, and for a closed block their
//! 8-bit P codes ([`block_softmax`]).

use burn_kvcompress::kernels::masked_score;
use cubecl::prelude::*;

use super::mma_geometry::MmaGeometry;
use crate::kernels::{
    eight_bit::{numerator, scale8},
    warp_codes::{quad_max, quad_min, quad_sum, ROUNDER, ROUNDER_BITS, VISIBLE_FLOOR},
};

/// A P code is rounded by [`ROUNDER`] with no clamp: its argument is at least 0 and below 255.5
/// (see `MIN_P_STEP`). `code8` (and the reference) round ties up; a tie needs `(p − lo) / step`
/// to fall exactly on a half, which float noise of an ulp decides either way.
///
/// The least step of a block's P codes, `2⁻²⁰`: four times the fast exponential's largest excess
/// over 1 (`2⁻²²`), so that no code's argument reaches 255.5. It only coarsens blocks whose
/// numerators all lie within `255 · 2⁻²⁰ ≈ 2.4e-4` of 1 (`code8`'s step would be smaller), where
/// a code's error stays below `2⁻²¹`.
const MIN_P_STEP: f32 = 1.0 / 1_048_576.0;

/// A block's softmax for one head slot: its max score, and (for a closed block) the 8-bit
/// quantization of its numerators.
#[derive(CubeType)]
pub(super) struct BlockNumerators {
    pub(super) top: f32,
    pub(super) mass: f32,
    pub(super) lo: f32,
    pub(super) step: f32,
    pub(super) code_sum: f32,
}

/// Replaces head slot `h`'s scores in `s` by their numerators `exp(s − m_b)` under the block's max
/// `m_b`, and for a closed block packs their 8-bit codes into `codes`: `s` indices `4x .. 4x + 4`
/// of the head slot, the lane's slots of slot tiles `2x` and `2x + 1`, are the bytes of
/// `codes[h · slot_tiles / 2 + x]`, the value product's operand register for depth half `x`.
#[cube]
pub(super) fn block_softmax(
    s: &mut Array<f32>,
    codes: &mut Array<u32>,
    #[comptime] h: u32,
    closed: bool,
    #[comptime] geo: MmaGeometry,
) -> BlockNumerators {
    let first = comptime!(h * geo.slot_tiles() * 2);
    let count = comptime!(geo.slot_tiles() * 2);
    let mut m = masked_score();
    #[unroll]
    for x in 0..count {
        m = f32::max(m, s[(first + x) as usize]);
    }
    let top = quad_max(m);
    // The numerators' reference: the block's max, or where the lanes see no slot of the block, a
    // floor between the masked score and any real one, so that a masked score's numerator is 0
    // with no comparison per score.
    let reference = f32::max(top, VISIBLE_FLOOR);
    let mut l = 0.0f32;
    let mut lo = 1.0f32;
    #[unroll]
    for x in 0..count {
        let score = s[(first + x) as usize];
        let p = f32::exp(score - reference);
        s[(first + x) as usize] = p;
        l += p;
        lo = f32::min(lo, p);
    }
    let mut numerators = BlockNumerators { top, mass: quad_sum(l), lo: 0.0, step: 1.0, code_sum: 0.0 };
    if closed {
        // The block's largest numerator is `exp(0) = 1`, or 0 where it sees no slot. The fast
        // exponential may return up to `2⁻²²` above 1 for an argument just below 0: the step's
        // floor ([`MIN_P_STEP`]) keeps that within a quarter code of the top.
        let lo = quad_min(lo);
        let step = f32::max(scale8(lo, numerator(top, top)), MIN_P_STEP);
        // A multiply by the reciprocal instead of `code8`'s division: one more rounding of a
        // code's argument (an ulp), of the order of the scores' own float noise, which the decode
        // test's bound measures (`tests/integration/attention_gpu.rs`, `reference_sensitivity`).
        // `(p − lo) · per_step + ROUNDER` in one multiply-add rounds `(p − lo) / step`, in `[0,
        // 255.25]` for `lo ≤ p ≤ 1 + 2⁻²²`, to the nearest integer, the code, which then lies
        // in the result's low byte (see [`ROUNDER`]). (Folding `lo` into the addend instead would
        // round `lo · per_step`, which nearly equal numerators make large, by up to half a code.)
        let per_step = 1.0 / step;
        // Each rounded value's bits are `ROUNDER_BITS` + its code: the sum starts `count` of them
        // below 0 (wrapping), so that it ends at the codes' sum.
        let mut sum = u32::new(comptime!(0u32.wrapping_sub(ROUNDER_BITS.wrapping_mul(count)) as i64));
        #[unroll]
        for x in 0..comptime!(geo.slot_tiles() / 2) {
            let mut word = 0u32;
            #[unroll]
            for k in 0..4u32 {
                let rounded = u32::reinterpret(fma(s[(first + 4 * x + k) as usize] - lo, per_step, ROUNDER));
                word |= (rounded & 0xFF) << (8 * k);
                sum += rounded;
            }
            codes[(h * comptime!(geo.slot_tiles() / 2) + x) as usize] = word;
        }
        numerators.lo = lo;
        numerators.step = step;
        numerators.code_sum = quad_sum(f32::cast_from(sum));
    }
    numerators
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_zeroes_masked_numerators_only() {
        let masked = burn_kvcompress::kernels::MASKED_SCORE;
        let argument = masked - VISIBLE_FLOOR;
        assert!(argument.is_finite() && argument.exp() == 0.0);
        assert_eq!(f32::max(masked, VISIBLE_FLOOR), VISIBLE_FLOOR);
        assert_eq!(f32::max(-1.0e30, VISIBLE_FLOOR), -1.0e30);
    }

    #[test]
    fn the_rounder_leaves_each_p_code_in_the_low_byte_and_the_sum_exact() {
        assert_eq!(ROUNDER.to_bits(), ROUNDER_BITS);
        // Arguments over [0, 255.25], halves (ties) included.
        let arguments: Vec<f32> = (0..=1021).map(|i| i as f32 * 0.25).chain([0.4999, 0.5001, 254.5, 255.2]).collect();
        for chunk in arguments.chunks(16) {
            let count = chunk.len() as u32;
            let mut sum = 0u32.wrapping_sub(ROUNDER_BITS.wrapping_mul(count));
            let mut codes = 0u32;
            for &x in chunk {
                let rounded = (x + ROUNDER).to_bits();
                let code = x.round_ties_even() as u32;
                assert_eq!((rounded & 0xFF, rounded - ROUNDER_BITS), (code, code), "argument {x}");
                sum = sum.wrapping_add(rounded);
                codes += code;
            }
            assert_eq!(sum, codes);
        }
    }

    #[test]
    fn the_least_p_step_keeps_the_top_code_at_255() {
        // The fast exponential's largest excess over 1, against blocks whose numerators all lie
        // close to 1 (at the least step's threshold and closer) or spread out.
        let top = 1.0 + 2f32.powi(-22);
        for lo in [1.0 - 255.0 * MIN_P_STEP, 1.0 - MIN_P_STEP, 1.0 - 2f32.powi(-23), 0.999, 0.5, 0.0] {
            let step = f32::max((1.0 - lo) / 255.0, MIN_P_STEP);
            let per_step = 1.0 / step;
            let argument = (top - lo) * per_step;
            let rounded = (top - lo).mul_add(per_step, ROUNDER).to_bits();
            assert!(argument < 255.5 && rounded - ROUNDER_BITS <= 255, "lo {lo}: argument {argument}");
            assert_eq!((lo - lo).mul_add(per_step, ROUNDER).to_bits(), ROUNDER_BITS);
        }
    }
}
