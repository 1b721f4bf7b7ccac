//! The HACK KV cache and scheme: the paper's layout (keys quantized per slot on append, values in
//! closed blocks of Π slots plus a float tail) or the channel layout (float sinks, closed blocks
//! of keys per channel and values per slot, a float tail), attention on the codes.

mod bytes;
mod channel;
mod hack_cache;
mod paper;
mod paper_keys;
mod paper_values;
mod rotation_memo;
mod scheme;
mod state;

pub use bytes::{
    bits_per_element, bytes_per_token, key_bytes_per_slot, key_partitions_fit, mean_bits_per_element, sum_bytes,
    value_block_bytes, PARAMS_BYTES,
};
pub use channel::{channel_bytes, ChannelStore};
// The data the kernels produce and read, part of the cache's API.
use crate::kernels::append_codes;
pub use crate::kernels::{key_group, value_group, Codes, FloatSlots, PackedRows};
pub use hack_cache::{HackCache, Store};
pub use paper::PaperStore;
pub use paper_keys::PaperKeys;
pub use paper_values::PaperValues;
pub use scheme::{HackScheme, HackSchemeError};
use state::{export_codes, import_codes};
