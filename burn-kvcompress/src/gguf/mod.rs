//! GGUF reader: header and metadata parsing, tensor lookup, and exact dequantization of the
//! common ggml tensor types to f32.
//!
//! ```no_run
//! use burn_kvcompress::gguf::GgufFile;
//! let file = GgufFile::open("model.gguf")?;
//! let layers = file.get_u32("llama.block_count")?;
//! let (wq, shape) = file.tensor_f32("blk.0.attn_q.weight")?; // shape = [out, in]
//! # Ok::<(), burn_kvcompress::gguf::GgufError>(())
//! ```

mod dequant;
mod dequant_k;
mod dequant_legacy;
mod error;
mod file;
mod ggml_type;
mod metadata;
mod parse;
mod reader;
mod tensor;
mod value;

pub use dequant::{dequantize, is_supported};
pub use error::GgufError;
pub use file::GgufFile;
pub use ggml_type::{GgmlType, QK_K};
pub use parse::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC};
pub use reader::MAX_ARRAY_DEPTH;
pub use tensor::{TensorInfo, MAX_DIMS};
pub use value::{MetadataArray, MetadataValue, ValueType};
