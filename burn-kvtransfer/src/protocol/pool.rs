//! Several prefill servers seen from one decode worker: each request goes to the least loaded
//! live server (fewest of this worker's requests in flight; ties rotate), and a request whose
//! server fails is retried on another.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::client::{PrefillClient, RequestHandle};
use crate::error::TransferError;
use crate::wire::ErrorCode;

/// Connections to several prefill servers.
#[derive(Debug)]
pub struct PrefillPool {
    clients: Vec<PrefillClient>,
    turn: AtomicUsize,
}

impl PrefillPool {
    /// A pool of connected clients.
    pub fn new(clients: Vec<PrefillClient>) -> Self {
        Self { clients, turn: AtomicUsize::new(0) }
    }

    /// The connections.
    pub fn clients(&self) -> &[PrefillClient] {
        &self.clients
    }

    /// Submits to the live server with the fewest requests in flight, skipping `exclude`
    /// (servers that already failed this request). Returns the server's index and the handle.
    pub fn submit(&self, tokens: Vec<u32>, exclude: &[usize]) -> Result<(usize, RequestHandle), TransferError> {
        let n = self.clients.len();
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        let (index, client) = (0..n)
            .map(|k| (turn + k) % n)
            .map(|i| (i, &self.clients[i]))
            .filter(|(i, c)| c.failure().is_none() && !exclude.contains(i))
            .min_by_key(|(_, c)| c.in_flight())
            .ok_or_else(|| TransferError::Protocol("no live prefill server left".into()))?;
        Ok((index, client.submit(tokens)?))
    }

    /// Bytes written and read over all connections.
    pub fn wire_bytes(&self) -> (u64, u64) {
        self.clients.iter().fold((0, 0), |(s, r), c| (s + c.bytes_sent(), r + c.bytes_received()))
    }
}

impl TransferError {
    /// Whether another server may succeed where this failure happened: the transport or the
    /// peer failed, not the request itself. A link that corrupts bytes is such a failure, whether
    /// it hit a control frame (which ends the connection), kept hitting a request's blocks past
    /// its re-pulls, or made the peer refuse a frame of ours as malformed; so is a failed
    /// one-sided read (the peer's endpoint broke).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Io(_)
                | Self::Closed
                | Self::Truncated(_)
                | Self::Timeout(_)
                | Self::Wire(_)
                | Self::Corrupt(_)
                | Self::TooManyRepulls { .. }
                | Self::Remote { code: ErrorCode::Malformed, .. }
                | Self::Nixl(_)
        )
    }
}
