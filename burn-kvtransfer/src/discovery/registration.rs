//! The server side: keys under one lease, kept alive, and the servers' loads reported as they
//! change.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, PutOptions};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::{DiscoveryError, RegistryConfig, RegistryEvent, ServerEntry, Tell};

/// A server to register: its entry and its load ([`PrefillServer::load`]).
///
/// [`PrefillServer::load`]: crate::protocol::PrefillServer::load
#[derive(Debug)]
pub struct Registered {
    /// What its key says (the load is taken from `load`).
    pub entry: ServerEntry,
    /// Its load, as it changes.
    pub load: watch::Receiver<usize>,
}

/// Servers registered under one lease, kept alive and their loads reported until this is
/// dropped (the keys then live on until the lease's TTL runs out) or revoked
/// ([`Registration::revoke`], which deletes them at once).
pub struct Registration {
    keys: Vec<String>,
    tasks: Vec<JoinHandle<()>>,
    shared: Arc<Shared>,
}

/// What the keep-alive and the load reports share.
struct Shared {
    config: RegistryConfig,
    client: Client,
    /// Each server's key and entry, as last reported.
    entries: Mutex<Vec<(String, ServerEntry)>>,
    /// The lease the keys are attached to now.
    lease: AtomicI64,
    /// Held across reading the lease and writing with it, so that a load report cannot attach a
    /// key to a lease a re-registration just replaced.
    writing: tokio::sync::Mutex<()>,
    tell: Tell,
}

impl Registration {
    /// Grants a lease, puts one key per server under it, and starts keeping it alive and
    /// reporting loads (on the current tokio runtime). Fails if etcd is unreachable.
    pub async fn start(config: &RegistryConfig, servers: Vec<Registered>, tell: Tell) -> Result<Self, DiscoveryError> {
        let client = config.client().await?;
        let process = unique_id();
        let (entries, loads): (Vec<_>, Vec<_>) = servers
            .into_iter()
            .enumerate()
            .map(|(i, Registered { mut entry, load })| {
                entry.load = *load.borrow();
                ((format!("{}{process}-{i}", config.servers_prefix()), entry), load)
            })
            .unzip();
        let keys = entries.iter().map(|(key, _)| key.clone()).collect();
        let shared = Arc::new(Shared {
            config: config.clone(),
            client,
            entries: Mutex::new(entries),
            lease: AtomicI64::new(0),
            writing: tokio::sync::Mutex::new(()),
            tell,
        });
        shared.register().await?;
        let mut tasks = vec![tokio::spawn(shared.clone().keep_alive())];
        tasks.extend(loads.into_iter().enumerate().map(|(i, load)| tokio::spawn(shared.clone().report_load(i, load))));
        Ok(Self { keys, tasks, shared })
    }

    /// The servers' keys, in the order given.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Stops keeping the lease alive and reporting loads, and revokes the lease, which deletes
    /// every key at once: a server that is shutting down leaves the registry now rather than a
    /// TTL later, so no decode worker picks it in between. Fails if etcd does not answer (the
    /// keys then go when the lease runs out, as do keys that a re-registration stopped half-way
    /// had put under a lease of its own).
    pub async fn revoke(mut self) -> Result<(), DiscoveryError> {
        // Stopped and gone before the revocation, so that nothing writes under the lease after.
        for task in std::mem::take(&mut self.tasks) {
            task.abort();
            _ = task.await;
        }
        let lease = self.shared.lease.load(Ordering::SeqCst);
        let mut client = self.shared.client.clone();
        self.shared.config.within("revoke the lease", client.lease_revoke(lease)).await?;
        Ok(())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// An id no other server process has: the time and this process's id.
fn unique_id() -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{nanos:x}-{:x}", std::process::id())
}

impl Shared {
    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<(String, ServerEntry)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Grants a new lease and puts every key under it, with the loads last seen.
    async fn register(&self) -> Result<i64, DiscoveryError> {
        let _writing = self.writing.lock().await;
        let mut client = self.client.clone();
        let ttl = self.config.lease_ttl_secs();
        let lease = self.config.within("grant a lease", client.lease_grant(ttl, None)).await?.id();
        let entries = self.entries().clone();
        for (key, entry) in entries {
            let put = client.put(key, entry.to_json(), Some(PutOptions::new().with_lease(lease)));
            self.config.within("register a server", put).await?;
        }
        self.lease.store(lease, Ordering::SeqCst);
        Ok(lease)
    }

    /// Keeps the lease alive; when that fails, registers again (with backoff) and goes on.
    async fn keep_alive(self: Arc<Self>) {
        let mut backoff = Backoff::up_to(self.config.lease_ttl);
        loop {
            let mut reason = self.keep_lease().await;
            loop {
                let retry_in = backoff.next_delay();
                (self.tell)(RegistryEvent::RegistrationLost { reason: reason.to_string(), retry_in });
                tokio::time::sleep(retry_in).await;
                match self.register().await {
                    Ok(lease) => {
                        (self.tell)(RegistryEvent::Reregistered { lease });
                        backoff.reset();
                        break;
                    }
                    Err(e) => reason = e,
                }
            }
        }
    }

    /// Renews the current lease every third of its TTL (as etcd's own clients do, so that one
    /// lost renewal does not let it lapse) until a renewal fails; returns why.
    async fn keep_lease(&self) -> DiscoveryError {
        let lease = self.lease.load(Ordering::SeqCst);
        let mut client = self.client.clone();
        let (mut keeper, mut replies) =
            match self.config.within("keep the lease alive", client.lease_keep_alive(lease)).await {
                Ok(pair) => pair,
                Err(e) => return e,
            };
        let period = Duration::from_secs_f64(self.config.lease_ttl_secs() as f64 / 3.0);
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            if let Err(e) = self.config.within("keep the lease alive", keeper.keep_alive()).await {
                return e;
            }
            match self.config.within("keep the lease alive", replies.message()).await {
                Ok(Some(reply)) if reply.ttl() > 0 => {}
                Ok(Some(_)) => return DiscoveryError::LeaseExpired,
                Ok(None) => {
                    return DiscoveryError::Etcd { what: "keep the lease alive", reason: "stream ended".into() }
                }
                Err(e) => return e,
            }
        }
    }

    /// Puts server `index`'s load whenever it changes, at most once per load interval (the
    /// latest value wins), until the server is gone.
    async fn report_load(self: Arc<Self>, index: usize, mut load: watch::Receiver<usize>) {
        let mut last: Option<Instant> = None;
        while load.changed().await.is_ok() {
            if let Some(last) = last {
                tokio::time::sleep_until(last + self.config.load_interval).await;
            }
            let now = *load.borrow_and_update();
            let (key, entry) = {
                let mut entries = self.entries();
                entries[index].1.load = now;
                entries[index].clone()
            };
            let _writing = self.writing.lock().await;
            let lease = self.lease.load(Ordering::SeqCst);
            let mut client = self.client.clone();
            let put = client.put(key.clone(), entry.to_json(), Some(PutOptions::new().with_lease(lease)));
            if let Err(e) = self.config.within("report a load", put).await {
                (self.tell)(RegistryEvent::LoadReportFailed { key, reason: e.to_string() });
            }
            last = Some(Instant::now());
        }
    }
}
