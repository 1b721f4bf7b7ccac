//! Tokenization: a byte-level BPE tokenizer built from GGUF metadata (or loaded from a Hugging
//! Face `tokenizer.json`) that reproduces llama.cpp's token ids, a streaming detokenizer, and
//! SmolLM2's ChatML prompt format.
//!
//! ```no_run
//! use burn_kvcompress::gguf::GgufFile;
//! use burn_kvcompress::tokenizer::{chatml_prompt, ChatMessage, Tokenizer};
//! let gguf = GgufFile::open("model.gguf")?;
//! let tok = Tokenizer::from_gguf(&gguf)?;
//! let prompt = chatml_prompt(&[ChatMessage::user("What is the capital of France?")], true);
//! let ids = tok.encode(&prompt, true)?;
//! let mut stream = tok.stream(true);
//! for &id in &ids {
//!     print!("{}", stream.push(id)?);
//! }
//! print!("{}", stream.finish()?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod chat;
mod codec;
mod error;
mod from_gguf;
mod from_json;
mod pretokenize;
mod stream;

pub use chat::{chatml_prompt, ChatMessage, Role, SMOLLM2_DEFAULT_SYSTEM};
pub use codec::Tokenizer;
pub use error::TokenizerError;
pub use from_gguf::token_type;
pub use pretokenize::PreTokenizerStyle;
pub use stream::TokenStream;
