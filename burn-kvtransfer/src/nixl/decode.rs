//! The decode side: an agent, the memory it registered for receive buffers, and the thread that
//! runs every NIXL call of its connections (metadata loads, READs and their polling,
//! completion notifications), in the order the connections ask for them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use burn_kvcompress::cache::HostAllocator;
use nixl_sys::{Agent, MemType, XferDescList, XferOp, XferRequest, XferStatus};

use super::arena::Arena;
use super::engine::{completion, failed, start_agent};
use super::NixlConfig;
use crate::error::TransferError;
use crate::protocol::reads::{PeerReads, ReadDone, ReadPiece, RemoteReads};

/// How long the thread waits between two looks at unfinished READs that made no progress (the
/// UCX backend's own thread moves the bytes meanwhile).
const POLL: Duration = Duration::from_micros(20);

/// Work for the NIXL thread.
enum Job {
    /// Load a peer's metadata; reply with its agent name.
    Load { metadata: Vec<u8>, reply: Sender<Result<String, TransferError>> },
    /// Start a READ from `remote`.
    Read { remote: String, pieces: Vec<ReadPiece>, done: ReadDone },
    /// Notify `remote` that a request is complete.
    Complete { remote: String, request: u64 },
    /// A connection to `remote` ended.
    Forget { remote: String },
}

/// The decode side of NIXL, for [`ClientConfig::reads`](crate::protocol::ClientConfig::reads);
/// one serves every connection of a process.
#[derive(Debug)]
pub struct NixlDecode {
    arena: Arc<Arena>,
    jobs: Sender<Job>,
    read: Arc<AtomicU64>,
}

impl NixlDecode {
    /// Creates the agent and its backend, registers `config.memory_bytes` of host memory
    /// (allocated by `backing` where it can: page-locked memory makes importing a received
    /// layer to a device one DMA) and starts the NIXL thread.
    pub fn start(config: &NixlConfig, backing: Option<Arc<dyn HostAllocator>>) -> Result<Self, TransferError> {
        let agent = start_agent(config, "decode")?;
        let arena = Arc::new(Arena::register(&agent, config.memory_bytes, backing.as_ref())?);
        let (jobs, queue) = mpsc::channel();
        let read = Arc::new(AtomicU64::new(0));
        let counted = read.clone();
        std::thread::Builder::new()
            .name("nixl-reads".into())
            .spawn(move || run(agent, queue, counted))
            .map_err(|e| TransferError::Nixl(format!("spawning the NIXL thread: {e}")))?;
        Ok(Self { arena, jobs, read })
    }

    /// Bytes its READs have landed so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }
}

impl RemoteReads for NixlDecode {
    fn allocator(&self) -> Arc<dyn HostAllocator> {
        self.arena.clone()
    }

    fn connect(&self, metadata: &[u8]) -> Result<Arc<dyn PeerReads>, TransferError> {
        let (reply, answer) = mpsc::channel();
        let gone = || TransferError::Nixl("the NIXL thread is gone".into());
        self.jobs.send(Job::Load { metadata: metadata.to_vec(), reply }).map_err(|_| gone())?;
        let remote = answer.recv().map_err(|_| gone())??;
        Ok(Arc::new(Peer { remote, jobs: self.jobs.clone() }))
    }
}

/// Reads from one prefill agent, for one connection.
struct Peer {
    remote: String,
    jobs: Sender<Job>,
}

impl PeerReads for Peer {
    fn read(&self, pieces: Vec<ReadPiece>, done: ReadDone) {
        let job = Job::Read { remote: self.remote.clone(), pieces, done };
        if let Err(mpsc::SendError(Job::Read { done, .. })) = self.jobs.send(job) {
            done(Err(TransferError::Nixl("the NIXL thread is gone".into())));
        }
    }

    fn complete(&self, request: u64) {
        // Best effort: without the thread there is no agent to notify through, and the peer's
        // lease frees the request.
        _ = self.jobs.send(Job::Complete { remote: self.remote.clone(), request });
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        _ = self.jobs.send(Job::Forget { remote: std::mem::take(&mut self.remote) });
    }
}

