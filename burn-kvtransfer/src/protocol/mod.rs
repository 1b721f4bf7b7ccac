//! The pull protocol after KVDirect: one Hello/Layout handshake per connection (the scheme
//! descriptor is checked there), then per request: Submit, a Ready per layer as prefill computes
//! it, Pulls by (request, layer, block range) coalesced into as few frames as the cap allows, and
//! one Complete that frees the prefill side's memory. Leases free it when the decode side
//! vanishes. Push mode sends each layer unasked instead; read mode lets the decode side read
//! each layer from the prefill side's memory through a transfer engine ([`reads`]).

pub mod blocks;
mod buffers;
mod client;
mod held;
pub mod landing;
mod pool;
pub mod reads;
mod server;
mod store;

pub use buffers::BufferPool;
pub use client::{ClientConfig, PrefillClient, RequestEvent, RequestHandle};
pub use held::{HeldLayer, LiveBytes};
pub use pool::PrefillPool;
pub use server::{Completions, PrefillServer, ServerConfig, ServerStats};
pub use store::StoreStats;
