//! What the registry's tasks tell their owner: servers joining and leaving, connections
//! failing, values ignored, etcd lost and found. The library prints nothing itself.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::TransferError;

/// Where a registration or a watcher tells what happens to it (a process prints it).
pub type Tell = Arc<dyn Fn(RegistryEvent) + Send + Sync>;

/// Something that happened to the registry, on either side.
#[derive(Debug, Clone, PartialEq)]
pub enum RegistryEvent {
    /// A registered server's connection is open and in the pool.
    Joined {
        /// Its key.
        key: String,
        /// Its address.
        address: String,
        /// Its index in the pool.
        index: usize,
    },
    /// A server's key is gone: its server left the pool and is never chosen again.
    Left {
        /// Its key.
        key: String,
        /// Its address.
        address: String,
    },
    /// A connection to a registered server failed or could not be opened; it is opened again
    /// after `retry_in`, as long as the key exists.
    ConnectionFailed {
        /// Its key.
        key: String,
        /// Its address.
        address: String,
        /// Why.
        error: TransferError,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// A value under the prefix is not a server entry: ignored.
    Malformed {
        /// Its key.
        key: String,
        /// Why it does not parse.
        reason: String,
    },
    /// The watch of the registry failed: the last known servers stay in use.
    WatchLost {
        /// Why.
        reason: String,
        /// The servers known.
        servers: usize,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// The watch works again, after reading the whole registry anew.
    WatchRestored {
        /// The servers known now.
        servers: usize,
    },
    /// A server's registration lapsed (its lease expired or etcd stopped answering): it
    /// registers again after `retry_in`.
    RegistrationLost {
        /// Why.
        reason: String,
        /// When it is tried again.
        retry_in: Duration,
    },
    /// A server registered again, under a new lease.
    Reregistered {
        /// The new lease's id.
        lease: i64,
    },
    /// A load report failed; the next change, or the next registration, reports again.
    LoadReportFailed {
        /// The server's key.
        key: String,
        /// Why.
        reason: String,
    },
}

impl fmt::Display for RegistryEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Joined { key, address, index } => write!(f, "prefill server {index} at {address} joined ({key})"),
            Self::Left { key, address } => write!(f, "prefill server at {address} left ({key} is gone)"),
            Self::ConnectionFailed { key, address, error, retry_in } => {
                write!(f, "connection to {address} ({key}) failed: {error}; retrying in {retry_in:?}")
            }
            Self::Malformed { key, reason } => write!(f, "ignoring {key}: not a server entry: {reason}"),
            Self::WatchLost { reason, servers, retry_in } => write!(
                f,
                "lost the watch of etcd ({reason}); keeping the {servers} known server(s); retrying in {retry_in:?}"
            ),
            Self::WatchRestored { servers } => write!(f, "watching etcd again; {servers} server(s) known"),
            Self::RegistrationLost { reason, retry_in } => {
                write!(f, "registration lapsed ({reason}); registering again in {retry_in:?}")
            }
            Self::Reregistered { lease } => write!(f, "registered again under lease {lease:x}"),
            Self::LoadReportFailed { key, reason } => write!(f, "could not report the load of {key}: {reason}"),
        }
    }
}
