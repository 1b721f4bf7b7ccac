//! Decode-perplexity of the dense cache on tempest.txt against llama.cpp's f32 figure.

use crate::common::*;
use burn_kvcompress::{
    cache::DenseScheme,
    eval::{decode_perplexity, PerplexityConfig},
    loading::load_gguf_model,
};

#[test]
fn dense_perplexity_on_tempest_matches_llama_cpp_f32() {
    let device = Default::default();
    let loaded = load_gguf_model::<Cpu>(&model_path(), &device).expect("load");
    let text = std::fs::read_to_string(workspace_dir().join("data/tempest.txt")).unwrap();
    let tokens = loaded.tokenizer.as_ref().unwrap().encode(&text, false).unwrap();
    let reference = fixture_json("llamacpp-smollm2.json");
    let expected = reference["ppl"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["text"] == "tempest.txt" && r["kv_type"] == "f32")
        .expect("llama.cpp f32 row")["ppl"]
        .as_f64()
        .unwrap();
    let report =
        decode_perplexity(&loaded.model, &DenseScheme, &tokens, PerplexityConfig::default(), &device, |_, _| {})
            .expect("perplexity");
    let relative = (report.ppl / expected - 1.0).abs();
    println!(
        "dense ppl {:.4} vs llama.cpp f32 {expected:.4} ({:+.3}%), {} tokens; prefill {:.1} tok/s, decode {:.1} tok/s",
        report.ppl,
        100.0 * (report.ppl / expected - 1.0),
        report.scored_tokens,
        report.prefill_tokens_per_second,
        report.decode_tokens_per_second
    );
    assert_eq!(report.scored_tokens, 2048);
    assert!(relative < 0.005, "ppl {} is {:.3}% from llama.cpp's {expected}", report.ppl, 100.0 * relative);
}
