//! The error type of the tokenizer.

use std::path::PathBuf;

use crate::gguf::GgufError;

/// Everything that can go wrong while building or using a [`Tokenizer`](super::Tokenizer).
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A metadata key the tokenizer needs is absent from the GGUF file.
    #[error("GGUF tokenizer metadata {0:?} is missing")]
    MissingMetadata(String),
    /// The GGUF tokenizer metadata could not be read (wrong value type, ...).
    #[error("GGUF tokenizer metadata: {0}")]
    Metadata(GgufError),
    /// `tokenizer.ggml.model` names a tokenizer other than byte-level BPE (`"gpt2"`), e.g.
    /// `"llama"` (SentencePiece).
    #[error("unsupported tokenizer model {0:?} (only \"gpt2\" byte-level BPE is supported)")]
    UnsupportedModel(String),
    /// `tokenizer.ggml.pre` names a pre-tokenizer whose llama.cpp regexes are not reproduced.
    #[error("unsupported pre-tokenizer {0:?}")]
    UnsupportedPreTokenizer(String),
    /// The vocabulary in the metadata is inconsistent (duplicate token, malformed merge,
    /// token-type array of the wrong length, special id out of range, ...).
    #[error("invalid vocabulary: {0}")]
    InvalidVocab(String),
    /// The `tokenizers` crate refused to build the tokenizer.
    #[error("building the tokenizer failed: {0}")]
    Build(#[source] tokenizers::Error),
    /// A Hugging Face `tokenizer.json` (or its `tokenizer_config.json`) could not be loaded.
    #[error("loading {path}: {source}")]
    Json {
        /// The file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: tokenizers::Error,
    },
    /// Encoding failed inside the `tokenizers` crate.
    #[error("encoding failed: {0}")]
    Encode(#[source] tokenizers::Error),
    /// Decoding failed inside the `tokenizers` crate.
    #[error("decoding failed: {0}")]
    Decode(#[source] tokenizers::Error),
    /// A token id outside the vocabulary was passed to decode.
    #[error("token id {id} is outside the vocabulary (size {vocab_size})")]
    UnknownTokenId {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
}

impl From<GgufError> for TokenizerError {
    fn from(e: GgufError) -> Self {
        match e {
            GgufError::MissingKey(k) => TokenizerError::MissingMetadata(k),
            other => TokenizerError::Metadata(other),
        }
    }
}
