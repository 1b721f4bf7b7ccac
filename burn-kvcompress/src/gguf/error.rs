//! The error type of the GGUF reader.

use super::ggml_type::GgmlType;

/// Everything that can go wrong while reading a GGUF file.
///
/// Every length read from the file is checked against the bytes that remain before anything is
/// allocated, so a hostile file yields one of these errors rather than a panic or a huge
/// allocation.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Reading or memory-mapping the file failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The file does not start with the four bytes `GGUF`.
    #[error("bad magic {found:02x?}: not a GGUF file")]
    BadMagic {
        /// The first four bytes of the file.
        found: [u8; 4],
    },
    /// The version field reads as a supported version only when byte-swapped: a big-endian file.
    #[error("big-endian GGUF (version field {raw:#010x}) is not supported")]
    BigEndian {
        /// The version field as read little-endian.
        raw: u32,
    },
    /// A GGUF version other than 2 or 3.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends before a field that should be there.
    #[error("file truncated while reading {what} at offset {offset}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Byte offset at which the read started.
        offset: u64,
    },
    /// A string in the header is not valid UTF-8.
    #[error("invalid UTF-8 in string at offset {offset}")]
    InvalidUtf8 {
        /// Byte offset of the string's bytes.
        offset: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("unknown metadata value type {0}")]
    UnknownValueType(u32),
    /// A tensor type id that ggml does not define.
    #[error("unknown ggml tensor type id {0}")]
    UnknownTensorType(u32),
    /// A tensor type that ggml defines but this crate cannot dequantize.
    #[error("tensor type {0} is not supported for dequantization")]
    UnsupportedTensorType(GgmlType),
    /// A length, count or nesting depth in the file exceeds what the file can hold or a fixed cap.
    #[error("{what} {len} exceeds the limit {limit}")]
    LengthTooLarge {
        /// Which length field.
        what: &'static str,
        /// The value found in the file.
        len: u64,
        /// The largest value accepted at that point.
        limit: u64,
    },
    /// A size computation (element count, byte size, offset) overflows.
    #[error("size overflow while computing {what}")]
    SizeOverflow {
        /// What was being computed.
        what: String,
    },
    /// The same metadata key appears twice.
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    /// The same tensor name appears twice.
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    /// `general.alignment` is zero or not a power of two.
    #[error("invalid alignment {0} (must be a non-zero power of two)")]
    BadAlignment(u64),
    /// A metadata key that was asked for is absent.
    #[error("missing metadata key {0:?}")]
    MissingKey(String),
    /// A metadata key holds a value of another type than the one asked for.
    #[error("metadata key {key:?}: expected {expected}, found {found}")]
    WrongValueType {
        /// The key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The type stored.
        found: &'static str,
    },
    /// An integer metadata value does not fit the integer type asked for.
    #[error("metadata key {key:?}: value does not fit in {expected}")]
    ValueOutOfRange {
        /// The key.
        key: String,
        /// The type asked for.
        expected: &'static str,
    },
    /// A tensor that was asked for is absent.
    #[error("missing tensor {0:?}")]
    MissingTensor(String),
    /// A tensor's data offset is not a multiple of the file's alignment.
    #[error("tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// Tensor name.
        name: String,
        /// Its offset relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor's bytes lie (partly) beyond the end of the file.
    #[error("tensor {name:?}: bytes {start}..{end} lie beyond the end of the file ({file_len} bytes)")]
    TensorOutOfBounds {
        /// Tensor name.
        name: String,
        /// Absolute start offset of its data.
        start: u64,
        /// Absolute end offset of its data.
        end: u64,
        /// File length.
        file_len: u64,
    },
    /// Element counts and byte counts disagree (for example a first dimension that is not a
    /// multiple of the block size, or a byte slice of the wrong length).
    #[error("shape mismatch in {what}: expected {expected}, found {found}")]
    ShapeMismatch {
        /// What was being checked.
        what: String,
        /// The expected count.
        expected: u64,
        /// The count found.
        found: u64,
    },
}
