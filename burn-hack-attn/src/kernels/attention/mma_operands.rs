//! The tensor-core decode kernel's operand registers (see [`mma_kernel`](super::mma_kernel) for
//! their layout): four byte codes, half an accumulator fragment, and what undoes the lift of the
//! K/V codes.

use cubecl::prelude::*;

use crate::kernels::warp_codes::LIFT;

/// One operand register: four byte codes.
pub(super) type Codes = Vector<u8, Const<4>>;
/// Half an accumulator fragment: two `i32` dot products.
pub(super) type Dots = Vector<i32, Const<2>>;

/// What undoes the lift: the factor of a dot product or code sum of lifted codes (exact).
pub(super) const LIFTED: f32 = 1.0 / LIFT as f32;
/// An operand register of four codes 1: a row or column that sums the other operand's codes.
pub(super) const ONE_CODES: u32 = 0x0101_0101;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::warp_codes::TOP_CODES;

    #[test]
    fn a_lifted_register_is_64_times_the_shifted_codes() {
        // Lane t's register of a word: codes t, 4 + t, 8 + t, 12 + t in its bytes, lifted to the
        // tops of the bytes by `4^(3 − t)`; the same as the shift by 2t and the low mask, times 64.
        let mut word = 0x9e37_79b9u32;
        for _ in 0..1000 {
            word = word.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            for t in 0..4u32 {
                let lifted = word.wrapping_mul(LIFT >> (2 * t)) & TOP_CODES;
                let shifted = (word >> (2 * t)) & 0x0303_0303;
                assert_eq!(lifted, shifted * LIFT, "word {word:#x}, lane {t}");
            }
        }
        assert_eq!(LIFTED * LIFT as f32, 1.0);
    }
}
