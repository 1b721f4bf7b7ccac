//! GGUF bytes from parts, with the header's counts free to lie: what the structure-aware target
//! and the seed corpus write.

use burn_kvcompress::gguf::{MetadataArray, MetadataValue, ValueType};

/// One tensor info as written: any type id, any offset.
#[derive(Debug, Clone)]
pub(crate) struct RawTensorInfo {
    pub name: String,
    /// GGUF `ne` order (innermost first).
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub offset: u64,
}

/// The parts of a GGUF file.
#[derive(Debug, Clone)]
pub(crate) struct GgufParts {
    pub version: u32,
    /// The tensor count written (the true one unless the input lies).
    pub declared_tensors: u64,
    /// The metadata count written.
    pub declared_kvs: u64,
    pub metadata: Vec<(String, MetadataValue)>,
    pub tensors: Vec<RawTensorInfo>,
    /// Padding of the header up to the data section.
    pub alignment: usize,
    pub data: Vec<u8>,
}

impl GgufParts {
    /// Parts whose counts are the true ones, version 3, the default alignment.
    pub fn new(metadata: Vec<(String, MetadataValue)>, tensors: Vec<RawTensorInfo>, data: Vec<u8>) -> Self {
        let (declared_tensors, declared_kvs) = (tensors.len() as u64, metadata.len() as u64);
        Self { version: 3, declared_tensors, declared_kvs, metadata, tensors, alignment: 32, data }
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.version.to_le_bytes());
        out.extend(self.declared_tensors.to_le_bytes());
        out.extend(self.declared_kvs.to_le_bytes());
        for (key, value) in &self.metadata {
            write_str(&mut out, key);
            out.extend((value.value_type() as u32).to_le_bytes());
            write_value(&mut out, value);
        }
        for t in &self.tensors {
            write_str(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            t.dims.iter().for_each(|d| out.extend(d.to_le_bytes()));
            out.extend(t.type_id.to_le_bytes());
            out.extend(t.offset.to_le_bytes());
        }
        out.resize(out.len().next_multiple_of(self.alignment.max(1)), 0);
        out.extend(&self.data);
        out
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &MetadataValue) {
    use MetadataValue as V;
    match value {
        V::U8(x) => out.push(*x),
        V::I8(x) => out.extend(x.to_le_bytes()),
        V::U16(x) => out.extend(x.to_le_bytes()),
        V::I16(x) => out.extend(x.to_le_bytes()),
        V::U32(x) => out.extend(x.to_le_bytes()),
        V::I32(x) => out.extend(x.to_le_bytes()),
        V::F32(x) => out.extend(x.to_le_bytes()),
        V::Bool(x) => out.push(u8::from(*x)),
        V::String(s) => write_str(out, s),
        V::Array(a) => write_array(out, a),
        V::U64(x) => out.extend(x.to_le_bytes()),
        V::I64(x) => out.extend(x.to_le_bytes()),
        V::F64(x) => out.extend(x.to_le_bytes()),
    }
}

/// An array body: element type, length, elements.
fn write_array(out: &mut Vec<u8>, array: &MetadataArray) {
    use MetadataArray as A;
    fn all<T>(out: &mut Vec<u8>, ty: ValueType, items: &[T], mut write: impl FnMut(&mut Vec<u8>, &T)) {
        out.extend((ty as u32).to_le_bytes());
        out.extend((items.len() as u64).to_le_bytes());
        items.iter().for_each(|item| write(out, item));
    }
    match array {
        A::U8(v) => all(out, ValueType::U8, v, |o, x| o.push(*x)),
        A::I8(v) => all(out, ValueType::I8, v, |o, x| o.extend(x.to_le_bytes())),
        A::U16(v) => all(out, ValueType::U16, v, |o, x| o.extend(x.to_le_bytes())),
        A::I16(v) => all(out, ValueType::I16, v, |o, x| o.extend(x.to_le_bytes())),
        A::U32(v) => all(out, ValueType::U32, v, |o, x| o.extend(x.to_le_bytes())),
        A::I32(v) => all(out, ValueType::I32, v, |o, x| o.extend(x.to_le_bytes())),
        A::F32(v) => all(out, ValueType::F32, v, |o, x| o.extend(x.to_le_bytes())),
        A::Bool(v) => all(out, ValueType::Bool, v, |o, x| o.push(u8::from(*x))),
        A::String(v) => all(out, ValueType::String, v, |o, s| write_str(o, s)),
        A::Array(v) => all(out, ValueType::Array, v, write_array),
        A::U64(v) => all(out, ValueType::U64, v, |o, x| o.extend(x.to_le_bytes())),
        A::I64(v) => all(out, ValueType::I64, v, |o, x| o.extend(x.to_le_bytes())),
        A::F64(v) => all(out, ValueType::F64, v, |o, x| o.extend(x.to_le_bytes())),
    }
}