/// An unfinished READ: its request, who to tell, and its bytes.
type Reading = (XferRequest, ReadDone, u64);

/// Runs jobs and polls READs until every connection and the [`NixlDecode`] are gone and no READ
/// is unfinished; counts the bytes of the READs that succeed in `read`.
fn run(agent: Agent, jobs: Receiver<Job>, read: Arc<AtomicU64>) {
    // Peers' metadata loaded, by agent name, with the connections that use it.
    let mut peers: HashMap<String, usize> = HashMap::new();
    let mut reading: Vec<Reading> = Vec::new();
    loop {
        let job = match reading.is_empty() {
            true => match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            },
            false => jobs.try_recv().ok(),
        };
        match job {
            Some(Job::Load { metadata, reply }) => {
                let loaded = agent.load_remote_md(&metadata).map_err(|e| failed("loading the peer's metadata", e));
                if let Ok(name) = &loaded {
                    *peers.entry(name.clone()).or_default() += 1;
                }
                _ = reply.send(loaded);
            }
            Some(Job::Read { remote, pieces, done }) => {
                let bytes = pieces.iter().map(|p| p.len as u64).sum();
                match start_read(&agent, &remote, &pieces) {
                    Ok(Some(request)) => reading.push((request, done, bytes)),
                    Ok(None) => {
                        read.fetch_add(bytes, Ordering::Relaxed);
                        done(Ok(()));
                    }
                    Err(e) => done(Err(e)),
                }
            }
            Some(Job::Complete { remote, request }) => {
                // Best effort, as `Peer::complete` says.
                _ = agent.send_notification(&remote, completion(request).as_bytes(), None);
            }
            Some(Job::Forget { remote }) => {
                if let Some(users) = peers.get_mut(&remote) {
                    *users -= 1;
                    if *users == 0 {
                        peers.remove(&remote);
                        // Its endpoints go; a failure leaves stale metadata of an agent name
                        // that is never reused (names carry the process id and a counter).
                        _ = agent.invalidate_remote_md(&remote);
                    }
                }
            }
            None => {
                if !poll(&agent, &mut reading, &read) {
                    std::thread::sleep(POLL);
                }
            }
        }
    }
}

/// Creates and posts one READ of `pieces` from `remote`: `None` if it completed at once.
fn start_read(agent: &Agent, remote: &str, pieces: &[ReadPiece]) -> Result<Option<XferRequest>, TransferError> {
    let list = || XferDescList::new(MemType::Dram).map_err(|e| failed("creating a descriptor list", e));
    let (mut local, mut far) = (list()?, list()?);
    for piece in pieces {
        local.add_desc(piece.local, piece.len, 0);
        far.add_desc(piece.remote as usize, piece.len, 0);
    }
    let request =
        agent.create_xfer_req(XferOp::Read, &local, &far, remote, None).map_err(|e| failed("creating a READ", e))?;
    match agent.post_xfer_req(&request, None).map_err(|e| failed("posting a READ", e))? {
        true => Ok(Some(request)),
        false => Ok(None),
    }
}

/// Looks at each unfinished READ once, telling those that ended; whether any did.
fn poll(agent: &Agent, reading: &mut Vec<Reading>, read: &AtomicU64) -> bool {
    let before = reading.len();
    let mut i = 0;
    while i < reading.len() {
        let status = agent.get_xfer_status(&reading[i].0);
        if matches!(status, Ok(XferStatus::InProgress)) {
            i += 1;
            continue;
        }
        let (request, done, bytes) = reading.swap_remove(i);
        // The request is released before its memory is handed back.
        drop(request);
        if status.is_ok() {
            read.fetch_add(bytes, Ordering::Relaxed);
        }
        done(status.map(|_| ()).map_err(|e| failed("a READ", e)));
    }
    reading.len() < before
}
