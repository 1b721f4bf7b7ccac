//! One-sided reads ([`Mode::Read`](crate::wire::Mode::Read)): the decode side reads each layer
//! straight from the prefill side's memory through a transfer engine, instead of having it sent
//! as Block frames. The protocol sees the engine through these types only; [`crate::nixl`]
//! implements them with NVIDIA NIXL.
//!
//! The prefill side copies each layer, as it is stored, into memory registered once with its
//! engine (a layer that does not fit there is announced by a plain `Ready` and pulled), and
//! sends the engine's metadata once per connection; the decode side receives into memory
//! registered with its own engine, and completes a request by an engine notification.

use std::fmt;
use std::sync::Arc;

use burn_kvcompress::cache::HostAllocator;

use crate::error::TransferError;

/// The prefill side's memory that peers may read: layers are placed in buffers of `allocator`
/// (every one of its buffers is readable; when it has none to give, the layer is served by
/// pulls), and `metadata` is what a peer's engine needs to read them.
#[derive(Debug, Clone)]
pub struct ReadableMemory {
    /// Where stored layers are copied to.
    pub allocator: Arc<dyn HostAllocator>,
    /// The engine's metadata (NIXL agent metadata), sent to each connection in an `Agent`
    /// message.
    pub metadata: Vec<u8>,
}

/// One contiguous piece of a read: `len` bytes from `remote` in the peer's address space to
/// `local` in this process's, both in memory registered with the respective engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPiece {
    /// Address of the first byte in the peer.
    pub remote: u64,
    /// Address of the first byte here.
    pub local: usize,
    /// Bytes.
    pub len: usize,
}

/// What is told when a read ends: `Ok` once every piece has landed.
pub type ReadDone = Box<dyn FnOnce(Result<(), TransferError>) + Send>;

/// The decode side's transfer engine.
pub trait RemoteReads: fmt::Debug + Send + Sync {
    /// Where receive buffers must come from for reads to land in them (registered memory);
    /// a layer whose buffer this allocator could not give is pulled.
    fn allocator(&self) -> Arc<dyn HostAllocator>;

    /// Prepares reads from the peer whose engine metadata is `metadata` (once per connection).
    /// May block: call it off the async runtime.
    fn connect(&self, metadata: &[u8]) -> Result<Arc<dyn PeerReads>, TransferError>;
}

/// Reads from one peer. Dropping it forgets the peer (its metadata is unloaded once no
/// connection uses it).
pub trait PeerReads: Send + Sync {
    /// Reads `pieces` as one transfer and calls `done` (on the engine's thread) when it ended.
    /// The local memory must stay allocated, and untouched by anyone else, until then.
    fn read(&self, pieces: Vec<ReadPiece>, done: ReadDone);

    /// Tells the peer that `request` is complete, as a `Complete` message would: it frees the
    /// request's layers. Best effort (a lost notification is covered by the peer's lease).
    fn complete(&self, request: u64);
}
