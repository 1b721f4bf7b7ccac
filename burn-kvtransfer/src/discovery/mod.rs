//! The prefill servers' registry in etcd (feature `etcd`): servers register themselves and
//! report their load; decode workers watch the registry and pull from the least loaded. A static
//! list of servers ([`PrefillPool::new`](crate::protocol::PrefillPool::new)) needs none of it,
//! which is why it is a feature: without it the crate builds no gRPC stack and needs no `protoc`.
//!
//! **Keys.** Each server is one key, `<prefix>/servers/<id>`, whose value is a [`ServerEntry`]
//! in JSON: the address to connect to, the scheme and model it serves (the scheme descriptor, so
//! a worker only connects to servers whose caches it can import), its emulated link rate and its
//! load. `<id>` is unique per server process and pair; it stays the same while the process runs.
//!
//! **Leases.** A [`Registration`] attaches its keys to one etcd lease of
//! [`RegistryConfig::lease_ttl`] and keeps the lease alive every third of it. When the process
//! dies or hangs, the keep-alives stop, etcd revokes the lease within its TTL and deletes the
//! keys; the watchers see the deletions. When a keep-alive fails but the process lives (etcd
//! restarted, a partition healed), it registers again under a new lease, retrying with backoff.
//!
//! **Load.** A server's load is the number of requests it holds (submitted, not yet completed,
//! failed or expired; [`PrefillServer::load`](crate::protocol::PrefillServer::load)). The
//! registration puts it whenever it changes, at most once per [`RegistryConfig::load_interval`]
//! (the latest value wins), so a busy server does not write to etcd per request.
//!
//! **Watching.** A [`RegistryWatcher`] reads every key under the prefix, then watches from that
//! revision on. Each key whose entry the worker wants gets a connection in its
//! [`PrefillPool`](crate::protocol::PrefillPool), whose least-loaded choice compares the
//! registered load with the worker's own requests in flight there. A connection that fails is
//! reopened with backoff while the key exists; a deleted key's server leaves the pool at once
//! and is never chosen again. A value that does not parse is ignored with a
//! [`RegistryEvent::Malformed`] (the key's previous value, if any, stands).
//!
//! **When etcd fails.** At start, an unreachable etcd is an error
//! ([`DiscoveryError::Unreachable`]), on either side. Later, a server keeps serving and retries
//! its registration; a worker keeps using the last set of servers it knew (their connections
//! still fail over as with a static list) and retries the watch with backoff, reading the whole
//! registry again once etcd answers. Neither side stops because etcd went away; both say so
//! through their [`Tell`].

mod backoff;
mod entry;
mod events;
mod registration;
mod watcher;

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

pub use entry::ServerEntry;
pub use events::{RegistryEvent, Tell};
pub use registration::{Registered, Registration};
pub use watcher::RegistryWatcher;

/// Where the registry is and how it is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct RegistryConfig {
    /// etcd's client endpoints (`http://host:port` or `host:port`).
    pub endpoints: Vec<String>,
    /// The prefix of every key (servers are under `<prefix>/servers/`).
    pub prefix: String,
    /// The TTL of a server's lease: how long its keys outlive its last keep-alive. etcd rounds
    /// it up to whole seconds, and to its own minimum (2 s with its default timings).
    pub lease_ttl: Duration,
    /// The shortest gap between two load reports of one server.
    pub load_interval: Duration,
    /// How long one request to etcd may take, and opening the connection to it.
    pub timeout: Duration,
}

impl RegistryConfig {
    /// The registry at `endpoints` under `/burn-kvtransfer`: leases of 10 s, load reports at
    /// most every 100 ms, requests to etcd within 5 s.
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            prefix: "/burn-kvtransfer".into(),
            lease_ttl: Duration::from_secs(10),
            load_interval: Duration::from_millis(100),
            timeout: Duration::from_secs(5),
        }
    }

    /// Where the servers' keys are: `<prefix>/servers/`.
    pub fn servers_prefix(&self) -> String {
        format!("{}/servers/", self.prefix.trim_end_matches('/'))
    }

    /// The lease TTL in whole seconds, as etcd takes it (at least 1).
    fn lease_ttl_secs(&self) -> i64 {
        (self.lease_ttl.as_secs_f64().ceil() as i64).max(1)
    }

    /// A client of the registry's etcd. It connects lazily: an unreachable etcd shows at the
    /// first request.
    async fn client(&self) -> Result<Client, DiscoveryError> {
        if self.endpoints.is_empty() {
            return Err(DiscoveryError::NoEndpoints);
        }
        // No per-request timeout here: tonic would apply it to the watch and keep-alive streams
        // too. Unary requests get theirs from `within`; HTTP/2 pings find a dead etcd under a
        // stream that sends nothing.
        let options = ConnectOptions::new()
            .with_connect_timeout(self.timeout)
            .with_keep_alive(self.timeout, self.timeout)
            .with_keep_alive_while_idle(true);
        Client::connect(&self.endpoints, Some(options)).await.map_err(|e| self.unreachable(e.to_string()))
    }

    /// `request` within [`timeout`](Self::timeout): its error says what failed.
    async fn within<T>(
        &self,
        what: &'static str,
        request: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, DiscoveryError> {
        match tokio::time::timeout(self.timeout, request).await {
            Ok(reply) => reply.map_err(|e| self.error(what, e)),
            Err(_) => Err(self.unreachable(format!("{what}: no answer within {:?}", self.timeout))),
        }
    }

    /// What failed when etcd answered `what` with `e`.
    fn error(&self, what: &'static str, e: etcd_client::Error) -> DiscoveryError {
        match is_unreachable(&e) {
            true => self.unreachable(e.to_string()),
            false => DiscoveryError::Etcd { what, reason: e.to_string() },
        }
    }

    fn unreachable(&self, reason: String) -> DiscoveryError {
        DiscoveryError::Unreachable { endpoints: self.endpoints.join(","), reason }
    }
}

/// Whether `e` says etcd could not be reached (rather than refusing the request).
fn is_unreachable(e: &etcd_client::Error) -> bool {
    use etcd_client::Error;
    match e {
        Error::TransportError(_) | Error::IoError(_) => true,
        // gRPC's codes (etcd-client does not re-export tonic's enum): DEADLINE_EXCEEDED and
        // UNAVAILABLE, which tonic also gives when it cannot connect.
        Error::GRpcStatus(status) => matches!(status.code() as i32, 4 | 14),
        _ => false,
    }
}

/// Why the registry could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DiscoveryError {
    /// No endpoint was given.
    #[error("no etcd endpoint given")]
    NoEndpoints,
    /// etcd did not answer.
    #[error("etcd at {endpoints} is unreachable: {reason}")]
    Unreachable {
        /// The endpoints tried, comma-separated.
        endpoints: String,
        /// What failed.
        reason: String,
    },
    /// etcd answered with an error.
    #[error("etcd refused to {what}: {reason}")]
    Etcd {
        /// What was asked.
        what: &'static str,
        /// etcd's answer.
        reason: String,
    },
    /// etcd's keep-alive said the lease is gone.
    #[error("the lease expired")]
    LeaseExpired,
}
