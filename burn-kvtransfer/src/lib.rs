//! # burn-kvtransfer
//!
//! KVDirect-style pull-based transfer of compressed KV caches from a prefill process to a decode
//! process (`shared/specs/kvdirect.md`), for any scheme whose caches export a
//! [`LayerState`](burn_kvcompress::cache::LayerState).
//!
//! - [`wire`]: frames (versioned header with its own CRC-32, size cap checked before allocation,
//!   payload CRC-32) and the protocol messages.
//! - [`descriptor`]: the scheme descriptor (scheme configuration + model fingerprint) checked at
//!   connect time.
//! - [`state_codec`]: a layer's state as one self-describing buffer, cut into blocks.
//! - [`transport`]: TCP (default) and in-process channels behind [`Listener`](transport::Listener)
//!   / [`Connector`](transport::Connector); [`rate`] paces a connection to emulate a link.
//! - [`protocol`]: the prefill server (engine thread, lease store, layer-wise announcements,
//!   coalesced block serving, push option) and the decode client (reassembly, checksum, re-pull,
//!   completion, timeouts) and a least-loaded pool of servers.
//! - [`engine`]: prefill engines; [`ModelPrefill`](engine::ModelPrefill) runs a real model and
//!   publishes each layer's state as soon as the model has appended to it.
//! - [`fuzzing`]: the decoders' fuzz entry point and input mutator (cargo-fuzz target in `fuzz/`).
//! - [`decode`]: rebuilds caches on the decode side as layers arrive, retrying on another server.

pub mod decode;
pub mod descriptor;
pub mod engine;
pub mod error;
pub mod fuzzing;
pub mod protocol;
pub mod rate;
pub mod state_codec;
pub mod transport;
pub mod wire;

pub use descriptor::{ModelFingerprint, SchemeDescriptor};
pub use error::TransferError;
