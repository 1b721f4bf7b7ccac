//! Shared helpers: random codebooks and K/V, the host-side decoding the tests compare against, and
//! the GPU backend the kernel tests run on.

#![allow(dead_code)]

pub mod case;

use std::sync::Arc;

use burn_kvcompress::fingerprint::ModelFingerprint;
use burn_million_pq::{
    cache::PqScheme,
    codebook::{nearest_centroid, CodebookGeometry, Codebooks},
    CodebookScope, PqConfig,
};
use rand::{rngs::StdRng, Rng, SeedableRng};

/// The kernels' backend: CUDA when built with the `cuda` feature (on a GPU machine, where
/// `cli/bench/validate_bounds.sh` runs the GPU tests), wgpu otherwise (lavapipe in CI).
#[cfg(feature = "cuda")]
pub type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type Gpu = burn::backend::Wgpu<f32, i32>;

/// Normal-ish values (sum of uniforms) from a seed.
pub fn random_values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| (0..4).map(|_| rng.random_range(-1.0f32..1.0)).sum::<f32>() * 0.87).collect()
}

/// Random codebooks for one layer... or `layers`.
pub fn random_books(config: PqConfig, layers: usize, kv_heads: usize, head_dim: usize, seed: u64) -> Codebooks {
    let geometry = CodebookGeometry { layers, kv_heads, head_dim };
    let mut books = Codebooks {
        config,
        geometry,
        model: ModelFingerprint::of_bytes(b"test model"),
        calibration: "random".into(),
        keys: Vec::new(),
        values: Vec::new(),
    };
    let len: usize = books.shape().iter().product();
    books.keys = (0..layers).map(|l| random_values(len, seed + 2 * l as u64)).collect();
    books.values = (0..layers).map(|l| random_values(len, seed + 2 * l as u64 + 1)).collect();
    books
}

/// A scheme over random codebooks.
pub fn scheme(config: PqConfig, kv_heads: usize, head_dim: usize, window: usize, seed: u64) -> PqScheme {
    PqScheme::new(Arc::new(random_books(config, 1, kv_heads, head_dim, seed)), window)
}

/// Each vector of `x` (`[batch, kv_heads, n, head_dim]` row-major) replaced by its PQ
/// reconstruction with layer 0's codebook of `kind` (0 keys, 1 values), computed directly on the
/// host with the nearest-centroid rule.
pub fn reconstruct_host(x: &[f32], shape: [usize; 4], books: &Codebooks, kind: usize) -> Vec<f32> {
    let [_, kv_heads, n, d] = shape;
    let config = books.config;
    let (m, ds, k) = (config.subspaces, config.sub_dim(d), config.centroids());
    let book = if kind == 0 { &books.keys[0] } else { &books.values[0] };
    let mut out = Vec::with_capacity(x.len());
    for (row, vector) in x.chunks_exact(d).enumerate() {
        let head = (row / n) % kv_heads;
        let group = if config.scope == CodebookScope::Layer { 0 } else { head };
        for i in 0..m {
            let centroids = &book[(group * m + i) * k * ds..(group * m + i + 1) * k * ds];
            let c = nearest_centroid(&vector[i * ds..(i + 1) * ds], centroids) as usize;
            out.extend_from_slice(&centroids[c * ds..(c + 1) * ds]);
        }
    }
    out
}
