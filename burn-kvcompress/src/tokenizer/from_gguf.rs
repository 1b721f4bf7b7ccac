//! Building a byte-level BPE tokenizer from GGUF `tokenizer.ggml.*` metadata, as llama.cpp does.

use std::collections::HashMap;

use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::AddedToken;

use super::error::TokenizerError;
use super::pretokenize::PreTokenizerStyle;
use crate::gguf::GgufFile;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp `llama_token_type`).
pub mod token_type {
    /// An ordinary vocabulary entry.
    pub const NORMAL: i32 = 1;
    /// The unknown token.
    pub const UNKNOWN: i32 = 2;
    /// A control token (`<|im_start|>`, `<|endoftext|>`, ...).
    pub const CONTROL: i32 = 3;
    /// A user-defined token.
    pub const USER_DEFINED: i32 = 4;
    /// A placeholder entry.
    pub const UNUSED: i32 = 5;
    /// A byte-fallback token (`<0x41>`).
    pub const BYTE: i32 = 6;
}

/// What [`build`] produces.
pub(crate) struct Built {
    pub tokenizer: tokenizers::Tokenizer,
    pub special: Vec<bool>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

fn optional_id(gguf: &GgufFile, key: &str, n: usize) -> Result<Option<u32>, TokenizerError> {
    match gguf.opt_u32(key)? {
        Some(id) if id as usize >= n => {
            Err(TokenizerError::InvalidVocab(format!("{key} = {id} is outside the vocabulary of {n}")))
        }
        other => Ok(other),
    }
}

/// Splits a GGUF merge `"a b"` at the first space after its first character, like llama.cpp.
fn split_merge(m: &str) -> Result<(String, String), TokenizerError> {
    let first = m.chars().next().map_or(0, char::len_utf8);
    match m[first..].find(' ') {
        Some(i) => Ok((m[..first + i].to_string(), m[first + i + 1..].to_string())),
        None => Err(TokenizerError::InvalidVocab(format!("merge {m:?} has no space"))),
    }
}

/// Builds the tokenizer llama.cpp would use for this GGUF file's `gpt2` vocabulary.
pub(crate) fn build(gguf: &GgufFile) -> Result<Built, TokenizerError> {
    let model = gguf.get_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        return Err(TokenizerError::UnsupportedModel(model.to_string()));
    }
    let style = PreTokenizerStyle::from_gguf_pre(gguf.opt_str("tokenizer.ggml.pre")?.unwrap_or("default"))?;
    let tokens = gguf.get_str_array("tokenizer.ggml.tokens")?;
    let types = match gguf.get("tokenizer.ggml.token_type") {
        Some(_) => gguf.get_i32_array("tokenizer.ggml.token_type")?,
        None => vec![token_type::NORMAL; tokens.len()],
    };
    if types.len() != tokens.len() {
        return Err(TokenizerError::InvalidVocab(format!("{} token types for {} tokens", types.len(), tokens.len())));
    }
    if u32::try_from(tokens.len()).is_err() {
        return Err(TokenizerError::InvalidVocab(format!("{} tokens do not fit u32 ids", tokens.len())));
    }
    let merges =
        gguf.get_str_array("tokenizer.ggml.merges")?.iter().map(|m| split_merge(m)).collect::<Result<Vec<_>, _>>()?;

    // The hasher type is inferred from `vocab_and_merges`.
    let mut vocab = HashMap::with_capacity_and_hasher(tokens.len(), Default::default());
    for (id, tok) in tokens.iter().enumerate() {
        if vocab.insert(tok.clone(), id as u32).is_some() {
            return Err(TokenizerError::InvalidVocab(format!("duplicate token {tok:?}")));
        }
    }
    let bpe = BPE::builder().vocab_and_merges(vocab, merges).build().map_err(TokenizerError::Build)?;

    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(style.pre_tokenizer()));
    tokenizer.with_decoder(Some(ByteLevel::default()));

    // llama.cpp: CONTROL and UNKNOWN tokens are split out of the text only when special tokens
    // are parsed; USER_DEFINED tokens always are (like non-special added tokens here).
    let mut special = vec![false; tokens.len()];
    let (mut specials, mut user) = (Vec::new(), Vec::new());
    for (id, (tok, &ty)) in tokens.iter().zip(&types).enumerate() {
        match ty {
            token_type::CONTROL | token_type::UNKNOWN => {
                special[id] = true;
                specials.push(AddedToken::from(tok.clone(), true));
            }
            token_type::USER_DEFINED => {
                special[id] = true;
                user.push(AddedToken::from(tok.clone(), false).normalized(false));
            }
            _ => {}
        }
    }
    tokenizer.add_special_tokens(&specials);
    tokenizer.add_tokens(&user);

    let bos = optional_id(gguf, "tokenizer.ggml.bos_token_id", tokens.len())?;
    let eos = optional_id(gguf, "tokenizer.ggml.eos_token_id", tokens.len())?;
    Ok(Built { tokenizer, special, bos, eos })
}
