//! Counter-based uniform numbers for stochastic rounding: a hash of (stream, index), computed the
//! same way on the host and in the CubeCL kernels (wrapping 32-bit integer arithmetic only).

/// A 32-bit integer hash with good avalanche (the "lowbias32" mixer of Chris Wellons).
pub const fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// A number in `[0, 1)` with 24 random bits, from stream `stream` at position `index`.
pub fn uniform(stream: u32, index: u32) -> f32 {
    (mix32(mix32(index) ^ stream) >> 8) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_numbers_are_in_range_and_balanced() {
        let n = 100_000u32;
        let values: Vec<f32> = (0..n).map(|i| uniform(0xdead_beef, i)).collect();
        assert!(values.iter().all(|&u| (0.0..1.0).contains(&u)));
        let mean = values.iter().map(|&u| u as f64).sum::<f64>() / n as f64;
        // Standard deviation of the mean: sqrt(1/12 / n) = 9.1e-4; 5 sigma.
        assert!((mean - 0.5).abs() < 4.6e-3, "mean {mean}");
        let below_tenth = values.iter().filter(|&&u| u < 0.1).count() as f64 / n as f64;
        assert!((below_tenth - 0.1).abs() < 5.0 * (0.09f64 / n as f64).sqrt(), "{below_tenth}");
    }
}
