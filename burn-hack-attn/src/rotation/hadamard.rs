//! Randomized Walsh–Hadamard rotations: `R = diag(s) H / √d` with Sylvester's `H` (entries ±1,
//! `H Hᵀ = d I`) and signs `s` drawn per layer, KV head and role from counter-based numbers, so a
//! seed names the same matrices on every machine.

use super::RotationRole;
use crate::quant::{mix32, uniform};

/// Whether `d` is a power of two (Sylvester's construction needs one).
pub fn is_power_of_two(d: usize) -> bool {
    d.is_power_of_two()
}

/// The `d × d` rotation of `role` for KV head `head` of layer `layer`, row-major, or None when
/// `d` is not a power of two.
pub fn hadamard_rotation(d: usize, seed: u64, layer: usize, head: usize, role: RotationRole) -> Option<Vec<f32>> {
    if !is_power_of_two(d) {
        return None;
    }
    let tensor = (((layer as u32) << 16) ^ ((head as u32) << 1)) | matches!(role, RotationRole::Value) as u32;
    let stream = mix32(seed as u32 ^ mix32((seed >> 32) as u32 ^ mix32(tensor)));
    let norm = 1.0 / (d as f32).sqrt();
    let mut r = vec![0.0f32; d * d];
    for i in 0..d {
        let sign = if uniform(stream, i as u32) < 0.5 { -norm } else { norm };
        for j in 0..d {
            // Sylvester: H[i][j] = (-1)^popcount(i & j).
            let h = if (i & j).count_ones() % 2 == 0 { 1.0 } else { -1.0 };
            r[i * d + j] = sign * h;
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotations_are_orthogonal_seeded_and_distinct() {
        for d in [16, 64, 128] {
            let r = hadamard_rotation(d, 3, 2, 1, RotationRole::Key).unwrap();
            for i in 0..d {
                for j in 0..d {
                    let dot: f32 = (0..d).map(|c| r[i * d + c] * r[j * d + c]).sum();
                    let expected = if i == j { 1.0 } else { 0.0 };
                    assert!((dot - expected).abs() < 1e-5, "d {d} ({i}, {j}): {dot}");
                }
            }
            assert_eq!(r, hadamard_rotation(d, 3, 2, 1, RotationRole::Key).unwrap());
            for other in [
                hadamard_rotation(d, 4, 2, 1, RotationRole::Key),
                hadamard_rotation(d, 3, 1, 1, RotationRole::Key),
                hadamard_rotation(d, 3, 2, 0, RotationRole::Key),
                hadamard_rotation(d, 3, 2, 1, RotationRole::Value),
            ] {
                assert_ne!(r, other.unwrap());
            }
        }
        assert!(hadamard_rotation(48, 0, 0, 0, RotationRole::Key).is_none());
    }

    #[test]
    fn a_one_hot_outlier_spreads_over_every_channel() {
        // An outlier channel (all energy in channel 5) becomes |x| / √d in every channel.
        let d = 64;
        let r = hadamard_rotation(d, 0, 0, 0, RotationRole::Key).unwrap();
        let rotated: Vec<f32> = (0..d).map(|j| 8.0 * r[5 * d + j]).collect();
        assert!(rotated.iter().all(|x| (x.abs() - 1.0).abs() < 1e-6), "{rotated:?}");
    }
}
