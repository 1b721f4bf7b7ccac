//! The PQ KV cache: codes for old slots, a recent window in f32, attention on both.

mod pq_cache;
mod scheme;
mod state;

pub use pq_cache::{slots_to_encode, PqCache};
pub use scheme::PqScheme;
