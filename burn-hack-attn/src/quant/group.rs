//! Quantizing one partition: `scale = (max - min) / (2^bits - 1)`, `code = round((x - min) / scale)`.
//!
//! Choices where the paper is silent (spec §2.2):
//! - `min` and `scale` are stored as fp16 (the paper's metadata type) and codes are computed
//!   against the *rounded* values, so dequantization `scale * code + min` uses exactly what is
//!   stored;
//! - codes are clamped to `[0, 2^bits - 1]` (fp16 rounding of `min`/`scale` can push
//!   `(x - min) / scale` just outside);
//! - a degenerate partition (`max == min`, or a range below fp16 resolution) gets scale 1 and
//!   codes 0, so it dequantizes to `min` exactly as stored;
//! - stochastic rounding rounds up with probability equal to the fractional part (never when the
//!   value is an exact level), from counter-based seeded numbers (see [`Rounder`]).
//!
//! Error bound (tested): with round-to-nearest `|x - x̂| <= scale / 2 + r`, with stochastic
//! rounding `|x - x̂| < scale + r`, where `r = 2^-10 * max(|min|, |max|)` covers the fp16 rounding
//! of `min` and `scale` (relative error `2^-11` each).

use half::f16;

use super::noise::{mix32, uniform};
use crate::Rounding;

/// The stored metadata of one partition (fp16, as in the paper).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GroupParams {
    /// The partition's minimum, rounded to fp16.
    pub min: f16,
    /// `(max - min) / (2^bits - 1)`, rounded to fp16 (1 for a degenerate partition).
    pub scale: f16,
}

/// A value cannot be quantized with fp16 metadata.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QuantError {
    /// NaN, infinity, or a magnitude beyond fp16's range (65504).
    #[error("value {0} cannot be represented with fp16 min/scale")]
    OutOfRange(f32),
}

/// How codes are rounded: `code = clamp(floor(y + offset), 0, 2^bits - 1)` with `y = (x - min) /
/// scale` and `offset` 0.5 (nearest) or a uniform number in `[0, 1)` (stochastic: up with
/// probability `frac(y)`, never from an exact level).
///
/// The stochastic offsets are counter-based, a hash of (stream, element index), not a stateful
/// generator: the CubeCL quantize kernel draws the very same numbers, so its codes equal the host
/// reference's bit for bit, whatever order the threads run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounder {
    /// Round to the nearest level.
    Nearest,
    /// Stochastic rounding with this stream's numbers.
    Stochastic {
        /// The stream id (see [`Rounder::new`]).
        stream: u32,
    },
}

impl Rounder {
    /// The rounder of `rounding` for one quantized tensor: `tensor` tells apart the tensors that
    /// share a seed (e.g. layer `l`'s keys are `2 l`, its values `2 l + 1`).
    pub fn new(rounding: Rounding, tensor: u32) -> Self {
        match rounding {
            Rounding::Nearest => Self::Nearest,
            Rounding::Stochastic { seed } => {
                Self::Stochastic { stream: mix32(seed as u32 ^ mix32((seed >> 32) as u32 ^ mix32(tensor))) }
            }
        }
    }

    /// The rounding offset of the element with global index `index`.
    pub fn offset(&self, index: u32) -> f32 {
        match *self {
            Self::Nearest => 0.5,
            Self::Stochastic { stream } => uniform(stream, index),
        }
    }
}

/// Quantizes `values` (one partition, non-empty) to `bits`-bit codes (`bits` in 1..=8); element
/// `i` draws its rounding offset at global index `index(i)`.
pub fn quantize_group(
    values: &[f32],
    bits: u8,
    rounder: &Rounder,
    index: impl Fn(usize) -> u32,
) -> Result<(GroupParams, Vec<u8>), QuantError> {
    let (lo, hi) = extent(values)?;
    Ok(quantize_range(values, lo, hi, bits, rounder, &index))
}

/// The ratios of the partition's range that [`quantize_group_clipped`] tries, widest first (the
/// quantize kernel writes the same literals).
pub const CLIP_RATIOS: [f32; 6] = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5];

/// [`quantize_group`] over the range that reconstructs `values` best: the partition's range
/// shrunk about its midpoint by each of [`CLIP_RATIOS`], keeping the one with the least squared
/// error (the widest on ties). Values outside the range clamp to the end levels; at 2 bits the
/// four levels then sit where most values are rather than where the extremes are.
pub fn quantize_group_clipped(
    values: &[f32],
    bits: u8,
    rounder: &Rounder,
    index: impl Fn(usize) -> u32,
) -> Result<(GroupParams, Vec<u8>), QuantError> {
    let (lo, hi) = extent(values)?;
    let (mid, half) = (0.5 * (lo + hi), 0.5 * (hi - lo));
    let mut best: Option<(f32, (GroupParams, Vec<u8>))> = None;
    for ratio in CLIP_RATIOS {
        let quantized = quantize_range(values, mid - ratio * half, mid + ratio * half, bits, rounder, &index);
        let (m, s) = (quantized.0.min.to_f32(), quantized.0.scale.to_f32());
        let error: f32 = values.iter().zip(&quantized.1).map(|(&x, &c)| (s * c as f32 + m - x).powi(2)).sum();
        if best.as_ref().is_none_or(|(e, _)| error < *e) {
            best = Some((error, quantized));
        }
    }
    Ok(best.expect("CLIP_RATIOS is not empty").1)
}

