//! Loading a Hugging Face `tokenizer.json` (and, when present, the `tokenizer_config.json`
//! beside it for the BOS/EOS roles).

use std::path::Path;

use super::error::TokenizerError;
use super::from_gguf::Built;

/// BOS candidates tried, in order, when no `tokenizer_config.json` names one.
const BOS_CANDIDATES: [&str; 4] = ["<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>"];
/// EOS candidates tried, in order, when no `tokenizer_config.json` names one.
const EOS_CANDIDATES: [&str; 4] = ["<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"];

/// The token text of `bos_token` / `eos_token` in a `tokenizer_config.json` value: either a
/// string or an object with a `content` string.
fn config_token<'a>(config: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    let v = config.get(key)?;
    v.as_str().or_else(|| v.get("content")?.as_str())
}

/// Loads `path`. BOS/EOS come from `bos_token`/`eos_token` in a `tokenizer_config.json` in the
/// same directory if there is one, else from the first special added token among common names
/// (`<|begin_of_text|>`, `<s>`, ... / `<|end_of_text|>`, `</s>`, ...).
pub(crate) fn load(path: &Path) -> Result<Built, TokenizerError> {
    let json_err = |source| TokenizerError::Json { path: path.to_path_buf(), source };
    let tokenizer = tokenizers::Tokenizer::from_file(path).map_err(json_err)?;
    let n = tokenizer.get_vocab_size(true);
    let mut special = vec![false; n];
    for (id, tok) in tokenizer.get_added_tokens_decoder() {
        if tok.special && (id as usize) < n {
            special[id as usize] = true;
        }
    }
    let find = |names: &[&str]| names.iter().find_map(|t| tokenizer.token_to_id(t).filter(|&id| special[id as usize]));
    let (mut bos, mut eos) = (find(&BOS_CANDIDATES), find(&EOS_CANDIDATES));

    let config_path = path.with_file_name("tokenizer_config.json");
    if config_path.is_file() {
        let cfg_err = |source| TokenizerError::Json { path: config_path.clone(), source };
        let text = std::fs::read_to_string(&config_path).map_err(|e| cfg_err(Box::new(e)))?;
        let config: serde_json::Value = serde_json::from_str(&text).map_err(|e| cfg_err(Box::new(e)))?;
        if let Some(t) = config_token(&config, "bos_token") {
            bos = tokenizer.token_to_id(t);
        }
        if let Some(t) = config_token(&config, "eos_token") {
            eos = tokenizer.token_to_id(t);
        }
    }
    Ok(Built { tokenizer, special, bos, eos })
}
