//! Tokenizer API on the real SmolLM2 vocabulary (special tokens, ids, streaming detokenization,
//! tokenizer.json round trip) and typed errors on GGUF metadata built in the test.

use crate::common::model_path;
use burn_kvcompress::gguf::GgufFile;
use burn_kvcompress::tokenizer::{Tokenizer, TokenizerError};

fn tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&GgufFile::open(model_path()).unwrap()).unwrap()
}

#[test]
fn vocabulary_and_special_tokens() {
    let gguf = GgufFile::open(model_path()).unwrap();
    let tok = Tokenizer::from_gguf(&gguf).unwrap();
    let tokens = gguf.get_str_array("tokenizer.ggml.tokens").unwrap();
    let types = gguf.get_i32_array("tokenizer.ggml.token_type").unwrap();
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(gguf.get_u32("tokenizer.ggml.bos_token_id").unwrap()));
    assert_eq!(tok.eos_id(), Some(gguf.get_u32("tokenizer.ggml.eos_token_id").unwrap()));
    assert_eq!((tok.bos_id(), tok.eos_id()), (Some(1), Some(2)));
    assert_eq!(tok.token_id("<|im_start|>"), Some(1));
    assert_eq!(tok.token_id("<|im_end|>"), Some(2));
    assert_eq!(tok.token_id("no such token"), None);
    for (id, (t, ty)) in tokens.iter().zip(&types).enumerate() {
        let id = id as u32;
        assert_eq!(tok.token_id(t), Some(id), "{t:?}");
        assert_eq!(tok.is_special(id), *ty == 3, "{t:?} type {ty}");
    }
    assert!(!tok.is_special(1_000_000));
    assert!(matches!(tok.decode(&[49152]), Err(TokenizerError::UnknownTokenId { id: 49152, .. })));
    assert_eq!(tok.decode(&[1, 2]).unwrap(), "<|im_start|><|im_end|>");
    assert_eq!(tok.decode_with(&[1, 504, 2], true).unwrap(), "The");
}

#[test]
fn stream_emits_only_complete_characters() {
    let tok = tokenizer();
    let text = "Grüße, 世界! 🎉🦀 naïve café — done.\n";
    let ids = tok.encode(text, false).unwrap();
    // Some character must be split across tokens for this test to mean anything.
    let split = ids.iter().filter(|&&id| tok.decode(&[id]).unwrap().contains('\u{FFFD}')).count();
    assert!(split > 0, "no token of {ids:?} holds a partial character");
    let mut stream = tok.stream(false);
    let mut out = String::new();
    for &id in &ids {
        let chunk = stream.push(id).unwrap();
        assert!(!chunk.contains('\u{FFFD}'), "chunk {chunk:?} has a partial character");
        out.push_str(&chunk);
        assert!(text.starts_with(&out), "{out:?} is not a prefix of the text");
    }
    out.push_str(&stream.finish().unwrap());
    assert_eq!(out, text);
}

#[test]
fn stream_skips_or_keeps_special_tokens() {
    let tok = tokenizer();
    let ids = tok.encode("<|im_start|>assistant\nHi<|im_end|>", true).unwrap();
    let collect = |skip| {
        let mut s = tok.stream(skip);
        let mut out: String = ids.iter().map(|&id| s.push(id).unwrap()).collect();
        out.push_str(&s.finish().unwrap());
        out
    };
    assert_eq!(collect(false), "<|im_start|>assistant\nHi<|im_end|>");
    assert_eq!(collect(true), "assistant\nHi");
}

#[test]
fn stream_finish_flushes_an_incomplete_character() {
    let tok = tokenizer();
    let ids = tok.encode("🦀", false).unwrap();
    assert!(ids.len() > 1, "expected the emoji to take several byte tokens: {ids:?}");
    let mut s = tok.stream(false);
    assert_eq!(s.push(ids[0]).unwrap(), "");
    assert_eq!(s.finish().unwrap(), "\u{FFFD}");
}

