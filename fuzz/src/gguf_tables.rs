//! A GGUF file built from the fuzzer's bytes, for the code that raw bytes rarely reach: a valid
//! header whose counts tell the truth unless the input chooses a lie, metadata of every value
//! type (nested arrays, the model and tokenizer keys), and a tensor table of hostile entries:
//! dimensions from the edges (0, 1, block sizes, 2^31, 2^40, 2^62, `u64::MAX`), type ids valid or
//! not, offsets aligned or not, data shorter than declared.

use arbitrary::{Result, Unstructured};
use burn_kvcompress::gguf::{GgmlType, GgufFile, MetadataArray, MetadataValue};

use crate::gguf::gguf_bytes;
use crate::gguf_writer::{GgufParts, RawTensorInfo};

/// Dimensions a hostile tensor table picks from, beside small arbitrary ones.
const EDGE_DIMS: [u64; 10] = [0, 1, 32, 256, 1 << 31, 1 << 32, 1 << 40, 1 << 62, u64::MAX / 2, u64::MAX];
/// Metadata keys the model and tokenizer readers look for (a random key would never hit them).
const KEYS: [&str; 14] = [
    "general.architecture",
    "general.alignment",
    "llama.embedding_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.feed_forward_length",
    "llama.block_count",
    "llama.context_length",
    "llama.attention.layer_norm_rms_epsilon",
    "tokenizer.ggml.model",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
];
/// Tensor names the model reader looks for.
const TENSORS: [&str; 4] = ["token_embd.weight", "output_norm.weight", "output.weight", "blk.0.attn_q.weight"];
/// The deepest array nesting generated (one past the reader's limit).
const MAX_DEPTH: u32 = 9;

/// Builds a GGUF file from `data`; if the reader accepts it and its counts told the truth, it must
/// list exactly the metadata and tensors written. Then the file goes through [`gguf_bytes`].
/// Accepted: the reader opened the file.
pub fn gguf_tables(data: &[u8]) -> bool {
    let mut u = Unstructured::new(data);
    let Ok(parts) = parts(&mut u) else {
        return false;
    };
    let bytes = parts.encode();
    let honest =
        parts.declared_tensors == parts.tensors.len() as u64 && parts.declared_kvs == parts.metadata.len() as u64;
    let opened = GgufFile::from_bytes(bytes.clone());
    if let (true, Ok(file)) = (honest, &opened) {
        assert_eq!(file.metadata().len(), parts.metadata.len());
        for (key, value) in &parts.metadata {
            // Debug forms compare NaNs as equal.
            assert_eq!(format!("{:?}", file.metadata().get(key)), format!("{:?}", Some(value)), "key {key:?}");
        }
        assert_eq!(file.tensor_infos().len(), parts.tensors.len());
        for (read, written) in file.tensor_infos().iter().zip(&parts.tensors) {
            assert_eq!(
                (&read.name, &read.dims, read.ggml_type.id(), read.offset),
                (&written.name, &written.dims, written.type_id, written.offset)
            );
        }
    }
    gguf_bytes(&bytes);
    opened.is_ok()
}

fn parts(u: &mut Unstructured<'_>) -> Result<GgufParts> {
    let version = *u.choose(&[3, 3, 3, 2, 1, 3u32.swap_bytes()])?;
    // One time in eight a count lies (a zero byte tells the truth, so zeros make a valid file).
    let lies = [u.int_in_range(0..=7u8)? == 7, u.int_in_range(0..=7u8)? == 7];
    let metadata = (0..u.int_in_range(0..=6)?).map(|_| Ok((key(u)?, value(u, 0)?))).collect::<Result<Vec<_>>>()?;
    let tensors = (0..u.int_in_range(0..=4)?).map(|_| tensor_info(u)).collect::<Result<Vec<_>>>()?;
    let mut parts = GgufParts::new(metadata, tensors, Vec::new());
    parts.version = version;
    if lies[0] {
        parts.declared_tensors = *u.choose(&EDGE_DIMS)?;
    }
    if lies[1] {
        parts.declared_kvs = *u.choose(&EDGE_DIMS)?;
    }
    // The data section: whatever the input has left.
    parts.data = u.bytes(u.len())?.to_vec();
    Ok(parts)
}

fn key(u: &mut Unstructured<'_>) -> Result<String> {
    match u.ratio(3, 4)? {
        true => Ok(u.choose(&KEYS)?.to_string()),
        false => u.arbitrary(),
    }
}

fn tensor_info(u: &mut Unstructured<'_>) -> Result<RawTensorInfo> {
    let name = match u.ratio(3, 4)? {
        true => u.choose(&TENSORS)?.to_string(),
        false => u.arbitrary()?,
    };
    let dims = (0..u.int_in_range(0..=5)?)
        .map(|_| match u.ratio(1, 3)? {
            true => Ok(*u.choose(&EDGE_DIMS)?),
            false => u.int_in_range(0..=600),
        })
        .collect::<Result<Vec<u64>>>()?;
    let type_id = match u.ratio(7, 8)? {
        true => u.choose(&GgmlType::ALL)?.id(),
        false => u.arbitrary()?,
    };
    let offset = match u.ratio(3, 4)? {
        true => u.int_in_range(0..=64)? * 32,
        false => u.arbitrary()?,
    };
    Ok(RawTensorInfo { name, dims, type_id, offset })
}

fn value(u: &mut Unstructured<'_>, depth: u32) -> Result<MetadataValue> {
    use MetadataValue as V;
    Ok(match u.int_in_range(0..=12)? {
        0 => V::U8(u.arbitrary()?),
        1 => V::I8(u.arbitrary()?),
        2 => V::U16(u.arbitrary()?),
        3 => V::I16(u.arbitrary()?),
        4 => V::U32(u.arbitrary()?),
        5 => V::I32(u.arbitrary()?),
        6 => V::F32(u.arbitrary()?),
        7 => V::Bool(u.arbitrary()?),
        8 => V::String(u.arbitrary()?),
        9 => V::U64(u.arbitrary()?),
        10 => V::I64(u.arbitrary()?),
        11 => V::F64(u.arbitrary()?),
        _ => V::Array(array(u, depth + 1)?),
    })
}

fn array(u: &mut Unstructured<'_>, depth: u32) -> Result<MetadataArray> {
    use MetadataArray as A;
    let n = u.int_in_range(0..=16)?;
    Ok(match u.int_in_range(0..=4)? {
        0 => A::String((0..n).map(|_| u.arbitrary()).collect::<Result<_>>()?),
        1 => A::I32((0..n).map(|_| u.arbitrary()).collect::<Result<_>>()?),
        2 => A::F32((0..n).map(|_| u.arbitrary()).collect::<Result<_>>()?),
        3 if depth < MAX_DEPTH => A::Array((0..n.min(2)).map(|_| array(u, depth + 1)).collect::<Result<_>>()?),
        _ => A::U64((0..n).map(|_| u.arbitrary()).collect::<Result<_>>()?),
    })
}
