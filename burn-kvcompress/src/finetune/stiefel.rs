//! [`OrthogonalAdam`]: Adam steps that keep a square matrix orthogonal (a Riemannian Adam on
//! the orthogonal group with a QR retraction).

/// Adam on one `d × d` orthogonal matrix.
///
/// A step projects the Euclidean gradient `G` onto the tangent space at `R`
/// (`ξ = G − R sym(Rᵀ G)`, i.e. `R Ω` with `Ω` skew), keeps a first moment of those tangent
/// vectors and one scalar second moment (the mean of `ξ²`: one scale per matrix leaves the step's
/// direction tangent), moves `R − lr · m̂ / (√v̂ + ε)` and maps the result back onto orthogonal
/// matrices with a QR retraction (Gram–Schmidt on the columns in order, each orthogonalized
/// twice). The first moment is then projected onto the new tangent space (vector transport by
/// projection). Arithmetic is in f64; the basis is stored in f32, orthogonal to about 1e-6.
#[derive(Debug, Clone, PartialEq)]
pub struct OrthogonalAdam {
    dim: usize,
    first: Vec<f64>,
    second: f64,
    steps: i32,
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPSILON: f64 = 1e-12;

impl OrthogonalAdam {
    /// State for a `dim × dim` matrix.
    pub fn new(dim: usize) -> Self {
        Self { dim, first: vec![0.0; dim * dim], second: 0.0, steps: 0 }
    }

    /// One step of `basis` (row-major, orthogonal) along the Euclidean gradient `grad`.
    ///
    /// # Panics
    /// If `basis` or `grad` is not `dim²` long.
    pub fn step(&mut self, basis: &mut [f32], grad: &[f32], learning_rate: f64) {
        let d = self.dim;
        assert!(basis.len() == d * d && grad.len() == d * d, "OrthogonalAdam: expected {d}x{d}");
        let r: Vec<f64> = basis.iter().map(|&x| f64::from(x)).collect();
        let g: Vec<f64> = grad.iter().map(|&x| f64::from(x)).collect();
        let xi = tangent(&r, &g, d);
        self.steps += 1;
        let mean_square = xi.iter().map(|x| x * x).sum::<f64>() / (d * d) as f64;
        self.second = BETA2 * self.second + (1.0 - BETA2) * mean_square;
        for (m, x) in self.first.iter_mut().zip(&xi) {
            *m = BETA1 * *m + (1.0 - BETA1) * x;
        }
        let scale = learning_rate
            / (1.0 - BETA1.powi(self.steps))
            / ((self.second / (1.0 - BETA2.powi(self.steps))).sqrt() + EPSILON);
        let moved: Vec<f64> = r.iter().zip(&self.first).map(|(r, m)| r - scale * m).collect();
        let retracted = orthonormalize_columns(moved, d);
        self.first = tangent(&retracted, &self.first, d);
        for (b, x) in basis.iter_mut().zip(&retracted) {
            *b = *x as f32;
        }
    }
}

/// `G − R sym(Rᵀ G) = (G − R Gᵀ R) / 2` for orthogonal `R` (row-major `d × d`).
fn tangent(r: &[f64], g: &[f64], d: usize) -> Vec<f64> {
    // Gᵀ R, then R (Gᵀ R).
    let mut gt_r = vec![0.0; d * d];
    for i in 0..d {
        for k in 0..d {
            let gki = g[k * d + i];
            for j in 0..d {
                gt_r[i * d + j] += gki * r[k * d + j];
            }
        }
    }
    let mut out = g.to_vec();
    for i in 0..d {
        for k in 0..d {
            let rik = r[i * d + k];
            for j in 0..d {
                out[i * d + j] -= rik * gt_r[k * d + j];
            }
        }
    }
    out.iter_mut().for_each(|x| *x *= 0.5);
    out
}

/// The Q of a QR decomposition with a positive diagonal of R: Gram–Schmidt on the columns of
/// the row-major `d × d` matrix `a`, in order, each orthogonalized twice against the previous.
fn orthonormalize_columns(mut a: Vec<f64>, d: usize) -> Vec<f64> {
    for j in 0..d {
        for _ in 0..2 {
            for p in 0..j {
                let dot: f64 = (0..d).map(|i| a[i * d + p] * a[i * d + j]).sum();
                for i in 0..d {
                    a[i * d + j] -= dot * a[i * d + p];
                }
            }
        }
        let norm = (0..d).map(|i| a[i * d + j] * a[i * d + j]).sum::<f64>().sqrt();
        for i in 0..d {
            a[i * d + j] /= norm;
        }
    }
    a
}

/// `max |Rᵀ R − I|` of a row-major `d × d` matrix.
pub fn orthogonality_error(basis: &[f32], d: usize) -> f64 {
    let mut worst = 0.0f64;
    for p in 0..d {
        for q in 0..d {
            let dot: f64 = (0..d).map(|i| f64::from(basis[i * d + p]) * f64::from(basis[i * d + q])).sum();
            worst = worst.max((dot - if p == q { 1.0 } else { 0.0 }).abs());
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            })
            .collect()
    }

    #[test]
    fn retraction_is_orthogonal_and_keeps_the_leading_span() {
        let d = 7;
        let q = orthonormalize_columns(values(d * d, 3), d);
        let q32: Vec<f32> = q.iter().map(|&x| x as f32).collect();
        assert!(orthogonality_error(&q32, d) < 1e-6);
        // Already orthonormal columns come back unchanged.
        let again = orthonormalize_columns(q.clone(), d);
        assert!(q.iter().zip(&again).all(|(a, b)| (a - b).abs() < 1e-12));
    }

    #[test]
    fn steps_stay_orthogonal_and_descend_a_trace_objective() {
        // Maximize tr(Rᵀ A) over orthogonal R (minimize −tr(Rᵀ A), gradient −A): the optimum is the
        // polar factor of A, which no step may leave the orthogonal group to reach.
        let d = 6;
        let a = values(d * d, 9);
        let objective = |r: &[f32]| -> f64 { r.iter().zip(&a).map(|(&r, a)| f64::from(r) * a).sum() };
        let mut r: Vec<f32> = (0..d * d).map(|i| if i % (d + 1) == 0 { 1.0 } else { 0.0 }).collect();
        let start = objective(&r);
        let grad: Vec<f32> = a.iter().map(|&x| -x as f32).collect();
        let mut adam = OrthogonalAdam::new(d);
        for _ in 0..300 {
            adam.step(&mut r, &grad, 0.02);
            assert!(orthogonality_error(&r, d) < 1e-5);
        }
        assert!(objective(&r) > start + 0.5, "{start} -> {}", objective(&r));
    }
}
