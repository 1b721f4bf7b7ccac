//! The decode side: the registry's servers, followed as they come and go, as a pool of
//! connections whose least-loaded choice uses the loads they report.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, GetOptions, WatchOptions};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::backoff::Backoff;
use super::{DiscoveryError, RegistryConfig, RegistryEvent, ServerEntry, Tell};
use crate::protocol::{ClientConfig, PrefillClient, PrefillPool};
use crate::transport::tcp::TcpConnector;

/// The longest wait between two tries to reconnect to a server or to watch etcd again.
const RETRY_CEILING: Duration = Duration::from_secs(5);

/// Which entries a worker wants (the scheme and model it imports, say).
type Wanted = Arc<dyn Fn(&ServerEntry) -> bool + Send + Sync>;

/// The registry's servers a worker wants, connected, in a [`PrefillPool`]; followed until this
/// is dropped.
pub struct RegistryWatcher {
    pool: Arc<PrefillPool>,
    task: JoinHandle<()>,
}

impl RegistryWatcher {
    /// Reads the registry, connects to every server whose entry `wanted` accepts (with
    /// `connect`; waiting until each connected or failed once, so that the first request sees
    /// them all) and follows the registry from then on (on the current tokio runtime). Fails if
    /// etcd is unreachable.
    pub async fn start(
        config: &RegistryConfig,
        connect: ClientConfig,
        wanted: impl Fn(&ServerEntry) -> bool + Send + Sync + 'static,
        tell: Tell,
    ) -> Result<Self, DiscoveryError> {
        let client = config.client().await?;
        let pool = Arc::new(PrefillPool::default());
        let mut watch = Watch {
            config: config.clone(),
            client,
            connect,
            wanted: Arc::new(wanted),
            pool: pool.clone(),
            tell,
            members: HashMap::new(),
        };
        let (revision, first_tries) = watch.read_all().await?;
        for tried in first_tries {
            // Each try is bounded by the connection's timeout; a dropped sender is a try too.
            _ = tried.await;
        }
        Ok(Self { pool, task: tokio::spawn(watch.run(revision)) })
    }

    /// The connected servers.
    pub fn pool(&self) -> &PrefillPool {
        &self.pool
    }
}

impl Drop for RegistryWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The watching task's state.
struct Watch {
    config: RegistryConfig,
    client: Client,
    connect: ClientConfig,
    wanted: Wanted,
    pool: Arc<PrefillPool>,
    tell: Tell,
    /// The servers wanted, by key.
    members: HashMap<String, Member>,
}

/// A wanted server: its connection is kept open (reopened after failures) by a task of its own
/// while its key exists.
struct Member {
    address: String,
    reported: Arc<AtomicUsize>,
    place: Arc<Place>,
    task: JoinHandle<()>,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.place.leave();
        self.task.abort();
    }
}

/// A member's connection in the pool, shared by the watcher (which takes it out when the key
/// goes) and the member's task (which puts it in once connected, and takes it out when it
/// fails). The lock orders the two: a connection that opens after its key went never joins.
struct Place {
    pool: Arc<PrefillPool>,
    /// The index in the pool, while in it; whether the key is gone.
    state: Mutex<(Option<usize>, bool)>,
}

impl Place {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Option<usize>, bool)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Puts `client` in the pool, unless the key is gone; returns its index and the client.
    fn join(&self, client: PrefillClient, reported: Arc<AtomicUsize>) -> Option<(usize, Arc<PrefillClient>)> {
        let mut state = self.lock();
        if state.1 {
            return None;
        }
        let index = self.pool.insert(client, reported);
        state.0 = Some(index);
        Some((index, self.pool.client(index)?))
    }

    /// Takes the connection out of the pool, if it is in.
    fn vacate(&self) {
        if let Some(index) = self.lock().0.take() {
            self.pool.remove(index);
        }
    }

    /// The key is gone: out of the pool for good.
    fn leave(&self) {
        self.lock().1 = true;
        self.vacate();
    }
}

