//! The pre-tokenizers of llama.cpp's BPE vocabularies, reproduced with `tokenizers` components.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::PreTokenizerWrapper;

use super::error::TokenizerError;

/// A pre-tokenizer style, chosen from GGUF `tokenizer.ggml.pre`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizerStyle {
    /// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_SMOLLM` group (`smollm`, `starcoder`, `refact`,
    /// `command-r`, `codeshell`, `exaone`, `minerva-7b`): the regex `\p{N}` (each digit on its
    /// own), then the GPT-2 regex
    /// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`.
    /// Reproduced as `Sequence[Digits(individual), ByteLevel(add_prefix_space=false,
    /// use_regex=true)]` (Rust's `char::is_numeric` is `\p{N}`; the ByteLevel regex is the GPT-2
    /// one, whose extra trailing `|\s+` llama.cpp's GPT-2 splitter also implements).
    SmolLm,
    /// llama.cpp's `LLAMA_VOCAB_PRE_TYPE_GPT2` group (`gpt-2`, `phi-2`, `mpt`, `olmo`, `jais`):
    /// the GPT-2 regex alone, i.e. `ByteLevel(add_prefix_space=false, use_regex=true)`.
    Gpt2,
}

impl PreTokenizerStyle {
    /// The style for a `tokenizer.ggml.pre` value, or
    /// [`TokenizerError::UnsupportedPreTokenizer`] (including llama.cpp's `"default"`, whose
    /// four-regex split is not reproduced).
    pub fn from_gguf_pre(pre: &str) -> Result<Self, TokenizerError> {
        match pre {
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => Ok(Self::SmolLm),
            "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" => Ok(Self::Gpt2),
            other => Err(TokenizerError::UnsupportedPreTokenizer(other.to_string())),
        }
    }

    /// The `tokenizers` pre-tokenizer for this style.
    pub fn pre_tokenizer(self) -> PreTokenizerWrapper {
        let byte_level = ByteLevel::new(false, true, true);
        match self {
            Self::SmolLm => Sequence::new(vec![Digits::new(true).into(), byte_level.into()]).into(),
            Self::Gpt2 => byte_level.into(),
        }
    }
}
