//! A model with f16 weights (`CausalLm::with_weights_as`) on wgpu (lavapipe in CI): its logits
//! against the f32 model holding the same f16-rounded weights, the weights' type reported, logits
//! in f32, a typed refusal on a backend without f16 arithmetic, and (with the `wgpu` feature) the
//! decode steps' row-product kernel in place of the matrix product.

use crate::common::to_vec;
use burn::tensor::{backend::Backend, DType, FloatDType};
use burn_kvcompress::{
    backend::NdArray,
    cache::DenseScheme,
    error::RunError,
    loading::{build_model, RandomWeights},
    model::{CausalLm, Logits, ModelConfig},
};

type Wgpu = burn::backend::Wgpu<f32, i32>;

/// f16's unit roundoff.
const U_HALF: f32 = 1.0 / 2048.0;

/// Two layers of a GQA 4:2 Llama with 16-channel heads.
fn tiny_config() -> ModelConfig {
    ModelConfig {
        vocab_size: 300,
        hidden_size: 64,
        intermediate_size: 160,
        num_layers: 2,
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 16,
        max_position: 64,
        ..ModelConfig::llama3_8b()
    }
}

fn tiny_model<B: Backend>(device: &B::Device) -> CausalLm<B> {
    let config = tiny_config();
    build_model(config.clone(), &RandomWeights::new(config, 7), device).unwrap()
}

/// The logits of a 12-token prefill and of 3 decode steps, one row per position.
fn prefill_and_decode<B: Backend>(model: &CausalLm<B>, device: &B::Device) -> Vec<Vec<f32>> {
    let mut caches = model.new_cache(&DenseScheme, 1, device);
    let prompt: Vec<u32> = (0..12).map(|i| (i * 37 + 5) % 300).collect();
    let mut rows = Vec::new();
    let logits = model.forward(&[prompt], &mut caches, Logits::All).unwrap();
    assert_eq!(logits.dtype(), DType::F32, "logits come out in f32");
    rows.extend(to_vec(logits).chunks(300).map(<[f32]>::to_vec));
    for token in [11, 222, 33] {
        let logits = model.forward(&[vec![token]], &mut caches, Logits::Last).unwrap();
        rows.push(to_vec(logits));
    }
    rows
}

#[test]
fn f16_weights_track_f32_products_of_the_same_weights() {
    let device = Default::default();
    let half = tiny_model::<Wgpu>(&device).with_weights_as(FloatDType::F16).unwrap();
    assert_eq!(half.weights_dtype(), DType::F16);
    // The same f16 values held in f32: the two runs differ only in the activations' rounding.
    let widened = half.clone().with_weights_as(FloatDType::F32).unwrap();
    assert_eq!(widened.weights_dtype(), DType::F32);
    let (half_rows, exact_rows) = (prefill_and_decode(&half, &device), prefill_and_decode(&widened, &device));
    // Each layer rounds about eight activations to f16 (two norms' outputs, the attention
    // output, four projections' outputs, the SwiGLU product, two residual sums), each by a
    // relative `u`; with unit-gain layers two of them move a logit by at most about 16 u of the
    // row's largest (lavapipe shows about 2 u, printed below).
    let mut worst = 0.0f32;
    for (position, (half, exact)) in half_rows.iter().zip(&exact_rows).enumerate() {
        let scale = exact.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let diff = half.iter().zip(exact).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(diff <= 16.0 * U_HALF * scale, "position {position}: {diff} > 16 u · {scale}");
        worst = worst.max(diff / (U_HALF * scale));
    }
    eprintln!("worst logit difference: {worst:.1} u of the row's largest logit");
    assert!(worst > 0.0, "the f16 run rounds something");
}

#[test]
fn f32_weights_cast_to_f32_are_the_same_model() {
    let device = Default::default();
    let model = tiny_model::<Wgpu>(&device);
    let again = model.clone().with_weights_as(FloatDType::F32).unwrap();
    assert_eq!(prefill_and_decode(&model, &device), prefill_and_decode(&again, &device));
}

#[test]
fn f16_weights_on_a_backend_without_f16_are_a_clear_error() {
    let model = tiny_model::<NdArray>(&Default::default());
    match model.with_weights_as(FloatDType::F16) {
        Err(RunError::Unsupported(message)) => assert!(message.contains("F16"), "{message}"),
        other => panic!("expected Unsupported, got {:?}", other.map(|m| m.weights_dtype())),
    }
}

/// With the crate's `wgpu` feature (the kernels): `cargo xtask test` runs this file again so.
#[cfg(feature = "wgpu")]
#[test]
fn the_backend_kernels_run_the_model_like_burns_ops() {
    let device = Default::default();
    for dtype in [FloatDType::F32, FloatDType::F16] {
        let plain = tiny_model::<Wgpu>(&device).with_weights_as(dtype).unwrap();
        let kernels = plain.clone().with_ops(burn_kvcompress::model::ModelOps::of_backend::<Wgpu>());
        assert_eq!(format!("{:?}", kernels.layers[0].mlp.ops), "backend ops");
        // The norms and the rotary embedding run through the kernels in the 12-row prefill and
        // the decode steps, the weight products in the decode steps' one row: their f32 sums
        // differ in order, and in f16 the norm rounds once where Burn's ops round three times.
        let (a, b) = (prefill_and_decode(&plain, &device), prefill_and_decode(&kernels, &device));
        let budget = if dtype == FloatDType::F16 { 16.0 * U_HALF } else { 1e-4 };
        let mut worst = 0.0f32;
        for (position, (a, b)) in a.iter().zip(&b).enumerate() {
            let scale = a.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let diff = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
            assert!(diff <= budget * scale, "{dtype:?}, position {position}: {diff} > {budget} · {scale}");
            worst = worst.max(diff / scale);
        }
        eprintln!("{dtype:?}: worst logit difference {worst:e} of the row's largest logit");
    }
}
