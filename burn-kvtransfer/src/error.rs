//! The transfer error: every way a connection, a frame, a message or a peer can fail.

use std::time::Duration;

use crate::wire::{ErrorCode, FrameKind, MessageError, WireError};

/// A failed transfer. Cheap to clone (one failure may end several requests).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TransferError {
    /// The transport failed.
    #[error("i/o error: {0}")]
    Io(String),
    /// A frame header is corrupt, foreign, of another protocol version or over the size cap; the
    /// stream cannot be resynchronized.
    #[error("bad frame: {0}")]
    Wire(#[from] WireError),
    /// A frame's payload failed its checksum. The frame was skipped (its header, kind included,
    /// was sound), so the stream continues; lost blocks are pulled again, a lost control message
    /// ends the connection.
    #[error("the payload of a {0:?} frame failed its checksum")]
    Corrupt(FrameKind),
    /// The connection ended inside a frame.
    #[error("connection closed mid-frame ({0} bytes of a frame received)")]
    Truncated(usize),
    /// The connection ended at a frame boundary while work was outstanding.
    #[error("connection closed by the peer")]
    Closed,
    /// A frame's payload does not parse.
    #[error("malformed message: {0}")]
    Message(#[from] MessageError),
    /// The peer sent nothing for too long.
    #[error("no frame from the peer within {0:?}")]
    Timeout(Duration),
    /// The peer reported an error.
    #[error("peer reported {code:?}: {message}")]
    Remote {
        /// What failed.
        code: ErrorCode,
        /// The peer's explanation.
        message: String,
    },
    /// The peer broke the protocol (an unexpected message, a block outside its layer, a size over
    /// this side's cap, ...).
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// Corrupt frames kept arriving.
    #[error("request {request}: gave up after {attempts} re-pulls of corrupt blocks")]
    TooManyRepulls {
        /// The request.
        request: u64,
        /// Re-pulls tried.
        attempts: u32,
    },
    /// The received state does not fit the local scheme or model.
    #[error("importing the received state failed: {0}")]
    Import(String),
    /// The transfer engine (NIXL) cannot be used here: its library is missing or does not load,
    /// its backend plugin cannot be created, or this build lacks the `nixl` feature.
    #[error("NIXL is not available: {0}")]
    NixlUnavailable(String),
    /// The transfer engine (NIXL) failed a read, a registration or a metadata exchange.
    #[error("NIXL failed: {0}")]
    Nixl(String),
}

impl From<std::io::Error> for TransferError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e.to_string())
    }
}
