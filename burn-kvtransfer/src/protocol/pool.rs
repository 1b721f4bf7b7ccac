//! Several prefill servers seen from one decode worker: each request goes to the least loaded
//! live server (ties rotate), and a request whose server fails is retried on another.
//!
//! A server's load is the larger of what it last reported (through a registry, see
//! `discovery`; 0 for a static list) and this worker's requests in flight there: the report
//! counts every worker's requests but lags behind them, this worker's own count is exact at once
//! (so a burst of its requests spreads before the next report).
//!
//! Servers may join and leave while requests run ([`insert`](PrefillPool::insert),
//! [`remove`](PrefillPool::remove)). Each keeps the index it joined at, and a removed index is
//! never reused, so an index names one connection for good (in records, and in the servers a
//! retry excludes); the pool's memory grows by one empty slot per connection ever removed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use super::client::{PrefillClient, RequestHandle};
use crate::error::TransferError;
use crate::wire::ErrorCode;

/// A server of the pool: its connection and the load it reports.
#[derive(Debug)]
struct Member {
    client: Arc<PrefillClient>,
    reported: Arc<AtomicUsize>,
}

impl Member {
    /// What the least-loaded choice compares.
    fn load(&self) -> usize {
        self.reported.load(Ordering::Relaxed).max(self.client.in_flight())
    }
}

/// Connections to several prefill servers. Shared between threads: joining, leaving and
/// submitting take `&self`.
#[derive(Debug, Default)]
pub struct PrefillPool {
    /// By index; `None` once removed.
    members: RwLock<Vec<Option<Member>>>,
    turn: AtomicUsize,
    /// Bytes sent and received over the connections removed so far, so that
    /// [`wire_bytes`](Self::wire_bytes) never goes back.
    removed_bytes: (AtomicU64, AtomicU64),
}

impl PrefillPool {
    /// A pool of connected clients (indices in order), none reporting a load.
    pub fn new(clients: Vec<PrefillClient>) -> Self {
        let pool = Self::default();
        for client in clients {
            pool.insert(client, Arc::default());
        }
        pool
    }

    fn read(&self) -> RwLockReadGuard<'_, Vec<Option<Member>>> {
        self.members.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a connected server whose reported load `reported` holds (the registry updates it);
    /// returns its index.
    pub fn insert(&self, client: PrefillClient, reported: Arc<AtomicUsize>) -> usize {
        let mut members = self.members.write().unwrap_or_else(|p| p.into_inner());
        members.push(Some(Member { client: Arc::new(client), reported }));
        members.len() - 1
    }

    /// Removes server `index`: it is never chosen again. Its requests in flight go on until
    /// they end (their handles hold the connection). Returns its client if it was there.
    pub fn remove(&self, index: usize) -> Option<Arc<PrefillClient>> {
        let mut members = self.members.write().unwrap_or_else(|p| p.into_inner());
        let member = members.get_mut(index)?.take()?;
        self.removed_bytes.0.fetch_add(member.client.bytes_sent(), Ordering::Relaxed);
        self.removed_bytes.1.fetch_add(member.client.bytes_received(), Ordering::Relaxed);
        Some(member.client)
    }

    /// Server `index`, unless it was removed.
    pub fn client(&self, index: usize) -> Option<Arc<PrefillClient>> {
        self.read().get(index)?.as_ref().map(|m| m.client.clone())
    }

    /// The servers now in the pool, with their indices.
    pub fn clients(&self) -> Vec<(usize, Arc<PrefillClient>)> {
        let members = self.read();
        members.iter().enumerate().filter_map(|(i, m)| Some((i, m.as_ref()?.client.clone()))).collect()
    }

    /// How many servers are in the pool now.
    pub fn len(&self) -> usize {
        self.read().iter().flatten().count()
    }

    /// Whether no server is in the pool now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Submits to the live server of least load, skipping `exclude` (servers that already
    /// failed this request). Returns the server's index and the handle.
    pub fn submit(&self, tokens: Vec<u32>, exclude: &[usize]) -> Result<(usize, RequestHandle), TransferError> {
        let members = self.read();
        let n = members.len();
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        let (index, member) = (0..n)
            .map(|k| (turn + k) % n)
            .filter_map(|i| Some((i, members[i].as_ref()?)))
            .filter(|(i, m)| m.client.failure().is_none() && !exclude.contains(i))
            .min_by_key(|(_, m)| m.load())
            .ok_or_else(|| TransferError::Protocol("no live prefill server left".into()))?;
        Ok((index, member.client.submit(tokens)?))
    }

    /// Bytes written and read over all connections, those removed included (up to their
    /// removal).
    pub fn wire_bytes(&self) -> (u64, u64) {
        // Read under the lock that `remove` moves a connection's bytes under: counted once.
        let members = self.read();
        let removed = (self.removed_bytes.0.load(Ordering::Relaxed), self.removed_bytes.1.load(Ordering::Relaxed));
        members.iter().flatten().fold(removed, |(s, r), m| (s + m.client.bytes_sent(), r + m.client.bytes_received()))
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
