//! A partition's fp16 metadata in one 32-bit word, as the caches hold it on every backend: the
//! minimum's fp16 bits in the low half, the scale's in the high half (the paper's 4 bytes per
//! partition; a kernel reads both with one load and converts the pair with one instruction).
//!
//! The scale is positive (a degenerate partition's is 1), so the word read as an `i32` (the
//! backends' integer) is never negative.

use burn::tensor::{backend::Backend, ElementConversion, Int, Tensor};
use half::f16;

use super::GroupParams;

/// Bits of the f16 field of a word.
const HALF_BITS: i32 = 16;
/// The low field's mask.
const HALF_MASK: i32 = 0xFFFF;

impl GroupParams {
    /// The partition's word: `min`'s bits low, `scale`'s high.
    pub fn word(&self) -> i32 {
        (((self.scale.to_bits() as u32) << HALF_BITS) | self.min.to_bits() as u32) as i32
    }

    /// The parameters [`Self::word`] packed.
    pub fn from_word(word: i32) -> Self {
        let word = word as u32;
        GroupParams { min: f16::from_bits(word as u16), scale: f16::from_bits((word >> HALF_BITS) as u16) }
    }
}

/// The minima of words `[..]` as f32, with tensor ops (exact).
pub fn word_minima<B: Backend, const D: usize>(words: Tensor<B, D, Int>) -> Tensor<B, D> {
    half_values(words.bitwise_and_scalar(HALF_MASK.elem()))
}

/// The scales of words `[..]` as f32, with tensor ops (exact).
pub fn word_scales<B: Backend, const D: usize>(words: Tensor<B, D, Int>) -> Tensor<B, D> {
    half_values(words.bitwise_right_shift_scalar(HALF_BITS.elem()).bitwise_and_scalar(HALF_MASK.elem()))
}

/// The finite fp16 numbers whose bits are `bits` (each in `0..=0xFFFF`, exponent field below 31)
/// as f32, exactly: `±mantissa · 2^(exponent − 25)` with the implicit bit for normal numbers, where
/// `mantissa · 2^(exponent − 1)` has at most 11 significant bits below `2^40` (exact in f32) and the
/// factor `2^−24` is a power of two.
fn half_values<B: Backend, const D: usize>(bits: Tensor<B, D, Int>) -> Tensor<B, D> {
    let negative = bits.clone().bitwise_right_shift_scalar(15.elem()).float();
    let exponent = bits.clone().bitwise_right_shift_scalar(10.elem()).bitwise_and_scalar(31.elem());
    let fraction = bits.bitwise_and_scalar(1023.elem());
    let normal = exponent.clone().greater_elem(0).int();
    let mantissa = fraction + normal * 1024;
    let power = exponent.ones_like().bitwise_left_shift(exponent.clamp_min(1) - 1).float();
    let sign = negative.mul_scalar(-2.0).add_scalar(1.0);
    mantissa.float() * power * sign * (2.0f32).powi(-24)
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::backend::NdArray;
    use burn::tensor::TensorData;

    #[test]
    fn words_round_trip_every_finite_half() {
        // Every finite fp16 as a minimum, paired with a few scales; decoded with tensor ops.
        let minima: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).filter(|h| h.is_finite()).collect();
        let scales = [f16::ONE, f16::from_f32(6.1e-5), f16::from_f32(3.0e-7), f16::MAX];
        let params: Vec<GroupParams> =
            minima.iter().enumerate().map(|(i, &min)| GroupParams { min, scale: scales[i % scales.len()] }).collect();
        for p in &params[..64] {
            assert_eq!(GroupParams::from_word(p.word()), *p);
            assert!(p.word() >= 0);
        }
        let n = params.len();
        let words = Tensor::<NdArray, 1, Int>::from_data(
            TensorData::new(params.iter().map(GroupParams::word).collect::<Vec<_>>(), [n]),
            &Default::default(),
        );
        let host = |t: Tensor<NdArray, 1>| t.into_data().convert::<f32>().into_vec::<f32>().unwrap();
        let (mins, scales_back) = (host(word_minima(words.clone())), host(word_scales(words)));
        for (i, p) in params.iter().enumerate() {
            assert_eq!(mins[i].to_bits(), p.min.to_f32().to_bits(), "min {:?}", p.min);
            assert_eq!(scales_back[i], p.scale.to_f32());
        }
    }
}
