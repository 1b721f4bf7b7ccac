//! Tiny random Llama and Mistral (sliding window 24) checkpoints against transformers' own
//! logits and greedy generation (`fixtures/hf-tiny`).

use crate::common::*;
use burn_kvcompress::{
    cache::DenseScheme,
    generation::{generate, GenerateOptions, SamplingConfig},
    loading::load_hf_model,
    model::Logits,
};

/// transformers computes in f32 with the same operation order up to summation order; 1e-4 is
/// the bound (logits here are O(1)).
const LOGIT_TOLERANCE: f32 = 1e-4;

fn check_logits(name: &str) {
    let device = Default::default();
    let model = load_hf_model::<Cpu>(&hf_tiny_dir(name), &device).expect("load").model;
    let reference = fixture_json(&format!("hf-tiny/{name}/reference.json"));
    let rows: Vec<Vec<u32>> = reference["input_ids"].as_array().unwrap().iter().map(u32s).collect();
    assert_eq!((rows.len(), rows[0].len()), (2, 80));
    let mut caches = model.new_cache(&DenseScheme, 2, &device);
    let logits = to_vec(model.forward(&rows, &mut caches, Logits::All).expect("forward"));
    let expected: Vec<f32> = reference["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| row.as_array().unwrap().iter().flat_map(f32s))
        .collect();
    let diff = max_abs_diff(&logits, &expected);
    println!("{name}: max |logit - transformers| = {diff:e} over both rows");
    assert!(diff < LOGIT_TOLERANCE, "{name}: max abs diff {diff}");
}

fn check_greedy(name: &str) {
    let device = Default::default();
    let model = load_hf_model::<Cpu>(&hf_tiny_dir(name), &device).expect("load").model;
    let reference = fixture_json(&format!("hf-tiny/{name}/reference.json"));
    let prompt_len = reference["greedy_prompt_len"].as_u64().unwrap() as usize;
    let prompt = u32s(&reference["input_ids"][0])[..prompt_len].to_vec();
    let expected = u32s(&reference["greedy_new_tokens"]);
    let mut caches = model.new_cache(&DenseScheme, 1, &device);
    let options =
        GenerateOptions { max_new_tokens: expected.len(), stop_tokens: vec![], sampling: SamplingConfig::greedy() };
    let out = generate(&model, &mut caches, &prompt, &options, |_| {}).expect("generate");
    assert_eq!(out.tokens[0], expected, "{name}: greedy tokens through the cache");
}

#[test]
fn tiny_llama_logits_match_transformers() {
    check_logits("tiny-llama");
}

#[test]
fn tiny_mistral_sliding_window_logits_match_transformers() {
    check_logits("tiny-mistral-swa");
}

#[test]
fn tiny_llama_greedy_matches_transformers() {
    check_greedy("tiny-llama");
}

#[test]
fn tiny_mistral_greedy_matches_transformers() {
    check_greedy("tiny-mistral-swa");
}
