//! NVIDIA NIXL as the transfer engine of one-sided reads ([`Mode::Read`](crate::wire::Mode::Read),
//! [`protocol::reads`](crate::protocol::reads)): the decode side reads each layer straight from
//! the prefill side's memory over UCX (TCP or shared memory on one host, RDMA between hosts),
//! while the connection's frames keep the protocol (handshake, announcements, logits, errors).
//!
//! - The prefill side ([`NixlPrefill`]) registers one region of host memory with its agent,
//!   places each stored layer there (a layer that does not fit is announced by a plain `Ready`
//!   and pulled), sends its agent metadata once per connection (an `Agent` message after the
//!   `Layout`), and frees a request when the decode side's completion notification arrives (a
//!   thread of its own polls for them); a lease frees it if none comes.
//! - The decode side ([`NixlDecode`]) registers one region for its receive buffers, loads each
//!   server's metadata once per connection, issues one READ per announced layer and polls the
//!   transfers on a thread of its own (NIXL's calls block, and completion is polled: none of
//!   them runs on the async runtime), then checks each layer's checksum as for a pulled one.
//!
//! The bindings (`nixl-sys`, stub API) load `libnixl_capi.so` at run time: without it, or
//! without the UCX plugin (`NIXL_PLUGIN_DIR`), starting either side fails with
//! [`TransferError::NixlUnavailable`](crate::TransferError::NixlUnavailable), as it does in a
//! build without the `nixl` feature. Only host memory is registered: layers are exported to the
//! host before they are stored, and received into host buffers before they are imported.

#[cfg(feature = "nixl")]
mod arena;
#[cfg(feature = "nixl")]
mod decode;
#[cfg(feature = "nixl")]
mod engine;
#[cfg(feature = "nixl")]
mod prefill;
#[cfg(not(feature = "nixl"))]
mod unavailable;

#[cfg(not(feature = "nixl"))]
pub use unavailable::{NixlDecode, NixlPrefill};
#[cfg(feature = "nixl")]
pub use {decode::NixlDecode, prefill::NixlPrefill};

/// How a side's NIXL agent is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NixlConfig {
    /// The backend plugin. `UCX` picks its transports from UCX's environment (`UCX_TLS`,
    /// `UCX_NET_DEVICES`; `docs/nixl.md`).
    pub backend: String,
    /// Backend parameters over the plugin's defaults, e.g. `ucx_error_handling_mode=none`,
    /// which UCX's shared-memory transports need (they cannot detect a dead peer).
    pub backend_params: Vec<(String, String)>,
    /// Host memory registered once with the agent, bytes: on the prefill side the layers held
    /// for decode sides (those that do not fit are pulled instead), on the decode side the
    /// receive buffers (those that do not fit are pulled into unregistered memory).
    pub memory_bytes: usize,
}

impl Default for NixlConfig {
    /// UCX with its default parameters, 1 GiB registered.
    fn default() -> Self {
        Self { backend: "UCX".into(), backend_params: Vec::new(), memory_bytes: 1 << 30 }
    }
}

/// Parses a backend parameter spelled `KEY=VALUE` (for command lines).
pub fn parse_backend_param(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}