#[test]
fn json_round_trip_gives_the_same_ids() {
    let tok = tokenizer();
    let dir = std::env::temp_dir().join(format!("kvc_tok_json_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokenizer.json");
    tok.inner().save(&path, false).unwrap();
    std::fs::write(
        dir.join("tokenizer_config.json"),
        r#"{"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}}"#,
    )
    .unwrap();
    let loaded = Tokenizer::from_json_file(&path).unwrap();
    let text = "The capital of France is Paris. In 1789, 12345 people...\n\n  x<|im_end|>";
    for special in [true, false] {
        assert_eq!(loaded.encode(text, special).unwrap(), tok.encode(text, special).unwrap());
    }
    assert_eq!((loaded.bos_id(), loaded.eos_id()), (Some(1), Some(2)));
    assert_eq!(loaded.vocab_size(), tok.vocab_size());
    assert!(loaded.is_special(0) && loaded.is_special(16) && !loaded.is_special(17));
    std::fs::remove_file(dir.join("tokenizer_config.json")).unwrap();
    let guessed = Tokenizer::from_json_file(&path).unwrap();
    assert_eq!((guessed.bos_id(), guessed.eos_id()), (None, Some(0)), "<|endoftext|> is the only candidate");
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(Tokenizer::from_json_file(&path), Err(TokenizerError::Json { .. })));
}

// ---- errors, on GGUF metadata built here ----

fn enc_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A GGUF file with no tensors and the given string / string-array metadata.
fn gguf(strings: &[(&str, &str)], arrays: &[(&str, &[&str])]) -> GgufFile {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&((strings.len() + arrays.len()) as u64).to_le_bytes());
    for (k, v) in strings {
        enc_str(&mut b, k);
        b.extend_from_slice(&8u32.to_le_bytes());
        enc_str(&mut b, v);
    }
    for (k, vs) in arrays {
        enc_str(&mut b, k);
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&(vs.len() as u64).to_le_bytes());
        for v in *vs {
            enc_str(&mut b, v);
        }
    }
    GgufFile::from_bytes(b).unwrap()
}

const TOKENS: &[&str] = &["a", "b", "ab", "Ġ"];
const MERGES: &[&str] = &["a b"];

#[test]
fn tiny_gguf_vocabulary_encodes() {
    let g = gguf(
        &[("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "smollm")],
        &[("tokenizer.ggml.tokens", TOKENS), ("tokenizer.ggml.merges", MERGES)],
    );
    let tok = Tokenizer::from_gguf(&g).unwrap();
    assert_eq!(tok.encode("ab a", false).unwrap(), vec![2, 3, 0]);
    assert_eq!((tok.bos_id(), tok.eos_id()), (None, None));
}

#[test]
fn unsupported_models_and_pre_tokenizers() {
    let arrays: &[(&str, &[&str])] = &[("tokenizer.ggml.tokens", TOKENS), ("tokenizer.ggml.merges", MERGES)];
    let g = gguf(&[("tokenizer.ggml.model", "llama")], arrays);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::UnsupportedModel(m)) if m == "llama"));
    let g = gguf(&[("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "qwen2")], arrays);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::UnsupportedPreTokenizer(p)) if p == "qwen2"));
    let g = gguf(&[("tokenizer.ggml.model", "gpt2")], arrays);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::UnsupportedPreTokenizer(p)) if p == "default"));
}

#[test]
fn missing_and_invalid_metadata() {
    let g = gguf(&[], &[]);
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::MissingMetadata(k)) if k == "tokenizer.ggml.model"));
    let g = gguf(
        &[("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "smollm")],
        &[("tokenizer.ggml.tokens", TOKENS)],
    );
    assert!(
        matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::MissingMetadata(k)) if k == "tokenizer.ggml.merges")
    );
    let g = gguf(
        &[("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "smollm"), ("tokenizer.ggml.tokens", "x")],
        &[],
    );
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::Metadata(_))));
    let dup: &[&str] = &["a", "a"];
    let g = gguf(
        &[("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "smollm")],
        &[("tokenizer.ggml.tokens", dup), ("tokenizer.ggml.merges", &[])],
    );
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::InvalidVocab(_))));
    let g = gguf(
        &[("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", "smollm")],
        &[("tokenizer.ggml.tokens", TOKENS), ("tokenizer.ggml.merges", &["ab"])],
    );
    assert!(matches!(Tokenizer::from_gguf(&g), Err(TokenizerError::InvalidVocab(_))));
}
