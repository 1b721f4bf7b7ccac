//! What CI runs in place of a fuzzing campaign (which needs nightly): every target's entry point
//! over its committed corpus (`libfuzzer/corpus/<target>/`: the seeds and any input a run kept)
//! and regression inputs (`libfuzzer/regressions/<target>/`: each input that once broke a
//! property), then over seeded mutations of them (`KVC_FUZZ_MUTATIONS` each, 2000 unless set).

use std::path::Path;

use burn_kvtransfer::fuzzing::Mutator;
use kvcompress_fuzz::{Target, TARGETS};

/// The committed inputs of `target`, its corpus and its regressions, each with its file name.
fn committed(target: &Target) -> Vec<(String, Vec<u8>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("libfuzzer");
    let mut inputs = Vec::new();
    for folder in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(folder).join(target.name)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            inputs.push((name, std::fs::read(&path).expect("a readable input")));
        }
    }
    inputs
}

/// Runs `target` on `input` and says whether it was accepted; if it panics, keeps the input in
/// the temporary directory (to reproduce with the libFuzzer target, or to commit as a
/// regression) and names it.
fn run(target: &Target, input: &[u8], what: &str) -> bool {
    std::panic::catch_unwind(|| (target.run)(input)).unwrap_or_else(|_| {
        let path = std::env::temp_dir().join(format!("kvc-fuzz-{}-{what}", target.name));
        std::fs::write(&path, input).expect("the failing input written");
        panic!("{}: {what} broke a property; the input is in {}", target.name, path.display());
    })
}

fn replay(name: &str) {
    let target = TARGETS.iter().find(|t| t.name == name).expect("a target of that name");
    let inputs = committed(target);
    assert!(!inputs.is_empty(), "{name}: no committed corpus (run the write_corpora example)");
    for (file, input) in &inputs {
        let accepted = run(target, input, file);
        // A seed that is refused would start the mutations from shallow code.
        assert!(accepted || !file.starts_with("seed-"), "{name}: seed {file} is refused");
    }
    let inputs: Vec<Vec<u8>> = inputs.into_iter().map(|(_, input)| input).collect();
    let mutations = std::env::var("KVC_FUZZ_MUTATIONS").map_or(2000, |n| n.parse().expect("a count"));
    let mut mutator = Mutator::with_corpus(0x5EED, inputs.clone());
    for i in 0..mutations {
        let mut input = inputs[i % inputs.len()].clone();
        mutator.mutate(&mut input);
        run(target, &input, &format!("mutation-{i}"));
    }
}

#[test]
fn gguf_bytes() {
    replay("gguf_bytes");
}

#[test]
fn gguf_tables() {
    replay("gguf_tables");
}

#[test]
fn hf_model() {
    replay("hf_model");
}

#[test]
fn artifacts() {
    replay("artifacts");
}

#[test]
fn layer_state() {
    replay("layer_state");
}

#[test]
fn scheme_spec() {
    replay("scheme_spec");
}

#[test]
fn frame_decoder() {
    replay("frame_decoder");
}

#[test]
fn every_target_is_replayed() {
    let names: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        ["gguf_bytes", "gguf_tables", "hf_model", "artifacts", "layer_state", "scheme_spec", "frame_decoder"]
    );
}
