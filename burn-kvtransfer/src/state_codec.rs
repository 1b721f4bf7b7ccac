//! A layer's state as one self-describing byte buffer, the unit cut into blocks:
//!
//! ```text
//! tokens: u64, tensors: u32, then per tensor:
//!   name: u32 length + UTF-8, dtype: u8 (StateDType::id), rank: u8, dims: u64 each,
//!   data: u32 length + little-endian bytes
//! ```
//!
//! Decoding checks every length against the buffer and every tensor's size against its shape
//! (`StateTensor::validate`), so a received state is sound before it touches a device.

use burn_kvcompress::cache::{LayerState, StateDType, StateTensor};

use crate::wire::{MessageError, PayloadReader, PayloadWriter};

/// The largest tensor rank accepted.
pub const MAX_RANK: usize = 8;

/// Serializes a layer's state.
pub fn encode_state(state: &LayerState) -> Vec<u8> {
    let mut w = PayloadWriter::new();
    w.u64(state.tokens as u64).u32(state.tensors.len() as u32);
    for t in &state.tensors {
        w.str(&t.name).u8(t.dtype.id()).u8(t.shape.len() as u8);
        t.shape.iter().for_each(|&d| _ = w.u64(d as u64));
        w.bytes(&t.bytes);
    }
    w.finish()
}

/// Parses and validates a serialized layer state.
pub fn decode_state(bytes: &[u8]) -> Result<LayerState, MessageError> {
    let invalid = |field, reason: String| MessageError::Invalid { field, reason };
    let mut r = PayloadReader::new(bytes);
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
        let tensor = StateTensor { name, dtype, shape, bytes: r.bytes("data")?.to_vec() };
        tensor.validate().map_err(|e| invalid("data", e.to_string()))?;
        tensors.push(tensor);
    }
    r.end()?;
    Ok(LayerState { tokens, tensors })
}