/// The partition's (min, max), or why fp16 metadata cannot hold it.
fn extent(values: &[f32]) -> Result<(f32, f32), QuantError> {
    debug_assert!(!values.is_empty());
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &x in values {
        if !x.is_finite() || x.abs() > f16::MAX.to_f32() {
            return Err(QuantError::OutOfRange(x));
        }
        lo = lo.min(x);
        hi = hi.max(x);
    }
    Ok((lo, hi))
}

/// Codes of `values` on the levels of `[lo, hi]` (min and scale rounded to fp16 first).
fn quantize_range(
    values: &[f32],
    lo: f32,
    hi: f32,
    bits: u8,
    rounder: &Rounder,
    index: &impl Fn(usize) -> u32,
) -> (GroupParams, Vec<u8>) {
    debug_assert!((1..=8).contains(&bits));
    let levels = ((1u32 << bits) - 1) as f32;
    let min = f16::from_f32(lo);
    let raw_scale = f16::from_f32((hi - min.to_f32()) / levels);
    let scale = if raw_scale.to_f32() > 0.0 && raw_scale.is_finite() { raw_scale } else { f16::ONE };
    let (m, s) = (min.to_f32(), scale.to_f32());
    let codes = values
        .iter()
        .enumerate()
        .map(|(i, &x)| ((x - m) / s + rounder.offset(index(i))).floor().clamp(0.0, levels) as u8)
        .collect();
    (GroupParams { min, scale }, codes)
}

/// `scale * code + min` for every code.
pub fn dequantize_group(params: GroupParams, codes: &[u8]) -> Vec<f32> {
    let (m, s) = (params.min.to_f32(), params.scale.to_f32());
    codes.iter().map(|&c| s * c as f32 + m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, Rng, SeedableRng};

    fn random(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| (rng.random::<f32>() - 0.3) * spread).collect()
    }

    fn check_bound(bits: u8, rounding: Rounding, slack_levels: f32) {
        let rounder = Rounder::new(rounding, 0);
        for (seed, n) in [(1, 1), (2, 7), (3, 32), (4, 64), (5, 129)] {
            let values = random(n, seed, 6.0);
            let (params, codes) = quantize_group(&values, bits, &rounder, |i| (seed * 1000) as u32 + i as u32).unwrap();
            assert!(codes.iter().all(|&c| (c as u32) < (1 << bits)));
            let back = dequantize_group(params, &codes);
            let extent = values.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let bound = slack_levels * params.scale.to_f32() + extent / 1024.0;
            for (x, y) in values.iter().zip(&back) {
                assert!((x - y).abs() <= bound, "bits {bits} {rounding:?}: {x} -> {y}, bound {bound}");
            }
        }
    }

    #[test]
    fn reconstruction_error_within_bound() {
        for bits in [2, 4, 8] {
            check_bound(bits, Rounding::Nearest, 0.5);
            check_bound(bits, Rounding::Stochastic { seed: 11 }, 1.0);
        }
    }

    #[test]
    fn degenerate_partition_reproduces_the_value() {
        let (params, codes) = quantize_group(&[1.5; 16], 2, &Rounder::Nearest, |i| i as u32).unwrap();
        assert!(codes.iter().all(|&c| c == 0));
        assert_eq!(dequantize_group(params, &codes), vec![1.5; 16]);
    }

    #[test]
    fn stochastic_rounding_is_unbiased_and_seeded() {
        // 0.3 of the way between levels 1 and 2 of a 2-bit partition spanning [0, 3].
        let values = [0.0, 3.0, 1.3];
        let rounder = Rounder::new(Rounding::Stochastic { seed: 5 }, 0);
        let trials = 20_000u32;
        let ups = (0..trials)
            .filter(|&trial| quantize_group(&values, 2, &rounder, |i| trial * 3 + i as u32).unwrap().1[2] == 2)
            .count();
        let p = ups as f64 / trials as f64;
        // Binomial standard deviation sqrt(0.3 * 0.7 / 20000) = 0.0032: 5 sigma.
        assert!((p - 0.3).abs() < 0.017, "P(up) = {p}");
        let run = |seed, tensor| {
            let r = Rounder::new(Rounding::Stochastic { seed }, tensor);
            quantize_group(&random(64, 9, 2.0), 2, &r, |i| i as u32).unwrap().1
        };
        assert_eq!(run(1, 0), run(1, 0));
        assert_ne!(run(1, 0), run(2, 0));
        assert_ne!(run(1, 0), run(1, 1));
    }

    #[test]
    fn exact_levels_never_move() {
        let values = [0.0, 1.0, 2.0, 3.0];
        let rounder = Rounder::new(Rounding::Stochastic { seed: 3 }, 0);
        for trial in 0..100u32 {
            assert_eq!(quantize_group(&values, 2, &rounder, |i| trial * 4 + i as u32).unwrap().1, vec![0, 1, 2, 3]);
        }
    }

    #[test]
    fn out_of_range_values_are_rejected() {
        assert!(
            matches!(quantize_group(&[1.0, f32::NAN], 2, &Rounder::Nearest, |i| i as u32), Err(QuantError::OutOfRange(x)) if x.is_nan())
        );
        assert!(matches!(quantize_group(&[1e6], 2, &Rounder::Nearest, |i| i as u32), Err(QuantError::OutOfRange(_))));
        assert!(matches!(
            quantize_group(&[f32::INFINITY], 4, &Rounder::Nearest, |i| i as u32),
            Err(QuantError::OutOfRange(_))
        ));
    }
}
