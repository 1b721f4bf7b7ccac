//! Compressed K/V of one (sequence, KV head) stream in HACK's geometry.

mod bytes;
mod keys;
mod values;

pub use bytes::{bytes_per_token, sum_bytes};
pub use keys::KeyStore;
pub use values::ValueStore;
