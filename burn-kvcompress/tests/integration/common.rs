//! Helpers shared by the integration tests: reference files, model paths, comparisons.
#![allow(dead_code, missing_docs)]

use std::path::PathBuf;

use burn::tensor::{backend::Backend, Tensor};
use burn_kvcompress::paths::default_model_path;
use serde_json::Value;

pub type Cpu = burn_kvcompress::backend::NdArray;

/// The workspace root: the tests read the repository's `fixtures/` and `data/` only.
pub fn workspace_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A peer's reference output under the workspace's `fixtures/`, parsed.
pub fn fixture_json(relative: &str) -> Value {
    let path = workspace_dir().join("fixtures").join(relative);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).expect("reference JSON")
}

pub fn hf_tiny_dir(name: &str) -> PathBuf {
    workspace_dir().join("fixtures/hf-tiny").join(name)
}

/// The real model (`$KVC_MODEL` or the model cache); fails (never skips) when it has not been
/// fetched.
pub fn model_path() -> PathBuf {
    let path = default_model_path();
    assert!(
        path.is_file(),
        "model file {} not found: run `cargo xtask fetch-model` (or set KVC_MODEL to the GGUF file)",
        path.display()
    );
    path
}

/// A file under this crate's `tests/fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// Decodes a hex string.
pub fn from_hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd-length hex string");
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("invalid hex")).collect()
}

pub fn u32s(v: &Value) -> Vec<u32> {
    v.as_array().expect("array").iter().map(|x| x.as_u64().expect("integer") as u32).collect()
}

pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().expect("array").iter().map(|x| x.as_f64().expect("number") as f32).collect()
}

pub fn to_vec<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().expect("f32 data")
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Token ids sorted by descending logit (stable on ties), first `k`.
pub fn top_k(logits: &[f32], k: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    ids.truncate(k);
    ids
}

/// The kernels' backend: CUDA when built with the `cuda` feature (on a GPU machine, where
/// `cli/bench/validate_bounds.sh` runs the kernel tests), wgpu otherwise (lavapipe in CI).
#[cfg(feature = "cuda")]
pub type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type Gpu = burn::backend::Wgpu<f32, i32>;

/// Deterministic values in [-1, 1) (a linear congruential generator: no `rand` needed).
pub fn lcg_uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}
