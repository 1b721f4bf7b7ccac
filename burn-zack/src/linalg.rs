//! Symmetric eigendecomposition (cyclic Jacobi, f64), the one piece of dense linear algebra the
//! rotations need: the right singular vectors of a stacked sample matrix `M` are the eigenvectors
//! of its Gram matrix `MᵀM`, and its singular values the square roots of the eigenvalues. Head
//! dimensions are small (64–256), so Jacobi's O(n³) sweeps cost milliseconds.

/// Eigenvalues (descending) and eigenvectors of a symmetric matrix.
#[derive(Debug, Clone, PartialEq)]
pub struct SymmetricEigen {
    /// `n` eigenvalues, largest first.
    pub values: Vec<f64>,
    /// `n × n`, row-major; column `j` is the unit eigenvector of `values[j]`.
    pub vectors: Vec<f64>,
}

/// Sweeps after which Jacobi stops even if off-diagonal mass remains (it converges
/// quadratically; 64×64 Gram matrices need about 8).
const MAX_SWEEPS: usize = 60;

/// Eigendecomposition of the symmetric `n × n` row-major matrix `a` (only its upper triangle is
/// read). Eigenvectors are orthonormal to f64 rounding; each column's sign is
/// fixed so that its largest-magnitude entry is positive, which makes the result reproducible.
pub fn symmetric_eigen(a: &[f64], n: usize) -> SymmetricEigen {
    assert_eq!(a.len(), n * n, "symmetric_eigen: {} values for a {n}x{n} matrix", a.len());
    let mut m = vec![0.0; n * n];
    for i in 0..n {
        for j in i..n {
            m[i * n + j] = a[i * n + j];
            m[j * n + i] = a[i * n + j];
        }
    }
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let total: f64 = m.iter().map(|x| x * x).sum();
    for _ in 0..MAX_SWEEPS {
        let off: f64 =
            (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))).map(|(i, j)| 2.0 * m[i * n + j].powi(2)).sum();
        if off <= total * 1e-30 || off == 0.0 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                rotate(&mut m, &mut v, n, p, q);
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&x, &y| m[y * n + y].total_cmp(&m[x * n + x]));
    let values = order.iter().map(|&j| m[j * n + j]).collect();
    let mut vectors = vec![0.0; n * n];
    for (col, &j) in order.iter().enumerate() {
        let largest = (0..n).map(|i| v[i * n + j]).fold(0.0f64, |acc, x| if x.abs() > acc.abs() { x } else { acc });
        let sign = if largest < 0.0 { -1.0 } else { 1.0 };
        for i in 0..n {
            vectors[i * n + col] = sign * v[i * n + j];
        }
    }
    SymmetricEigen { values, vectors }
}

/// One Jacobi rotation zeroing `m[p][q]`, applied to `m` (both sides) and accumulated into `v`.
fn rotate(m: &mut [f64], v: &mut [f64], n: usize, p: usize, q: usize) {
    let apq = m[p * n + q];
    if apq == 0.0 {
        return;
    }
    let (app, aqq) = (m[p * n + p], m[q * n + q]);
    let theta = (aqq - app) / (2.0 * apq);
    let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
    let t = if theta == 0.0 { 1.0 } else { t };
    let c = 1.0 / (t * t + 1.0).sqrt();
    let s = t * c;
    for k in 0..n {
        let (mkp, mkq) = (m[k * n + p], m[k * n + q]);
        m[k * n + p] = c * mkp - s * mkq;
        m[k * n + q] = s * mkp + c * mkq;
    }
    for k in 0..n {
        let (mpk, mqk) = (m[p * n + k], m[q * n + k]);
        m[p * n + k] = c * mpk - s * mqk;
        m[q * n + k] = s * mpk + c * mqk;
    }
    for k in 0..n {
        let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
        v[k * n + p] = c * vkp - s * vkq;
        v[k * n + q] = s * vkp + c * vkq;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_symmetric(n: usize, seed: u64) -> Vec<f64> {
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 11) as f64 / (1u64 << 53) as f64) - 0.5
        };
        let x: Vec<f64> = (0..n * (n + 3)).map(|_| next()).collect();
        // XᵀX: symmetric positive semi-definite, like a Gram matrix.
        let rows = n + 3;
        let mut a = vec![0.0; n * n];
        for r in 0..rows {
            for i in 0..n {
                for j in 0..n {
                    a[i * n + j] += x[r * n + i] * x[r * n + j];
                }
            }
        }
        a
    }

    #[test]
    fn reconstructs_the_matrix_with_orthonormal_vectors_in_descending_order() {
        for n in [1, 2, 5, 16, 64] {
            let a = random_symmetric(n, n as u64);
            let SymmetricEigen { values, vectors } = symmetric_eigen(&a, n);
            assert!(values.windows(2).all(|w| w[0] >= w[1]), "n={n}: {values:?}");
            let scale = a.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            for i in 0..n {
                for j in 0..n {
                    let dot: f64 = (0..n).map(|k| vectors[k * n + i] * vectors[k * n + j]).sum();
                    let expected = if i == j { 1.0 } else { 0.0 };
                    assert!((dot - expected).abs() < 1e-12, "n={n}: VᵀV[{i}][{j}] = {dot}");
                    let rebuilt: f64 = (0..n).map(|k| vectors[i * n + k] * values[k] * vectors[j * n + k]).sum();
                    assert!((rebuilt - a[i * n + j]).abs() < 1e-12 * scale.max(1.0), "n={n}: A[{i}][{j}]");
                }
            }
        }
    }

    #[test]
    fn diagonal_and_degenerate_matrices() {
        let a = [3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 5.0];
        let e = symmetric_eigen(&a, 3);
        assert_eq!(e.values, vec![5.0, 3.0, 0.0]);
        assert_eq!(&e.vectors, &[0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        let zero = symmetric_eigen(&[0.0; 4], 2);
        assert_eq!(zero.values, vec![0.0, 0.0]);
    }
}
