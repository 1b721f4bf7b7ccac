//! # burn-kvtransfer
//!
//! KVDirect-style pull-based transfer of compressed KV caches from a prefill process to a decode
//! process (after the KVDirect paper; `docs/transfer.md` in the repository), for any scheme whose caches export a
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
//! - `discovery` (feature `etcd`): prefill servers register in etcd with a lease and report their
//!   load; decode workers watch the registry and pull from the least loaded.
//! - [`nixl`]: NVIDIA NIXL (UCX) as the data path of read mode: the decode side reads each layer
//!   from the prefill side's registered memory; the frames keep the protocol (feature `nixl`).
//!
//! A request on one connection (decode side left, prefill side right):
//!
//! ```text
//! Hello{scheme, model hash, mode, session} ->   <- Layout{block size, model shape}  (or Error: incompatible)
//! [Attach{session} on each extra data stream]   (pulled Block frames are spread over them)
//! Submit{request, tokens}         ->
//!                                               <- Ready{request, layer 0, bytes, crc}   (as soon as layer 0 is computed)
//! Pull{(request, 0, 0..n)}        ->            <- Block{request, 0, first, data} ...    (coalesced, <= frame cap each)
//!                                               <- Ready{.., layer 1, ..} ... Done{request, logits}
//! Complete{request}               ->            (the prefill side frees the request; a lease frees it if this never comes)
//! ```
//!
//! In read mode (NIXL) the Layout is followed by `Agent{metadata}` (the prefill agent's, loaded
//! once per connection), a layer placed in the prefill side's registered memory is announced by
//! `ReadyAt{.., address}` and read with one NIXL READ instead of pulled, and the completion is a
//! NIXL notification, sent at the moment a Complete would be.
//!
//! Tested: byte-identical transfer (pull and push), layer-wise streaming, 32 concurrent requests,
//! every fault of the issue (see `tests/`), and SmolLM2 end to end (tokens equal to a
//! single-process run). `disagg/src/main.rs` runs the two processes over TCP (its
//! `tests/chaos/` kills, stalls and corrupts them there),
//! `disagg_bench.rs` measures throughput (`results/transfer-bench.md`).
//!
//! Byte costs: layer states are shared [`Bytes`](burn_kvcompress::cache::Bytes) end to end. The
//! server sends straight from the tensors, and a received layer is decoded as slices of its
//! reassembly buffer, which returns to a [`BufferPool`](protocol::BufferPool) when dropped. Each
//! byte is hashed once per side: frame and layer checksums are combined from block checksums
//! ([`wire::crc_concat`]). No user-space copy remains for large Block frames: each stream's reader
//! reserves the frame's blocks in their layer ([`protocol::landing`]) and reads the data there
//! from the socket, so several streams fill one layer at once (6–10 GB/s per request over
//! loopback with 8–12 data streams on 16 cores).
//!
//! Not done: transferring a batch of several sequences in one request (a request is one prompt);
//! recovering a corrupt control frame in place (the connection fails and the pool retries the
//! request elsewhere); striping pushed blocks over data streams; registering device memory with
//! NIXL (layers cross the host on both sides).

pub mod decode;
pub mod descriptor;
#[cfg(feature = "etcd")]
pub mod discovery;
pub mod engine;
pub mod error;
pub mod fuzzing;
pub mod nixl;
pub mod protocol;
pub mod rate;
pub mod state_codec;
pub mod transport;
pub mod wire;

pub use descriptor::{ModelFingerprint, SchemeDescriptor};
pub use error::TransferError;
