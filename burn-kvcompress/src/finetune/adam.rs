//! [`Adam`] on parameters held on the host.

/// Adam (Kingma & Ba) over a flat host vector of parameters, with bias correction.
///
/// The parameters live on the host between steps because each step also runs host-side work
/// on them (PQ reassigns codes, ZACK retracts rotations onto orthogonal matrices); the
/// gradient comes back from the autodiff backend once per step.
#[derive(Debug, Clone, PartialEq)]
pub struct Adam {
    first: Vec<f32>,
    second: Vec<f32>,
    steps: i32,
    beta1: f32,
    beta2: f32,
    epsilon: f32,
}

impl Adam {
    /// State for `len` parameters with the usual β₁ = 0.9, β₂ = 0.999, ε = 1e-8.
    pub fn new(len: usize) -> Self {
        Self { first: vec![0.0; len], second: vec![0.0; len], steps: 0, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 }
    }

    /// One step: `params -= learning_rate · m̂ / (√v̂ + ε)`.
    ///
    /// # Panics
    /// If `params` or `grad` is not as long as the state.
    pub fn step(&mut self, params: &mut [f32], grad: &[f32], learning_rate: f32) {
        assert!(params.len() == self.first.len() && grad.len() == self.first.len(), "Adam: length mismatch");
        self.steps += 1;
        let (b1, b2) = (self.beta1, self.beta2);
        let correction1 = 1.0 - b1.powi(self.steps);
        let correction2 = 1.0 - b2.powi(self.steps);
        for (((p, &g), m), v) in params.iter_mut().zip(grad).zip(&mut self.first).zip(&mut self.second) {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
            *p -= learning_rate * (*m / correction1) / ((*v / correction2).sqrt() + self.epsilon);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimizes_a_quadratic() {
        // f(x) = Σ (x_i − i)², gradient 2 (x_i − i).
        let mut x = vec![5.0f32; 4];
        let mut adam = Adam::new(4);
        for _ in 0..2000 {
            let grad: Vec<f32> = x.iter().enumerate().map(|(i, &xi)| 2.0 * (xi - i as f32)).collect();
            adam.step(&mut x, &grad, 0.05);
        }
        for (i, xi) in x.iter().enumerate() {
            assert!((xi - i as f32).abs() < 1e-2, "x[{i}] = {xi}");
        }
    }

    #[test]
    fn first_step_moves_each_parameter_by_the_learning_rate() {
        let mut x = vec![0.0f32, 0.0];
        Adam::new(2).step(&mut x, &[3.0, -0.001], 0.1);
        assert!((x[0] + 0.1).abs() < 1e-6 && (x[1] - 0.1).abs() < 1e-4, "{x:?}");
    }
}
