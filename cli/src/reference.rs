//! llama.cpp's decode-perplexity figures for the same model and texts
//! (`fixtures/llamacpp-smollm2.json`), printed beside ours, and where the repository's texts and
//! fixtures are.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// A file of the repository (`data/tempest.txt`, `fixtures/llamacpp-smollm2.json`): relative to
/// the working directory when the program runs from the repository root (e.g. a copy of the tree
/// on another machine), else under the workspace this binary was built from.
pub fn repo_file(relative: &str) -> PathBuf {
    let here = PathBuf::from(relative);
    match here.exists() {
        true => here,
        false => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(relative),
    }
}

/// The evaluation texts of the repository: `data/tempest.txt` and `data/gpl-3.txt`.
pub fn default_texts() -> Vec<PathBuf> {
    vec![repo_file("data/tempest.txt"), repo_file("data/gpl-3.txt")]
}

/// llama.cpp's reference outputs for SmolLM2 (`fixtures/llamacpp-smollm2.json`).
pub fn llamacpp_reference_file() -> PathBuf {
    repo_file("fixtures/llamacpp-smollm2.json")
}

/// One llama.cpp perplexity row.
#[derive(Debug, Clone, Deserialize)]
pub struct ReferencePpl {
    /// Text file name, e.g. `tempest.txt`.
    pub text: String,
    /// llama.cpp KV cache type: f32, f16, q8_0, q4_0.
    pub kv_type: String,
    /// Perplexity.
    pub ppl: f64,
    /// Tokens scored.
    pub scored_tokens: usize,
}

/// One of llama.cpp's reference prompts, with its tokens.
#[derive(Debug, Clone, Deserialize)]
pub struct ReferencePrompt {
    /// The prompt as text.
    pub text: String,
    /// Its token ids (llama.cpp's tokenization, equal to ours:
    /// `burn-kvcompress/tests/integration/tokenizer_reference.rs`).
    pub tokens: Vec<u32>,
}

#[derive(Deserialize)]
struct ReferenceFile {
    ppl: Vec<ReferencePpl>,
    prompts: Vec<ReferencePrompt>,
}

/// Bits per KV element of llama.cpp's cache types (block metadata included).
pub fn llamacpp_bits_per_element(kv_type: &str) -> Option<f64> {
    match kv_type {
        "f32" => Some(32.0),
        "f16" => Some(16.0),
        "q8_0" => Some(8.5),
        "q4_0" => Some(4.5),
        _ => None,
    }
}

fn load_reference(path: &Path) -> anyhow::Result<ReferenceFile> {
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

/// Reads the perplexity rows of the reference file.
pub fn load_reference_ppl(path: &Path) -> anyhow::Result<Vec<ReferencePpl>> {
    Ok(load_reference(path)?.ppl)
}

/// Reads the prompts of the reference file.
pub fn load_reference_prompts(path: &Path) -> anyhow::Result<Vec<ReferencePrompt>> {
    Ok(load_reference(path)?.prompts)
}
