//! [`GgufFile`]: an opened GGUF file (memory-mapped or owned bytes) and its tensors.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::Path;

use super::dequant::dequantize;
use super::error::GgufError;
use super::parse::parse_header;
use super::tensor::TensorInfo;
use super::value::MetadataValue;

/// The bytes behind a [`GgufFile`].
enum Storage {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// Maps `file` read-only into memory.
///
/// # Safety (why the `unsafe` is sound here)
/// `memmap2::Mmap::map` is `unsafe` because the mapping aliases the file: if another process
/// truncates or rewrites the file while it is mapped, reads through the slice may see changed
/// bytes or fault. The file is opened read-only, the mapping is never written through, and model
/// files are treated as immutable while loaded; every header field is still bounds-checked when
/// parsed, so a file that is *consistently* malformed cannot cause out-of-bounds reads.
#[allow(unsafe_code)]
fn map_readonly(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: see the function documentation: read-only mapping of a file assumed immutable.
    unsafe { memmap2::Mmap::map(file) }
}

/// An opened GGUF file (versions 2 and 3, little-endian).
///
/// The header (metadata and tensor infos) is parsed and validated when the file is opened;
/// tensor data is read on demand from the mapped or owned bytes.
pub struct GgufFile {
    storage: Storage,
    version: u32,
    metadata: BTreeMap<String, MetadataValue>,
    tensors: Vec<TensorInfo>,
    index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.version)
            .field("len", &self.storage.bytes().len())
            .field("n_metadata", &self.metadata.len())
            .field("n_tensors", &self.tensors.len())
            .field("alignment", &self.alignment)
            .finish()
    }
}

impl GgufFile {
    /// Opens and memory-maps the GGUF file at `path`, parsing its header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let file = File::open(path.as_ref())?;
        let map = map_readonly(&file)?;
        Self::from_storage(Storage::Mapped(map))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::from_storage(Storage::Owned(bytes))
    }

    fn from_storage(storage: Storage) -> Result<Self, GgufError> {
        let h = parse_header(storage.bytes())?;
        Ok(Self {
            storage,
            version: h.version,
            metadata: h.metadata,
            tensors: h.tensors,
            index: h.index,
            alignment: h.alignment,
            data_offset: h.data_offset,
        })
    }

    /// GGUF format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Data-section alignment (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Absolute offset of the data section in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// All metadata key/value pairs, sorted by key.
    pub fn metadata(&self) -> &BTreeMap<String, MetadataValue> {
        &self.metadata
    }

    /// All tensor infos, in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of tensor `name`, or [`GgufError::MissingTensor`].
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.index.get(name).map(|&i| &self.tensors[i]).ok_or_else(|| GgufError::MissingTensor(name.to_string()))
    }

    /// The raw (possibly quantized) bytes of tensor `name`.
    pub fn tensor_data(&self, name: &str) -> Result<&[u8], GgufError> {
        let info = self.tensor_info(name)?;
        // Bounds and sizes were checked when the header was parsed.
        let start = (self.data_offset + info.offset) as usize;
        let end = start + info.byte_size() as usize;
        Ok(&self.storage.bytes()[start..end])
    }

    /// Tensor `name` dequantized to f32, with its row-major shape, outermost dimension first
    /// (the reverse of GGUF's `ne`): a weight stored with `ne = [in, out]` comes back with shape
    /// `[out, in]`, element `(o, i)` at index `o * in + i`.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<f32>, Vec<usize>), GgufError> {
        let info = self.tensor_info(name)?;
        let data = self.tensor_data(name)?;
        let values = dequantize(info.ggml_type, data, info.n_elements() as usize)?;
        Ok((values, info.shape()))
    }
}
