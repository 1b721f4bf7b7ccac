//! Prefill-then-decode through the dense cache equals one full forward pass at every position,
//! and a left-padded batch of prompts of different lengths equals running each alone.

use crate::common::*;
use burn_kvcompress::{cache::DenseScheme, loading::load_hf_model, model::Logits};

/// Decode computes each position with different matrix shapes than the full pass (one row at a
/// time), so summation order may differ in the last bits; logits are O(1).
const TOLERANCE: f32 = 1e-5;

fn tokens(name: &str) -> Vec<u32> {
    u32s(&fixture_json(&format!("hf-tiny/{name}/reference.json"))["input_ids"][1])
}

fn full_vs_incremental(name: &str) {
    let device = Default::default();
    let model = load_hf_model::<Cpu>(&hf_tiny_dir(name), &device).expect("load").model;
    let ids = tokens(name);
    let vocab = model.config().vocab_size;
    let mut full_cache = model.new_cache(&DenseScheme, 1, &device);
    let full = to_vec(model.forward(std::slice::from_ref(&ids), &mut full_cache, Logits::All).unwrap());

    // Prefill 7 tokens, then a chunk of 5, then one at a time (crossing the window of 24).
    let mut cache = model.new_cache(&DenseScheme, 1, &device);
    let mut incremental = to_vec(model.forward(&[ids[..7].to_vec()], &mut cache, Logits::All).unwrap());
    incremental.extend(to_vec(model.forward(&[ids[7..12].to_vec()], &mut cache, Logits::All).unwrap()));
    for &t in &ids[12..] {
        incremental.extend(to_vec(model.forward(&[vec![t]], &mut cache, Logits::All).unwrap()));
    }
    assert_eq!(incremental.len(), ids.len() * vocab);
    for pos in 0..ids.len() {
        let range = pos * vocab..(pos + 1) * vocab;
        let diff = max_abs_diff(&full[range.clone()], &incremental[range]);
        assert!(diff < TOLERANCE, "{name} position {pos}: max abs diff {diff}");
    }
}

#[test]
fn llama_decode_equals_full_forward_per_position() {
    full_vs_incremental("tiny-llama");
}

#[test]
fn mistral_decode_equals_full_forward_per_position() {
    full_vs_incremental("tiny-mistral-swa");
}

#[test]
fn padded_batch_equals_individual_sequences() {
    let device = Default::default();
    for name in ["tiny-llama", "tiny-mistral-swa"] {
        let model = load_hf_model::<Cpu>(&hf_tiny_dir(name), &device).expect("load").model;
        let ids = tokens(name);
        let prompts = vec![ids[..30].to_vec(), ids[40..49].to_vec(), ids[50..51].to_vec()];
        let steps = [ids[60], ids[61], ids[62]];

        let mut batch_cache = model.new_cache(&DenseScheme, 3, &device);
        let mut batched = vec![to_vec(model.prefill_padded(&prompts, &mut batch_cache, 0).unwrap())];
        for &t in &steps {
            let step: Vec<Vec<u32>> = vec![vec![t]; 3];
            batched.push(to_vec(model.forward(&step, &mut batch_cache, Logits::Last).unwrap()));
        }
        let vocab = model.config().vocab_size;
        for (row, prompt) in prompts.iter().enumerate() {
            let mut cache = model.new_cache(&DenseScheme, 1, &device);
            let mut alone =
                vec![to_vec(model.forward(std::slice::from_ref(prompt), &mut cache, Logits::Last).unwrap())];
            for &t in &steps {
                alone.push(to_vec(model.forward(&[vec![t]], &mut cache, Logits::Last).unwrap()));
            }
            for (step, (b, a)) in batched.iter().zip(&alone).enumerate() {
                let diff = max_abs_diff(&b[row * vocab..(row + 1) * vocab], a);
                assert!(diff < TOLERANCE, "{name} row {row} step {step}: max abs diff {diff}");
            }
        }
    }
}
