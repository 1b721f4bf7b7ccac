//! Oracle (spec §11): the homomorphic product equals the matmul of the dequantized operands, up
//! to f32 rounding of its four correction terms.

use burn_hack_attn::{
    homomorphic::homomorphic_matmul,
    quant::{PartitionedMatrix, Rounder},
    Rounding,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

type Cpu = burn::backend::NdArray<f32>;

fn random(n: usize, rng: &mut StdRng, offset: f32) -> Vec<f32> {
    (0..n).map(|_| offset + (rng.random::<f32>() - 0.5) * 4.0).collect()
}

/// Sum over partitions of the absolute values of the four terms: each is rounded once or twice in
/// f32 and the partial results are added, so `8 * eps * magnitude` bounds the f32 error.
fn magnitude(a: &PartitionedMatrix, b: &PartitionedMatrix, i: usize, j: usize) -> f64 {
    (0..a.parts())
        .map(|p| {
            let (pa, pb) = (a.params(i, p), b.params(j, p));
            let (sa, ma, sb, mb) = (pa.scale.to_f64(), pa.min.to_f64(), pb.scale.to_f64(), pb.min.to_f64());
            let dot: f64 = a.codes(i, p).iter().zip(b.codes(j, p)).map(|(&x, y)| x as f64 * y as f64).sum();
            (sa * sb * dot).abs()
                + (sa * a.sum(i, p) as f64 * mb).abs()
                + (ma * sb * b.sum(j, p) as f64).abs()
                + (a.part_len(p) as f64 * ma * mb).abs()
        })
        .sum()
}

#[test]
fn homomorphic_product_equals_dequantized_matmul() {
    let mut rng = StdRng::seed_from_u64(2026);
    let (m, n) = (3, 5);
    for pi in [16, 32, 64, 128] {
        for z in [1, 17, 64, 129, 200] {
            for (b_bits, rounding) in [(2, Rounding::Stochastic { seed: pi as u64 }), (4, Rounding::Nearest)] {
                let a =
                    PartitionedMatrix::quantize(&random(m * z, &mut rng, 0.7), m, z, pi, 8, &Rounder::Nearest).unwrap();
                let rounder = Rounder::new(rounding, 0);
                let b =
                    PartitionedMatrix::quantize(&random(n * z, &mut rng, -0.4), n, z, pi, b_bits, &rounder).unwrap();
                let got: Vec<f32> =
                    homomorphic_matmul::<Cpu>(&a, &b, &Default::default()).into_data().into_vec().unwrap();
                let (da, db) = (a.dequantized(), b.dequantized());
                for i in 0..m {
                    for j in 0..n {
                        let expected: f64 = (0..z).map(|k| da[i * z + k] as f64 * db[j * z + k] as f64).sum();
                        let bound = 8.0 * f32::EPSILON as f64 * magnitude(&a, &b, i, j);
                        let diff = (got[i * n + j] as f64 - expected).abs();
                        assert!(diff <= bound, "Π={pi} Z={z} bits={b_bits} ({i},{j}): {diff} > {bound}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_bound_is_tight_enough_to_catch_a_wrong_term() {
    // Dropping the constant term |Z_p| m_a m_b must break the oracle by far more than the bound.
    let mut rng = StdRng::seed_from_u64(7);
    let (m, n, z, pi) = (2, 2, 64, 32);
    let a = PartitionedMatrix::quantize(&random(m * z, &mut rng, 1.0), m, z, pi, 8, &Rounder::Nearest).unwrap();
    let b = PartitionedMatrix::quantize(&random(n * z, &mut rng, 1.0), n, z, pi, 2, &Rounder::Nearest).unwrap();
    let got: Vec<f32> = homomorphic_matmul::<Cpu>(&a, &b, &Default::default()).into_data().into_vec().unwrap();
    let constant: f64 =
        (0..a.parts()).map(|p| a.part_len(p) as f64 * a.params(0, p).min.to_f64() * b.params(0, p).min.to_f64()).sum();
    let bound = 8.0 * f32::EPSILON as f64 * magnitude(&a, &b, 0, 0);
    assert!(constant.abs() > 100.0 * bound, "the test data must make the constant term visible");
    let (da, db) = (a.dequantized(), b.dequantized());
    let expected: f64 = (0..z).map(|k| da[k] as f64 * db[k] as f64).sum();
    assert!((got[0] as f64 - expected).abs() <= bound);
    assert!((got[0] as f64 - constant - expected).abs() > bound);
}
