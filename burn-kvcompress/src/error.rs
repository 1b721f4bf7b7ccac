//! Typed errors of the core crate.

use std::path::PathBuf;

/// Errors raised while loading a model (configuration, weights or tokenizer).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The GGUF file is malformed or unsupported.
    #[error("GGUF: {0}")]
    Gguf(#[from] crate::gguf::GgufError),
    /// The tokenizer could not be built.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// A JSON configuration file is malformed.
    #[error("malformed JSON in {path}: {source}")]
    Json {
        /// The file that failed to parse.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// The safetensors file is malformed.
    #[error("safetensors: {0}")]
    Safetensors(String),
    /// The file describes an architecture this crate does not implement.
    #[error("unsupported architecture `{0}` (supported: llama, mistral)")]
    UnsupportedArchitecture(String),
    /// The configuration is inconsistent or unsupported.
    #[error("invalid model configuration: {0}")]
    InvalidConfig(String),
    /// The configuration implies a tensor larger than the loader accepts (a corrupt or hostile
    /// file): refused before anything is allocated.
    #[error("{what} would hold {elements} elements, more than the limit of {limit}")]
    TooLarge {
        /// Which tensor, and the fields that size it.
        what: &'static str,
        /// The elements the configuration implies.
        elements: u128,
        /// The most accepted.
        limit: u128,
    },
    /// A weight the architecture needs is absent from the file.
    #[error("missing weight `{0}`")]
    MissingWeight(String),
    /// A weight has a shape other than the configuration implies.
    #[error("weight `{name}` has shape {found:?}, expected {expected:?}")]
    WeightShape {
        /// The weight's name in the file.
        name: String,
        /// The shape the configuration implies (outermost first).
        expected: Vec<usize>,
        /// The shape found in the file (outermost first).
        found: Vec<usize>,
    },
    /// A weight's element type cannot be converted to floating point.
    #[error("weight `{name}` has unsupported dtype {dtype}")]
    UnsupportedDtype {
        /// The weight's name in the file.
        name: String,
        /// The dtype found.
        dtype: String,
    },
}

/// Errors raised by a KV cache when given inputs of the wrong shape or configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// A tensor does not have the shape the cache was built for.
    #[error("{what}: shape {found:?}, expected {expected}")]
    Shape {
        /// Which argument was wrong.
        what: &'static str,
        /// What the cache expected, in words.
        expected: String,
        /// The shape received.
        found: Vec<usize>,
    },
    /// The attention options do not fit the cache (e.g. more queries than cached tokens).
    #[error("invalid attention request: {0}")]
    Request(String),
    /// The cache would exceed its configured capacity.
    #[error("cache capacity exceeded: {len} + {new} tokens > {capacity}")]
    Capacity {
        /// Tokens already cached.
        len: usize,
        /// Tokens being appended.
        new: usize,
        /// The configured capacity.
        capacity: usize,
    },
    /// The scheme cannot run with this model geometry.
    #[error("unsupported configuration: {0}")]
    Unsupported(String),
    /// A compressed state does not fit the cache it should rebuild (names, dtypes, shapes, sizes).
    #[error("invalid cache state: {0}")]
    State(String),
}

/// Errors raised while running a model (generation, evaluation).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The KV cache rejected an operation.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The input is not valid for this model (empty prompt, token id out of range, ...).
    #[error("invalid input: {0}")]
    Input(String),
    /// Tokenization or detokenization failed.
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    /// The backend cannot run the model as asked (weights in a float type it has no arithmetic
    /// for).
    #[error("unsupported: {0}")]
    Unsupported(String),
}
