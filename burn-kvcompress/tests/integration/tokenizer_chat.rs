//! `chatml_prompt` against SmolLM2's real chat template rendered by Python jinja2
//! (tests/fixtures/make_chat_fixture.py wrote smollm2_chat_reference.json).

use crate::common::{fixture, model_path};
use burn_kvcompress::gguf::GgufFile;
use burn_kvcompress::tokenizer::{chatml_prompt, ChatMessage, Role};
use serde_json::Value;

fn reference() -> Value {
    let text = std::fs::read_to_string(fixture("smollm2_chat_reference.json")).expect("chat fixture");
    serde_json::from_str(&text).unwrap()
}

fn role(s: &str) -> Role {
    match s {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn chatml_matches_jinja2_rendering_of_the_template() {
    let r = reference();
    let cases = r["cases"].as_array().unwrap();
    assert!(cases.len() >= 10);
    for c in cases {
        let messages: Vec<ChatMessage> = c["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| ChatMessage::new(role(m["role"].as_str().unwrap()), m["content"].as_str().unwrap()))
            .collect();
        let add = c["add_generation_prompt"].as_bool().unwrap();
        let want = c["rendered"].as_str().unwrap();
        assert_eq!(chatml_prompt(&messages, add), want, "messages {messages:?}, add_generation_prompt {add}");
    }
}

#[test]
fn fixture_template_is_the_models_template() {
    let gguf = GgufFile::open(model_path()).unwrap();
    let template = gguf.get_str("tokenizer.chat_template").unwrap();
    assert_eq!(template, reference()["template"].as_str().unwrap());
}
