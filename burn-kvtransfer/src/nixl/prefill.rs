//! The prefill side: an agent, the memory it registered for the layers it serves, and a thread
//! that frees requests as their completion notifications arrive.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nixl_sys::{Agent, NotificationMap};

use super::arena::Arena;
use super::engine::{completed_request, failed, start_agent};
use super::NixlConfig;
use crate::error::TransferError;
use crate::protocol::{reads::ReadableMemory, Completions, PrefillServer};

/// How often the notification thread looks for notifications when none came: a completion
/// frees its request at most this much later.
const POLL: Duration = Duration::from_millis(1);

/// The servers whose requests completions free.
type Servers = Arc<Mutex<Vec<Completions>>>;

/// The prefill side of NIXL; several servers of one process may share it (their requests' ids
/// are the decode sides', unique per decode connection).
///
/// ```text
/// let nixl = NixlPrefill::start(&NixlConfig::default())?;
/// let server = PrefillServer::new(engine, ServerConfig { readable: Some(nixl.memory()), ..config });
/// nixl.free_completed(&server);
/// ```
#[derive(Debug)]
pub struct NixlPrefill {
    agent: Agent,
    memory: ReadableMemory,
    servers: Servers,
    stop: Arc<AtomicBool>,
    poller: Mutex<Option<JoinHandle<()>>>,
}

impl NixlPrefill {
    /// Creates the agent and its backend and registers `config.memory_bytes` of host memory.
    pub fn start(config: &NixlConfig) -> Result<Self, TransferError> {
        let agent = start_agent(config, "prefill")?;
        let arena = Arc::new(Arena::register(&agent, config.memory_bytes, None)?);
        // Taken after the registration: the metadata carries the registered memory.
        let metadata = agent.get_local_md().map_err(|e| failed("getting the agent's metadata", e))?;
        Ok(Self {
            agent,
            memory: ReadableMemory { allocator: arena, metadata },
            servers: Servers::default(),
            stop: Arc::default(),
            poller: Mutex::default(),
        })
    }

    /// The memory a server places its layers in ([`ServerConfig::readable`](
    /// crate::protocol::ServerConfig::readable)), with this agent's metadata.
    pub fn memory(&self) -> ReadableMemory {
        self.memory.clone()
    }

    /// Frees `server`'s requests as their completion notifications arrive (on the notification
    /// thread, started by the first call), as long as this and the server live.
    pub fn free_completed(&self, server: &PrefillServer) {
        self.servers.lock().unwrap_or_else(|p| p.into_inner()).push(server.completions());
        let mut poller = self.poller.lock().unwrap_or_else(|p| p.into_inner());
        if poller.is_none() {
            let (agent, servers, stop) = (self.agent.clone(), self.servers.clone(), self.stop.clone());
            let thread = std::thread::Builder::new()
                .name("nixl-notifications".into())
                .spawn(move || free_on_notifications(agent, servers, stop))
                .expect("spawning the NIXL notification thread");
            *poller = Some(thread);
        }
    }
}

impl Drop for NixlPrefill {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.poller.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            _ = thread.join();
        }
    }
}

/// Polls `agent`'s notifications until `stop`, freeing the request of each completion in the
/// server that holds it.
fn free_on_notifications(agent: Agent, servers: Servers, stop: Arc<AtomicBool>) {
    let Ok(mut map) = NotificationMap::new() else { return };
    while !stop.load(Ordering::Relaxed) {
        let taken = agent.get_notifications(&mut map, None).and_then(|()| map.take_notifs());
        let notifications = match taken {
            Ok(notifications) => notifications,
            // A notification that is not text fails its whole batch, and would stay in the map:
            // start again with an empty one (the leases free what the batch completed).
            Err(_) => match NotificationMap::new() {
                Ok(fresh) => {
                    map = fresh;
                    continue;
                }
                Err(_) => return,
            },
        };
        let requests: Vec<u64> = notifications.values().flatten().filter_map(|n| completed_request(n)).collect();
        if requests.is_empty() {
            std::thread::sleep(POLL);
            continue;
        }
        let servers = servers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for request in requests {
            // Only the server that holds the request frees it.
            _ = servers.iter().any(|server| server.complete(request) == Some(true));
        }
    }
}
