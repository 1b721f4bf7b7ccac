//! Little-endian payload fields: a writer, and a bounds-checked reader whose every failure is a
//! [`MessageError`] instead of a panic.

/// A payload whose fields do not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The payload ends inside a field.
    #[error("payload truncated: `{field}` needs {needed} bytes, {left} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the payload.
        left: usize,
    },
    /// Bytes remain after the last field.
    #[error("{0} unexpected bytes after the message")]
    Trailing(usize),
    /// A field holds a value this side does not accept.
    #[error("invalid `{field}`: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// Appends little-endian fields to a payload.
#[derive(Debug, Default)]
pub struct PayloadWriter {
    bytes: Vec<u8>,
}

impl PayloadWriter {
    /// An empty payload.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes.push(v);
        self
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends raw bytes with a `u32` length prefix.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.bytes.extend_from_slice(v);
        self
    }

    /// Appends a string with a `u32` length prefix.
    pub fn str(&mut self, v: &str) -> &mut Self {
        self.bytes(v.as_bytes())
    }

    /// The payload.
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

/// Reads little-endian fields from a payload, checking every length against what is left.
#[derive(Debug)]
pub struct PayloadReader<'a> {
    rest: &'a [u8],
    /// Bytes of the whole payload.
    len: usize,
}

impl<'a> PayloadReader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes, len: bytes.len() }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.len - self.rest.len()
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, field: &'static str, n: usize) -> Result<&'a [u8], MessageError> {
        if self.rest.len() < n {
            return Err(MessageError::Truncated { field, needed: n, left: self.rest.len() });
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// Reads a byte.
    pub fn u8(&mut self, field: &'static str) -> Result<u8, MessageError> {
        Ok(self.take(field, 1)?[0])
    }

    /// Reads a `u32`.
    pub fn u32(&mut self, field: &'static str) -> Result<u32, MessageError> {
        Ok(u32::from_le_bytes(self.take(field, 4)?.try_into().expect("4 bytes")))
    }

    /// Reads a `u64`.
    pub fn u64(&mut self, field: &'static str) -> Result<u64, MessageError> {
        Ok(u64::from_le_bytes(self.take(field, 8)?.try_into().expect("8 bytes")))
    }

    /// Reads a `u32`-length-prefixed byte string (bounded by what is left, never pre-allocated).
    pub fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], MessageError> {
        let n = self.u32(field)? as usize;
        self.take(field, n)
    }

    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self, field: &'static str) -> Result<String, MessageError> {
        let raw = self.bytes(field)?;
        String::from_utf8(raw.to_vec()).map_err(|_| MessageError::Invalid { field, reason: "not UTF-8".into() })
    }

    /// Reads a count of items of `item_size` bytes each, checked against the bytes left so a
    /// hostile count cannot trigger a large allocation.
    pub fn count(&mut self, field: &'static str, item_size: usize) -> Result<usize, MessageError> {
        let n = self.u32(field)? as usize;
        let needed = n.saturating_mul(item_size);
        if needed > self.rest.len() {
            return Err(MessageError::Truncated { field, needed, left: self.rest.len() });
        }
        Ok(n)
    }

    /// The bytes not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.rest)
    }

    /// Fails if bytes remain.
    pub fn end(&self) -> Result<(), MessageError> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(MessageError::Trailing(n)),
        }
    }
}
