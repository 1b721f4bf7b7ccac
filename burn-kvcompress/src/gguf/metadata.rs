//! Typed metadata getters on [`GgufFile`].

use super::error::GgufError;
use super::file::GgufFile;
use super::value::{MetadataArray, MetadataValue, ValueType};

/// Name of an array type for error messages, e.g. `"array of string"`.
fn array_name(elem: ValueType) -> &'static str {
    match elem {
        ValueType::U8 => "array of u8",
        ValueType::I8 => "array of i8",
        ValueType::U16 => "array of u16",
        ValueType::I16 => "array of i16",
        ValueType::U32 => "array of u32",
        ValueType::I32 => "array of i32",
        ValueType::F32 => "array of f32",
        ValueType::Bool => "array of bool",
        ValueType::String => "array of string",
        ValueType::Array => "array of array",
        ValueType::U64 => "array of u64",
        ValueType::I64 => "array of i64",
        ValueType::F64 => "array of f64",
    }
}

fn found_name(v: &MetadataValue) -> &'static str {
    match v {
        MetadataValue::Array(a) => array_name(a.elem_type()),
        other => other.value_type().name(),
    }
}

fn wrong(key: &str, expected: &'static str, v: &MetadataValue) -> GgufError {
    GgufError::WrongValueType { key: key.to_string(), expected, found: found_name(v) }
}

impl GgufFile {
    /// The raw value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata().get(key)
    }

    fn require(&self, key: &str) -> Result<&MetadataValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey(key.to_string()))
    }

    /// `key` as a `u32`: any integer type is accepted if the value fits.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        let v = self.require(key)?;
        let i = v.as_integer().ok_or_else(|| wrong(key, "integer", v))?;
        u32::try_from(i).map_err(|_| GgufError::ValueOutOfRange { key: key.to_string(), expected: "u32" })
    }

    /// `key` as a `u64`: any integer type is accepted if the value fits.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        let v = self.require(key)?;
        let i = v.as_integer().ok_or_else(|| wrong(key, "integer", v))?;
        u64::try_from(i).map_err(|_| GgufError::ValueOutOfRange { key: key.to_string(), expected: "u64" })
    }

    /// `key` as an `f32`: `f32` values as stored, `f64` values rounded to `f32`.
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        let v = self.require(key)?;
        match *v {
            MetadataValue::F32(x) => Ok(x),
            MetadataValue::F64(x) => Ok(x as f32),
            _ => Err(wrong(key, "float", v)),
        }
    }

    /// `key` as a string.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| wrong(key, "string", v))
    }

    /// `key` as a boolean.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        match self.require(key)? {
            MetadataValue::Bool(b) => Ok(*b),
            v => Err(wrong(key, "bool", v)),
        }
    }

    /// `key` as an array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<&[String], GgufError> {
        match self.require(key)? {
            MetadataValue::Array(MetadataArray::String(v)) => Ok(v),
            v => Err(wrong(key, "array of string", v)),
        }
    }

    /// `key` as an array of `i32` (any integer element type is accepted if every element fits).
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        let v = self.require(key)?;
        match v {
            MetadataValue::Array(MetadataArray::I32(a)) => Ok(a.clone()),
            MetadataValue::Array(a) => {
                let ints = a.integers().ok_or_else(|| wrong(key, "array of i32", v))?;
                ints.into_iter()
                    .map(i32::try_from)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|_| GgufError::ValueOutOfRange { key: key.to_string(), expected: "i32" })
            }
            _ => Err(wrong(key, "array of i32", v)),
        }
    }

    /// Like [`get_u32`](Self::get_u32), but `Ok(None)` when the key is absent.
    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.get(key).map(|_| self.get_u32(key)).transpose()
    }

    /// Like [`get_f32`](Self::get_f32), but `Ok(None)` when the key is absent.
    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        self.get(key).map(|_| self.get_f32(key)).transpose()
    }

    /// Like [`get_str`](Self::get_str), but `Ok(None)` when the key is absent.
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get(key).map(|_| self.get_str(key)).transpose()
    }

    /// Like [`get_bool`](Self::get_bool), but `Ok(None)` when the key is absent.
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.get(key).map(|_| self.get_bool(key)).transpose()
    }
}
