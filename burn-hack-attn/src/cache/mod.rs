//! The HACK KV cache and scheme: keys quantized per slot on append, values in closed blocks of Π
//! slots plus a float tail (requantization elimination), attention on the codes.

mod bytes;
mod codes;
mod hack_cache;
mod scheme;
mod state;

pub use bytes::{
    bits_per_element, bytes_per_token, key_bytes_per_slot, key_group, key_partitions_fit, sum_bytes, value_block_bytes,
    PARAMS_BYTES,
};
pub use codes::{append_codes, Codes};
pub use hack_cache::HackCache;
pub use state::{export_codes, import_codes};
