//! A layer's state as one self-describing byte buffer, the unit cut into blocks:
//!
//! ```text
//! tokens: u64, tensors: u32, then per tensor:
//!   name: u32 length + UTF-8, dtype: u8 (StateDType::id), rank: u8, dims: u64 each,
//!   data: u32 length, zero bytes up to the next multiple of DATA_ALIGN, little-endian bytes
//! ```
//!
//! Each tensor's data starts at a multiple of [`DATA_ALIGN`] bytes of the serialization, so a
//! receiver whose buffer starts aligned holds every tensor aligned for its values: an upload
//! reads it where it landed (`StateTensor::to_float_as` and `to_int` copy misaligned bytes first).
//!
//! Decoding checks every length against the buffer and every tensor's size against its shape
//! (`StateTensor::validate`), so a received state is sound before it touches a device. Neither
//! direction copies tensor data: encoding keeps the tensors' shared buffers as parts, decoding
//! slices the received buffer.

use burn_kvcompress::cache::{Bytes, LayerState, StateDType, StateTensor};

use crate::transport::Slices;
use crate::wire::{MessageError, PayloadReader, PayloadWriter};

/// The largest tensor rank accepted.
pub const MAX_RANK: usize = 8;

/// Where each tensor's data may start: a multiple of this many bytes of the serialization.
pub const DATA_ALIGN: usize = 16;

/// A serialized layer state held as parts: small headers and the tensors' own shared byte
/// buffers (not copied). Byte ranges of the serialization are read as slices of the parts, so a
/// server sends blocks straight from the tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedState {
    parts: Vec<Bytes>,
    len: usize,
}

impl EncodedState {
    /// Serializes `state`, taking its tensors' buffers.
    pub fn new(state: LayerState) -> Self {
        let mut parts = Vec::with_capacity(2 * state.tensors.len() + 1);
        let mut w = PayloadWriter::new();
        w.u64(state.tokens as u64).u32(state.tensors.len() as u32);
        let mut at = 0;
        for t in state.tensors {
            w.str(&t.name).u8(t.dtype.id()).u8(t.shape.len() as u8);
            t.shape.iter().for_each(|&d| _ = w.u64(d as u64));
            w.u32(t.bytes.len() as u32);
            let mut header = w.finish();
            header.resize((at + header.len()).next_multiple_of(DATA_ALIGN) - at, 0);
            at += header.len() + t.bytes.len();
            parts.push(header.into());
            parts.push(t.bytes);
        }
        parts.push(w.finish().into());
        parts.retain(|p| !p.is_empty());
        let len = parts.iter().map(Bytes::len).sum();
        Self { parts, len }
    }

    /// Length of the serialization, bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the serialization is empty (never: it holds at least the token and tensor counts).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// CRC-32 of the serialization.
    pub fn crc(&self) -> u32 {
        let mut crc = crc32fast::Hasher::new();
        self.parts.iter().for_each(|p| crc.update(p));
        crc.finalize()
    }

    /// The serialization as one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        self.parts.concat()
    }
}

impl From<Bytes> for EncodedState {
    /// A serialization already in one buffer.
    fn from(bytes: Bytes) -> Self {
        let len = bytes.len();
        Self { parts: vec![bytes].into_iter().filter(|p| !p.is_empty()).collect(), len }
    }
}

impl Slices for EncodedState {
    /// The slices that make up bytes `[start, end)` of the serialization.
    fn slices(&self, start: usize, end: usize) -> Vec<&[u8]> {
        let mut out = Vec::new();
        let mut at = 0;
        for part in &self.parts {
            let (lo, hi) = (start.max(at), end.min(at + part.len()));
            if lo < hi {
                out.push(&part[lo - at..hi - at]);
            }
            at += part.len();
        }
        out
    }
}

/// Serializes a layer's state into one buffer.
pub fn encode_state(state: &LayerState) -> Vec<u8> {
    EncodedState::new(state.clone()).to_vec()
}

/// Parses and validates a serialized layer state; its tensors' bytes are slices of `bytes`.
pub fn decode_state(bytes: Bytes) -> Result<LayerState, MessageError> {
    let invalid = |field, reason: String| MessageError::Invalid { field, reason };
    let mut r = PayloadReader::new(&bytes);
    let tokens = usize::try_from(r.u64("tokens")?).map_err(|_| invalid("tokens", "too large".into()))?;
    // A tensor takes at least 10 bytes (empty name, dtype, rank, empty data).
    let n = r.count("tensors", 10)?;
    let mut tensors = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.str("name")?;
        let dtype_id = r.u8("dtype")?;
        let dtype = StateDType::from_id(dtype_id).ok_or_else(|| invalid("dtype", format!("unknown id {dtype_id}")))?;
        let rank = r.u8("rank")? as usize;
        if rank > MAX_RANK {
            return Err(invalid("rank", format!("{rank} exceeds {MAX_RANK}")));
        }
        let shape = (0..rank)
            .map(|_| usize::try_from(r.u64("dim")?).map_err(|_| invalid("dim", "too large".into())))
            .collect::<Result<Vec<_>, _>>()?;
        let len = r.u32("data")? as usize;
        let padding = r.take("data padding", r.position().next_multiple_of(DATA_ALIGN) - r.position())?;
        if padding.iter().any(|&b| b != 0) {
            return Err(invalid("data padding", "not zero".into()));
        }
        let tensor = StateTensor { name, dtype, shape, bytes: bytes.slice_ref(r.take("data", len)?) };
        tensor.validate().map_err(|e| invalid("data", e.to_string()))?;
        tensors.push(tensor);
    }
    r.end()?;
    Ok(LayerState { tokens, tensors })
}
