//! The model on wgpu (lavapipe on the CPU in CI) matches the ndarray reference.

use crate::common::*;
use burn_kvcompress::{
    cache::DenseScheme,
    loading::{load_gguf_model, load_hf_model},
    model::Logits,
};

type Wgpu = burn::backend::Wgpu<f32, i32>;

/// Tiny model, logits O(1): f32 on both sides, only summation order differs.
const TINY_TOLERANCE: f32 = 1e-4;
/// SmolLM2, 30 layers, logits up to ~30: f32 on both sides, only summation order differs, which
/// accumulates through the depth (measured 4.8e-5 on lavapipe); 1e-3 leaves 20x headroom and still
/// catches any real difference in the math, which shows up at O(0.1) and above.
const SMOLLM2_TOLERANCE: f32 = 1e-3;

#[test]
fn tiny_models_on_wgpu_match_ndarray() {
    for name in ["tiny-llama", "tiny-mistral-swa"] {
        let ids = u32s(&fixture_json(&format!("hf-tiny/{name}/reference.json"))["input_ids"][0]);
        let cpu = load_hf_model::<Cpu>(&hf_tiny_dir(name), &Default::default()).unwrap().model;
        let gpu = load_hf_model::<Wgpu>(&hf_tiny_dir(name), &Default::default()).unwrap().model;
        let mut cpu_cache = cpu.new_cache(&DenseScheme, 1, &Default::default());
        let mut gpu_cache = gpu.new_cache(&DenseScheme, 1, &Default::default());
        let mut diff: f32 = 0.0;
        // A prefill of 30 tokens, then decode steps through the cache.
        let a = to_vec(cpu.forward(&[ids[..30].to_vec()], &mut cpu_cache, Logits::All).unwrap());
        let b = to_vec(gpu.forward(&[ids[..30].to_vec()], &mut gpu_cache, Logits::All).unwrap());
        diff = diff.max(max_abs_diff(&a, &b));
        for &t in &ids[30..40] {
            let a = to_vec(cpu.forward(&[vec![t]], &mut cpu_cache, Logits::Last).unwrap());
            let b = to_vec(gpu.forward(&[vec![t]], &mut gpu_cache, Logits::Last).unwrap());
            diff = diff.max(max_abs_diff(&a, &b));
        }
        println!("{name}: wgpu vs ndarray max abs diff {diff:e}");
        assert!(diff < TINY_TOLERANCE, "{name}: {diff}");
    }
}

#[test]
fn smollm2_on_wgpu_matches_ndarray() {
    let prompt = u32s(&fixture_json("llamacpp-smollm2.json")["prompts"][0]["tokens"]);
    let cpu = load_gguf_model::<Cpu>(&model_path(), &Default::default()).unwrap().model;
    let mut cache = cpu.new_cache(&DenseScheme, 1, &Default::default());
    let expected = to_vec(cpu.forward(std::slice::from_ref(&prompt), &mut cache, Logits::Last).unwrap());
    drop(cpu);
    let gpu = load_gguf_model::<Wgpu>(&model_path(), &Default::default()).unwrap().model;
    let mut cache = gpu.new_cache(&DenseScheme, 1, &Default::default());
    let got = to_vec(gpu.forward(&[prompt], &mut cache, Logits::Last).unwrap());
    let diff = max_abs_diff(&got, &expected);
    println!("SmolLM2 last logits: wgpu vs ndarray max abs diff {diff:e}");
    assert!(diff < SMOLLM2_TOLERANCE, "{diff}");
}
