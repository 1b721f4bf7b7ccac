//! What the kernel test modules (`attention_gpu`, `quantize_gpu`) share: the backends they run
//! on and their seeded inputs.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use rand::{rngs::StdRng, Rng, SeedableRng};

/// The kernels' backend: CUDA when built with the `cuda` feature (on a GPU machine, where
/// `cli/bench/validate_bounds.sh` runs the GPU tests), wgpu otherwise (lavapipe in CI).
#[cfg(feature = "cuda")]
pub type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(not(feature = "cuda"))]
pub type Gpu = burn::backend::Wgpu<f32, i32>;
pub type Cpu = burn::backend::NdArray<f32>;

/// Seeded N(0, 1) · `spread` values.
pub fn normal(n: usize, seed: u64, spread: f32) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (u, v): (f32, f32) = (rng.random::<f32>().max(1e-7), rng.random());
            spread * (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
        })
        .collect()
}
