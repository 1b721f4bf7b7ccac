//! Parsing of the GGUF header: magic, version, metadata and tensor infos.

use std::collections::{BTreeMap, HashMap};

use super::error::GgufError;
use super::ggml_type::GgmlType;
use super::reader::ByteReader;
use super::tensor::{TensorInfo, MAX_DIMS};
use super::value::{MetadataValue, ValueType};

/// The four bytes every GGUF file starts with.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Data-section alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// The metadata key that overrides the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// Smallest encoding of one tensor info: name length (8), n_dims (4), type (4), offset (8).
const MIN_TENSOR_INFO_SIZE: u64 = 24;
/// Smallest encoding of one metadata pair: key length (8), value type (4), a one-byte value.
const MIN_KV_SIZE: u64 = 13;

/// Everything the header says.
pub(crate) struct Header {
    pub version: u32,
    pub metadata: BTreeMap<String, MetadataValue>,
    pub tensors: Vec<TensorInfo>,
    pub index: HashMap<String, usize>,
    pub alignment: u64,
    pub data_offset: u64,
}

/// Parses and validates the header of the GGUF file `buf`, including that every tensor's bytes
/// lie inside `buf`.
pub(crate) fn parse_header(buf: &[u8]) -> Result<Header, GgufError> {
    let mut r = ByteReader::new(buf);
    let magic = r.take(4, "magic")?;
    if magic != GGUF_MAGIC {
        let mut found = [0u8; 4];
        found.copy_from_slice(magic);
        return Err(GgufError::BadMagic { found });
    }
    let version = r.u32("version")?;
    match version {
        2 | 3 => {}
        v if (1..=3).contains(&v.swap_bytes()) => return Err(GgufError::BigEndian { raw: v }),
        v => return Err(GgufError::UnsupportedVersion(v)),
    }
    let n_tensors = r.u64("tensor count")?;
    let n_kv = r.u64("metadata kv count")?;
    let n_tensors = r.check_count("tensor count", n_tensors, MIN_TENSOR_INFO_SIZE)?;
    let n_kv = r.check_count("metadata kv count", n_kv, MIN_KV_SIZE)?;

    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = r.string("metadata key length")?;
        let ty = ValueType::from_id(r.u32("metadata value type")?)?;
        let value = r.value(ty, 0)?;
        if metadata.contains_key(&key) {
            return Err(GgufError::DuplicateKey(key));
        }
        metadata.insert(key, value);
    }
    let alignment = alignment(&metadata)?;

    let mut tensors = Vec::with_capacity(n_tensors);
    let mut index = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let info = tensor_info(&mut r)?;
        if index.insert(info.name.clone(), i).is_some() {
            return Err(GgufError::DuplicateTensor(info.name));
        }
        tensors.push(info);
    }

    let data_offset = r
        .pos()
        .checked_next_multiple_of(alignment)
        .ok_or_else(|| GgufError::SizeOverflow { what: "data section offset".into() })?;
    for info in &tensors {
        check_bounds(info, data_offset, alignment, buf.len() as u64)?;
    }
    Ok(Header { version, metadata, tensors, index, alignment, data_offset })
}

/// `general.alignment` (any integer type), or the default of 32.
fn alignment(metadata: &BTreeMap<String, MetadataValue>) -> Result<u64, GgufError> {
    let Some(v) = metadata.get(ALIGNMENT_KEY) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let Some(a) = v.as_integer() else {
        return Err(GgufError::WrongValueType {
            key: ALIGNMENT_KEY.into(),
            expected: "u32",
            found: v.value_type().name(),
        });
    };
    match u64::try_from(a) {
        Ok(a) if a.is_power_of_two() => Ok(a),
        _ => Err(GgufError::BadAlignment(a.clamp(0, u64::MAX as i128) as u64)),
    }
}

/// One tensor info: name, n_dims, dims, type, offset.
fn tensor_info(r: &mut ByteReader<'_>) -> Result<TensorInfo, GgufError> {
    let name = r.string("tensor name length")?;
    let n_dims = r.u32("tensor n_dims")?;
    if n_dims as usize > MAX_DIMS {
        return Err(GgufError::LengthTooLarge { what: "tensor n_dims", len: n_dims.into(), limit: MAX_DIMS as u64 });
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        dims.push(r.u64("tensor dimension")?);
    }
    let ggml_type = GgmlType::from_id(r.u32("tensor type")?)?;
    let offset = r.u64("tensor offset")?;
    Ok(TensorInfo { name, dims, ggml_type, offset })
}

/// Checks alignment, size overflow, and that the tensor's bytes lie inside the file.
fn check_bounds(info: &TensorInfo, data_offset: u64, alignment: u64, file_len: u64) -> Result<(), GgufError> {
    if !info.offset.is_multiple_of(alignment) {
        return Err(GgufError::MisalignedTensor { name: info.name.clone(), offset: info.offset, alignment });
    }
    let size = info.checked_byte_size()?;
    let overflow = || GgufError::SizeOverflow { what: format!("data range of tensor {:?}", info.name) };
    let start = data_offset.checked_add(info.offset).ok_or_else(overflow)?;
    let end = start.checked_add(size).ok_or_else(overflow)?;
    if end > file_len {
        return Err(GgufError::TensorOutOfBounds { name: info.name.clone(), start, end, file_len });
    }
    Ok(())
}
