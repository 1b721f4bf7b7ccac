//! [`Tokenizer`]: text to token ids and back.

use std::path::Path;

use super::error::TokenizerError;
use super::from_gguf::{build, Built};
use super::from_json::load;
use super::stream::TokenStream;
use crate::gguf::GgufFile;

/// A tokenizer (a wrapped [`tokenizers::Tokenizer`]) that reproduces llama.cpp's tokenization of
/// GGUF byte-level BPE vocabularies.
///
/// Encoding never adds BOS/EOS. Special tokens (GGUF token type CONTROL or UNKNOWN, or special
/// added tokens of a `tokenizer.json`) are recognised in the text only when asked to
/// (`parse_special`, llama.cpp's `special`); USER_DEFINED tokens always are, as in llama.cpp.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same tokenizer with `encode_special_tokens` set: special-token text is plain text.
    plain: tokenizers::Tokenizer,
    special: Vec<bool>,
    bos: Option<u32>,
    eos: Option<u32>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish()
    }
}

impl Tokenizer {
    fn from_built(b: Built) -> Self {
        let mut plain = b.tokenizer.clone();
        plain.set_encode_special_tokens(true);
        Self { inner: b.tokenizer, plain, special: b.special, bos: b.bos, eos: b.eos }
    }

    /// Builds the tokenizer described by a GGUF file's `tokenizer.ggml.*` metadata
    /// (model `gpt2`, i.e. byte-level BPE; see [`PreTokenizerStyle`](super::PreTokenizerStyle)
    /// for the supported `tokenizer.ggml.pre` values).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self, TokenizerError> {
        build(gguf).map(Self::from_built)
    }

    /// Loads a Hugging Face `tokenizer.json`. BOS/EOS are taken from a `tokenizer_config.json`
    /// beside it when present, else guessed from common special-token names.
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self, TokenizerError> {
        load(path.as_ref()).map(Self::from_built)
    }

    /// Token ids of `text`, without BOS. With `parse_special`, special-token text such as
    /// `<|im_start|>` becomes its token; without, it is tokenized as ordinary text.
    pub fn encode(&self, text: &str, parse_special: bool) -> Result<Vec<u32>, TokenizerError> {
        let tok = if parse_special { &self.inner } else { &self.plain };
        let enc = tok.encode_fast(text, false).map_err(TokenizerError::Encode)?;
        Ok(enc.get_ids().to_vec())
    }

    /// The text of `ids`, special tokens included as their text. Bytes that do not form valid
    /// UTF-8 (a character cut at the end) become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.decode_with(ids, false)
    }

    /// Like [`decode`](Self::decode), leaving special tokens out when `skip_special`.
    pub fn decode_with(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        let vocab_size = self.vocab_size();
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(TokenizerError::UnknownTokenId { id, vocab_size });
        }
        self.inner.decode(ids, skip_special).map_err(TokenizerError::Decode)
    }

    /// Number of token ids (including added tokens).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The beginning-of-sequence token, if the model defines one.
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// The end-of-sequence token, if the model defines one.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// The id of the token whose (byte-level encoded) text is `token`, e.g. `"<|im_end|>"` or
    /// `"Ġthe"`.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The (byte-level encoded) text of token `id`.
    pub fn token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// Whether `id` is a special token (GGUF CONTROL, UNKNOWN or USER_DEFINED; a special added
    /// token of a `tokenizer.json`).
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// A streaming detokenizer over this tokenizer.
    pub fn stream(&self, skip_special: bool) -> TokenStream<'_> {
        TokenStream::new(self, skip_special)
    }

    /// The wrapped `tokenizers` tokenizer (special tokens parsed).
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}