impl Watch {
    /// Reads every key under the prefix and makes the members match it. Returns the revision
    /// read and, for each new member, when its first connection try is over.
    async fn read_all(&mut self) -> Result<(i64, Vec<oneshot::Receiver<()>>), DiscoveryError> {
        let mut client = self.client.clone();
        let get = client.get(self.config.servers_prefix(), Some(GetOptions::new().with_prefix()));
        let reply = self.config.within("read the registry", get).await?;
        let revision = reply.header().map_or(0, |h| h.revision());
        let mut present = HashSet::new();
        let mut first_tries = Vec::new();
        for kv in reply.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            present.insert(key.clone());
            first_tries.extend(self.put(key, kv.value()));
        }
        let gone: Vec<String> = self.members.keys().filter(|k| !present.contains(*k)).cloned().collect();
        gone.iter().for_each(|key| self.delete(key));
        Ok((revision, first_tries))
    }

    /// A key's new value: a new member (returning when its first connection try is over), a
    /// new load, or a malformed value ignored.
    fn put(&mut self, key: String, value: &[u8]) -> Option<oneshot::Receiver<()>> {
        let entry = match ServerEntry::parse(value) {
            Ok(entry) => entry,
            Err(reason) => {
                (self.tell)(RegistryEvent::Malformed { key, reason });
                return None;
            }
        };
        match self.members.get(&key) {
            Some(member) if member.address == entry.address && (self.wanted)(&entry) => {
                member.reported.store(entry.load, Ordering::Relaxed);
                return None;
            }
            // Moved, or no longer wanted: the old server leaves.
            Some(_) => self.delete(&key),
            None => {}
        }
        if !(self.wanted)(&entry) {
            return None;
        }
        let (tried, first_try) = oneshot::channel();
        let reported = Arc::new(AtomicUsize::new(entry.load));
        let place = Arc::new(Place { pool: self.pool.clone(), state: Mutex::new((None, false)) });
        let connection = Connection {
            key: key.clone(),
            address: entry.address.clone(),
            reported: reported.clone(),
            place: place.clone(),
            connect: self.connect.clone(),
            tell: self.tell.clone(),
        };
        let task = tokio::spawn(connection.keep(tried));
        self.members.insert(key, Member { address: entry.address, reported, place, task });
        Some(first_try)
    }

    /// A key is gone: its server leaves the pool.
    fn delete(&mut self, key: &str) {
        if let Some(member) = self.members.remove(key) {
            (self.tell)(RegistryEvent::Left { key: key.to_string(), address: member.address.clone() });
        }
    }

    /// Follows the registry's changes after `revision` until the watch fails; returns why.
    async fn follow(&mut self, revision: i64) -> DiscoveryError {
        let mut client = self.client.clone();
        let options = WatchOptions::new().with_prefix().with_start_revision(revision + 1);
        let mut stream = match self
            .config
            .within("watch the registry", client.watch(self.config.servers_prefix(), Some(options)))
            .await
        {
            Ok(stream) => stream,
            Err(e) => return e,
        };
        loop {
            let reply = match stream.message().await {
                Ok(Some(reply)) => reply,
                Ok(None) => {
                    return DiscoveryError::Etcd { what: "watch the registry", reason: "the watch ended".into() }
                }
                Err(e) => return self.config.error("watch the registry", e),
            };
            if reply.canceled() {
                let reason = format!("the watch was canceled: {}", reply.cancel_reason());
                return DiscoveryError::Etcd { what: "watch the registry", reason };
            }
            for event in reply.events() {
                let Some(kv) = event.kv() else { continue };
                let key = String::from_utf8_lossy(kv.key()).into_owned();
                match event.event_type() {
                    etcd_client::EventType::Put => _ = self.put(key, kv.value()),
                    etcd_client::EventType::Delete => self.delete(&key),
                }
            }
        }
    }

    /// Follows the registry; when the watch fails, keeps the members it has and reads the
    /// registry again (with backoff) until etcd answers, then follows on.
    async fn run(mut self, mut revision: i64) {
        let mut backoff = Backoff::up_to(RETRY_CEILING);
        loop {
            let mut reason = self.follow(revision).await;
            loop {
                let retry_in = backoff.next_delay();
                let servers = self.members.len();
                (self.tell)(RegistryEvent::WatchLost { reason: reason.to_string(), servers, retry_in });
                tokio::time::sleep(retry_in).await;
                match self.read_all().await {
                    Ok((read, _)) => {
                        revision = read;
                        (self.tell)(RegistryEvent::WatchRestored { servers: self.members.len() });
                        backoff.reset();
                        break;
                    }
                    Err(e) => reason = e,
                }
            }
        }
    }
}

/// What a member's task needs to keep its connection open.
struct Connection {
    key: String,
    address: String,
    reported: Arc<AtomicUsize>,
    place: Arc<Place>,
    connect: ClientConfig,
    tell: Tell,
}

impl Connection {
    /// Connects, joins the pool, and when the connection fails, leaves the pool and connects
    /// again with backoff; until aborted (the key went). `tried` hears when the first try is
    /// over.
    async fn keep(self, tried: oneshot::Sender<()>) {
        let mut tried = Some(tried);
        let mut backoff = Backoff::up_to(RETRY_CEILING);
        loop {
            let connector = TcpConnector { addr: self.address.clone() };
            let error = match PrefillClient::connect(&connector, self.connect.clone()).await {
                Ok(client) => {
                    let Some((index, client)) = self.place.join(client, self.reported.clone()) else { return };
                    let (key, address) = (self.key.clone(), self.address.clone());
                    (self.tell)(RegistryEvent::Joined { key, address, index });
                    first_try_over(&mut tried);
                    backoff.reset();
                    let error = client.closed().await;
                    self.place.vacate();
                    error
                }
                Err(error) => error,
            };
            first_try_over(&mut tried);
            let retry_in = backoff.next_delay();
            let (key, address) = (self.key.clone(), self.address.clone());
            (self.tell)(RegistryEvent::ConnectionFailed { key, address, error, retry_in });
            tokio::time::sleep(retry_in).await;
        }
    }
}

/// Tells `tried`, once, that the first connection try is over.
fn first_try_over(tried: &mut Option<oneshot::Sender<()>>) {
    if let Some(tried) = tried.take() {
        // `start` may have stopped waiting.
        _ = tried.send(());
    }
}
