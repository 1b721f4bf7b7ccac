//! A batched disaggregated run of SmolLM2 (the default model, `cargo xtask fetch-model`) on the
//! CPU: sixteen requests of different lengths arriving at once, decoded in one continuous batch,
//! each giving the tokens of a single-process run.

use std::process::Command;

use kvcompress_cli::e2e_report::RequestRecord;

const QUESTIONS: [&str; 16] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in two sentences why the sky is blue.",
    "List three uses of a paperclip.",
    "Who wrote Hamlet?",
    "What is two plus two?",
    "Name a colour.",
    "Describe a cat in one sentence, using at least three adjectives and one verb.",
    "What does a compiler do?",
    "Give me a word that rhymes with light.",
    "Why do leaves fall in autumn?",
    "How many legs does a spider have?",
    "Translate 'good morning' into French.",
    "What is the boiling point of water at sea level, in degrees Celsius?",
    "Say hello.",
    "Suggest a name for a small bakery by the harbour.",
];

#[test]
fn sixteen_requests_decoded_in_one_batch_give_the_single_process_tokens() {
    let json = std::env::temp_dir().join(format!("disagg-smollm2-batch-{}.json", std::process::id()));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_disagg"));
    cmd.args(["demo", "--kv", "dense", "--kv", "hack2", "--max-new-tokens", "8", "--request-rate", "1000"]);
    cmd.args(["--max-batch", "16", "--check", "--json"]).arg(&json);
    for question in QUESTIONS {
        cmd.args(["--prompt", question]);
    }
    // `--check` ends the run with an error if any request's tokens differ from a single-process
    // run of its prompt with the same scheme, or its received KV from a local prefill's.
    let output = cmd.output().expect("disagg runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let records: Vec<RequestRecord> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(records.len(), 32);
    for scheme in records.chunks(16) {
        // Prompts of several lengths, decoded together.
        let mut lengths: Vec<usize> = scheme.iter().map(|r| r.prompt_tokens).collect();
        lengths.dedup();
        assert!(lengths.len() > 4, "{lengths:?}");
        // How many overlap depends on the prefill's speed against the decoding's (both on the
        // CPU): at least two decode together.
        assert!(scheme.iter().any(|r| r.peak_batch > 1), "{scheme:?}");
        assert!(scheme.iter().all(|r| r.new_tokens >= 1 && r.new_tokens <= 8), "{scheme:?}");
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The printed tables mark every request's KV and tokens as equal.
    assert_eq!(stdout.matches(" yes    yes").count(), 32, "{stdout}");
}
