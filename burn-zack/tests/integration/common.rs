//! Helpers shared by the ZACK tests: the tiny Llama, seeded data, rotations calibrated on it.
#![allow(dead_code, missing_docs)]

use burn::tensor::{backend::Backend, Tensor, TensorData};
use burn_kvcompress::{
    cache::{KvCache, LayerRecording, RecordedTensor, RecordingScheme},
    fingerprint::ModelFingerprint,
    loading::load_hf_model,
    model::{CausalLm, Logits},
};
use burn_zack::rotation::{calibrate_rotations, GramAccumulator, RotationConfig, RotationGeometry, Rotations};
use rand::{rngs::StdRng, Rng, SeedableRng};

pub type Cpu = burn_kvcompress::backend::NdArray;

/// The kernels' backend: CUDA when built with the `cuda` feature (on a GPU machine, where
/// `cli/bench/validate_bounds.sh` runs the GPU tests), wgpu otherwise (lavapipe in CI).
#[cfg(feature = "cuda")]
pub type Gpu = burn::backend::Cuda<f32, i32>;
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type Gpu = burn::backend::Wgpu<f32, i32>;

/// The tiny random Llama checkpoint of the workspace's fixtures (transformers' reference model).
pub const TINY_LLAMA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/hf-tiny/tiny-llama");

/// The tiny Llama of the fixtures (3 layers, 4 query / 2 KV heads, head_dim 16).
pub fn tiny_llama() -> CausalLm<Cpu> {
    load_hf_model::<Cpu>(TINY_LLAMA_DIR.as_ref(), &Default::default()).expect("tiny llama").model
}

/// Seeded values uniform in [-1, 1).
pub fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
}

/// Seeded token rows.
pub fn token_rows(rows: usize, len: usize, vocab: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rows).map(|_| (0..len).map(|_| rng.random_range(0..vocab as u32)).collect()).collect()
}

pub fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> Tensor<Cpu, D> {
    Tensor::from_data(TensorData::new(values, shape), &Default::default())
}

pub fn host<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().into_vec().unwrap()
}

/// Rotations of `model` calibrated on seeded random tokens.
pub fn calibrated(model: &CausalLm<Cpu>, config: RotationConfig) -> Rotations {
    let scheme = RecordingScheme { record_queries: true, ..Default::default() };
    let rows = token_rows(3, 40, model.config().vocab_size, 7);
    let mut caches = model.new_cache(&scheme, rows.len(), &Default::default());
    model.forward(&rows, &mut caches, Logits::Last).unwrap();
    let mut grams = GramAccumulator::new(RotationGeometry::of_model(model.config()));
    grams.add(&scheme.recorder.take()).unwrap();
    calibrate_rotations(&grams, model, config, ModelFingerprint::of_bytes(b"tiny"), "random tokens".into()).unwrap()
}

/// A recorded tensor of seeded values whose coordinates have decaying scales (a spectrum that
/// truncation can work with).
pub fn recorded(shape: [usize; 4], seed: u64) -> RecordedTensor {
    let d = shape[3];
    let values = uniform(shape.iter().product(), seed)
        .into_iter()
        .enumerate()
        .map(|(i, x)| x * 0.8f32.powi((i % d) as i32) + 0.05 * ((i / d) % 3) as f32)
        .collect();
    RecordedTensor { shape, values }
}

/// Synthetic recordings of one prefill of `tokens` tokens for `geometry`.
pub fn synthetic_recordings(geometry: RotationGeometry, tokens: usize, seed: u64) -> Vec<LayerRecording> {
    let (h, kv, d) = (geometry.heads, geometry.kv_heads, geometry.head_dim);
    (0..geometry.layers as u64)
        .map(|l| LayerRecording {
            queries: vec![recorded([1, h, tokens, d], seed + 3 * l)],
            keys: vec![recorded([1, kv, tokens, d], seed + 3 * l + 1)],
            values: vec![recorded([1, kv, tokens, d], seed + 3 * l + 2)],
            outputs: vec![recorded([1, h, tokens, d], seed + 3 * l + 1000)],
        })
        .collect()
}

/// Appends the same seeded keys and values (`[2, 2, len, head_dim]`, batch 2 and 2 KV heads,
/// values scaled by 2) to both caches, in two calls: the first 2/3 of the slots, then the rest.
pub fn fill_both(caches: (&mut impl KvCache<Cpu>, &mut impl KvCache<Cpu>), len: usize, head_dim: usize, seed: u64) {
    let first = len * 2 / 3;
    let k = tensor(uniform(2 * 2 * len * head_dim, seed), [2, 2, len, head_dim]);
    let v = tensor(uniform(2 * 2 * len * head_dim, seed + 1), [2, 2, len, head_dim]) * 2.0;
    for (start, n) in [(0, first), (first, len - first)] {
        let (k, v) = (k.clone().narrow(2, start, n), v.clone().narrow(2, start, n));
        caches.0.append(k.clone(), v.clone()).unwrap();
        caches.1.append(k, v).unwrap();
    }
}
