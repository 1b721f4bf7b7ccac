//! A bounds-checked little-endian cursor over the file bytes, and metadata value decoding.
//!
//! Every length field is checked against the bytes that remain before anything is allocated.

use super::error::GgufError;
use super::value::{MetadataArray, MetadataValue, ValueType};

/// Deepest nesting of arrays inside arrays that is accepted (a deeper file could otherwise
/// exhaust the stack through recursion).
pub const MAX_ARRAY_DEPTH: u64 = 8;

/// Little-endian cursor over a byte slice.
pub(crate) struct ByteReader<'a> {
    buf: &'a [u8],
    pos: usize,
}

macro_rules! read_prim {
    ($name:ident, $t:ty) => {
        pub(crate) fn $name(&mut self, what: &'static str) -> Result<$t, GgufError> {
            let bytes = self.take(std::mem::size_of::<$t>() as u64, what)?;
            let mut arr = [0u8; std::mem::size_of::<$t>()];
            arr.copy_from_slice(bytes);
            Ok(<$t>::from_le_bytes(arr))
        }
    };
}

impl<'a> ByteReader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Current offset from the start of the file.
    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the current offset.
    pub(crate) fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// The next `n` bytes, or [`GgufError::Truncated`].
    pub(crate) fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], GgufError> {
        if n > self.remaining() {
            return Err(GgufError::Truncated { what, offset: self.pos() });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.buf[start..self.pos])
    }

    read_prim!(u8, u8);
    read_prim!(i8, i8);
    read_prim!(u16, u16);
    read_prim!(i16, i16);
    read_prim!(u32, u32);
    read_prim!(i32, i32);
    read_prim!(u64, u64);
    read_prim!(i64, i64);
    read_prim!(f32, f32);
    read_prim!(f64, f64);

    /// A count of items that each take at least `min_item_size` bytes: rejected with
    /// [`GgufError::LengthTooLarge`] if the rest of the file cannot hold that many.
    pub(crate) fn count(&mut self, what: &'static str, min_item_size: u64) -> Result<usize, GgufError> {
        let n = self.u64(what)?;
        self.check_count(what, n, min_item_size)
    }

    /// Checks a count read earlier against the bytes that remain now (see [`Self::count`]).
    pub(crate) fn check_count(&self, what: &'static str, n: u64, min_item_size: u64) -> Result<usize, GgufError> {
        let limit = self.remaining() / min_item_size.max(1);
        if n > limit {
            return Err(GgufError::LengthTooLarge { what, len: n, limit });
        }
        // `n <= remaining <= usize::MAX`, so the cast is lossless.
        Ok(n as usize)
    }

    /// A GGUF string: u64 length, then that many UTF-8 bytes.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<String, GgufError> {
        let len = self.count(what, 1)?;
        let offset = self.pos();
        let bytes = self.take(len as u64, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 { offset })
    }

    /// A value of type `ty`; `depth` is the current array nesting depth.
    pub(crate) fn value(&mut self, ty: ValueType, depth: u64) -> Result<MetadataValue, GgufError> {
        use MetadataValue as V;
        Ok(match ty {
            ValueType::U8 => V::U8(self.u8("u8 value")?),
            ValueType::I8 => V::I8(self.i8("i8 value")?),
            ValueType::U16 => V::U16(self.u16("u16 value")?),
            ValueType::I16 => V::I16(self.i16("i16 value")?),
            ValueType::U32 => V::U32(self.u32("u32 value")?),
            ValueType::I32 => V::I32(self.i32("i32 value")?),
            ValueType::F32 => V::F32(self.f32("f32 value")?),
            ValueType::Bool => V::Bool(self.u8("bool value")? != 0),
            ValueType::String => V::String(self.string("string length")?),
            ValueType::Array => V::Array(self.array(depth + 1)?),
            ValueType::U64 => V::U64(self.u64("u64 value")?),
            ValueType::I64 => V::I64(self.i64("i64 value")?),
            ValueType::F64 => V::F64(self.f64("f64 value")?),
        })
    }

    /// An array body: element type, length, elements.
    fn array(&mut self, depth: u64) -> Result<MetadataArray, GgufError> {
        if depth > MAX_ARRAY_DEPTH {
            return Err(GgufError::LengthTooLarge { what: "array nesting depth", len: depth, limit: MAX_ARRAY_DEPTH });
        }
        let elem = ValueType::from_id(self.u32("array element type")?)?;
        let n = self.count("array length", elem.min_encoded_size())?;
        macro_rules! prims {
            ($variant:ident, $read:ident, $what:literal) => {{
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.$read($what)?);
                }
                MetadataArray::$variant(v)
            }};
        }
        Ok(match elem {
            ValueType::U8 => prims!(U8, u8, "u8 element"),
            ValueType::I8 => prims!(I8, i8, "i8 element"),
            ValueType::U16 => prims!(U16, u16, "u16 element"),
            ValueType::I16 => prims!(I16, i16, "i16 element"),
            ValueType::U32 => prims!(U32, u32, "u32 element"),
            ValueType::I32 => prims!(I32, i32, "i32 element"),
            ValueType::F32 => prims!(F32, f32, "f32 element"),
            ValueType::U64 => prims!(U64, u64, "u64 element"),
            ValueType::I64 => prims!(I64, i64, "i64 element"),
            ValueType::F64 => prims!(F64, f64, "f64 element"),
            ValueType::Bool => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.u8("bool element")? != 0);
                }
                MetadataArray::Bool(v)
            }
            ValueType::String => prims!(String, string, "string length"),
            ValueType::Array => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array(depth + 1)?);
                }
                MetadataArray::Array(v)
            }
        })
    }
}
