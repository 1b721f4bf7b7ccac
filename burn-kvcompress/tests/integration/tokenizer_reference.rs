//! Token ids against llama.cpp's (fixtures/llamacpp-smollm2.json, produced by
//! llama-cpp-python from the same GGUF vocabulary): the four reference prompts (special tokens
//! parsed, no BOS) and the full texts data/tempest.txt and gpl-3.txt (special=false,
//! no BOS), plus decode round trips.

use crate::common::{model_path, workspace_dir};
use burn_kvcompress::gguf::GgufFile;
use burn_kvcompress::tokenizer::Tokenizer;
use serde_json::Value;

fn tokenizer() -> Tokenizer {
    let gguf = GgufFile::open(model_path()).expect("open model");
    Tokenizer::from_gguf(&gguf).expect("tokenizer from GGUF")
}

fn reference() -> Value {
    let path = workspace_dir().join("fixtures/llamacpp-smollm2.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn text(name: &str) -> String {
    let path = workspace_dir().join("data").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Asserts equality, reporting the first differing position with context.
fn assert_same_ids(got: &[u32], want: &[u32], what: &str, tok: &Tokenizer) {
    if got == want {
        return;
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    let lo = i.saturating_sub(3);
    let show = |v: &[u32]| {
        let s = &v[lo..(i + 4).min(v.len())];
        format!("{s:?} = {:?}", tok.decode(s).unwrap_or_default())
    };
    panic!(
        "{what}: {} ids vs llama.cpp's {}; first difference at {i}: ours {} / llama.cpp {}",
        got.len(),
        want.len(),
        show(got),
        show(want)
    );
}

#[test]
fn prompts_match_llama_cpp() {
    let tok = tokenizer();
    let r = reference();
    let prompts = r["prompts"].as_array().unwrap();
    assert_eq!(prompts.len(), 4);
    for p in prompts {
        let text = p["text"].as_str().unwrap();
        let want = ids(&p["tokens"]);
        let got = tok.encode(text, true).unwrap();
        assert_same_ids(&got, &want, &format!("prompt {text:?}"), &tok);
    }
}

#[test]
fn chat_prompt_parses_special_tokens_only_when_asked() {
    let tok = tokenizer();
    let r = reference();
    let p = &r["prompts"][1];
    let text = p["text"].as_str().unwrap();
    assert!(text.starts_with("<|im_start|>"));
    let want = ids(&p["tokens"]);
    assert_eq!(want[0], 1, "llama.cpp parsed <|im_start|> as token 1");
    let plain = tok.encode(text, false).unwrap();
    assert!(!plain.contains(&1) && !plain.contains(&2), "special=false must not produce control tokens: {plain:?}");
    assert!(plain.len() > want.len());
    assert_eq!(tok.decode(&plain).unwrap(), text);
}

#[test]
fn tempest_matches_llama_cpp() {
    let tok = tokenizer();
    let want = ids(&reference()["text_tokens"]["tempest.txt"]);
    assert_eq!(want.len(), 31514);
    let got = tok.encode(&text("tempest.txt"), false).unwrap();
    assert_same_ids(&got, &want, "tempest.txt", &tok);
}

#[test]
fn gpl3_matches_llama_cpp() {
    let tok = tokenizer();
    let want = ids(&reference()["text_tokens"]["gpl-3.txt"]);
    assert_eq!(want.len(), 7639);
    let got = tok.encode(&text("gpl-3.txt"), false).unwrap();
    assert_same_ids(&got, &want, "gpl-3.txt", &tok);
}

#[test]
fn decode_round_trips_the_texts() {
    let tok = tokenizer();
    for name in ["tempest.txt", "gpl-3.txt"] {
        let t = text(name);
        let ids = tok.encode(&t, false).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), t, "{name}");
    }
}
