//! The prefill server: accepts decode-side connections, prefills submitted prompts on an engine
//! thread, holds each request's layers under a lease, announces every layer as soon as it is
//! computed, and serves pulls (or pushes layers, in push mode) until the request is completed.

use std::collections::{hash_map::Entry, HashMap};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use burn_kvcompress::cache::{HostBuffer, LayerState};
use tokio::sync::{mpsc, watch};

use super::blocks::{blocks_per_frame, coalesce, span, split};
use super::held::{HeldLayer, LiveBytes};
use super::reads::ReadableMemory;
use super::store::{Store, StoreStats};
use crate::engine::PrefillEngine;
use crate::error::TransferError;
use crate::rate::TokenBucket;
use crate::state_codec::EncodedState;
use crate::transport::{write_frames, FrameReader, FrameWriter, Listener, Outgoing, Stream, WireCounter};
use crate::wire::{
    crc_concat, BlockFrame, BlockRange, ErrorCode, FrameCodec, FrameKind, Layout, Message, Mode, BLOCK_HEADER_LEN,
};
use crate::SchemeDescriptor;

/// How a prefill server behaves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Bytes per block.
    pub block_size: u32,
    /// Largest frame payload sent or accepted, bytes.
    pub max_payload: u32,
    /// How long a request's state is held after the last pull (or its prefill) without a
    /// completion before it is freed.
    pub lease: Duration,
    /// Emulated rate of this server's outgoing link, Gbit/s (`None`: unpaced). All of its
    /// connections and their data streams share it, as they would share a NIC.
    pub link_gbps: Option<f64>,
    /// Longest prompt accepted, tokens.
    pub max_prompt_tokens: usize,
    /// How long the peer may take to send its Hello or to accept a frame.
    pub io_timeout: Duration,
    /// Memory that decode sides may read layers from (`Mode::Read`; `None`: such connections
    /// are refused). Each stored layer is copied there, unless it has no room left.
    pub readable: Option<ReadableMemory>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            block_size: 256 * 1024,
            max_payload: 4 * 1024 * 1024 + 64,
            lease: Duration::from_secs(30),
            link_gbps: None,
            max_prompt_tokens: 32 * 1024,
            io_timeout: Duration::from_secs(30),
            readable: None,
        }
    }
}

/// Counters of a running server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerStats {
    /// What the store holds.
    pub store: StoreStats,
    /// Bytes written to all connections.
    pub bytes_sent: u64,
    /// Bytes read from all connections.
    pub bytes_received: u64,
    /// Bytes of serialized layers still alive: those the store holds, and those that frames
    /// queued for (or being written to) a connection still reference after the store let them go
    /// (a stalled peer's, until the write times out). 0 when the server is idle.
    pub live_bytes: usize,
}

/// What the engine thread tells a connection.
enum Event {
    /// `address`: where the layer lies in readable memory, if it was placed there.
    Ready {
        request: u64,
        layer: u32,
        bytes: u64,
        crc: u32,
        address: Option<u64>,
    },
    Done {
        request: u64,
        logits: Vec<f32>,
    },
    Failed {
        request: u64,
        message: String,
    },
}

struct Job {
    request: u64,
    tokens: Vec<u32>,
    events: mpsc::UnboundedSender<Event>,
}

/// The data streams attached to one connection (see [`Message::Attach`]).
type DataStreams = Arc<Mutex<Vec<mpsc::Sender<Outgoing>>>>;

struct Shared {
    store: Store,
    /// Bytes of every layer this server stored that is still referenced.
    live: LiveBytes,
    /// Open connections that may attach data streams, by the session id of their Hello.
    sessions: Mutex<HashMap<u64, DataStreams>>,
    descriptor: SchemeDescriptor,
    layout: Layout,
    config: ServerConfig,
    jobs: std_mpsc::Sender<Job>,
    sent: WireCounter,
    received: WireCounter,
    /// The emulated outgoing link, shared by every stream.
    link: Option<TokenBucket>,
}

/// A prefill server. Cloning shares it.
#[derive(Clone)]
pub struct PrefillServer {
    shared: Arc<Shared>,
}

impl PrefillServer {
    /// Starts the engine thread; [`serve`](Self::serve) then accepts connections.
    pub fn new<E: PrefillEngine>(engine: E, config: ServerConfig) -> Self {
        let (jobs, queue) = std_mpsc::channel();
        let layout = Layout { block_size: config.block_size, shape: engine.shape() };
        let shared = Arc::new(Shared {
            store: Store::new(config.lease),
            live: LiveBytes::default(),
            sessions: Mutex::default(),
            descriptor: engine.descriptor(),
            layout,
            link: config.link_gbps.map(TokenBucket::from_gbps),
            config,
            jobs,
            sent: WireCounter::default(),
            received: WireCounter::default(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("prefill-engine".into())
            .spawn(move || run_engine(engine, queue, weak))
            .expect("spawning the prefill thread");
        Self { shared }
    }

    /// The layout sent to every connection.
    pub fn layout(&self) -> Layout {
        self.shared.layout
    }

    /// What its caches are (a connection's Hello must match it).
    pub fn descriptor(&self) -> &SchemeDescriptor {
        &self.shared.descriptor
    }

    /// Its load: how many requests it holds (submitted and not yet completed, failed or
    /// expired), updated whenever that changes.
    pub fn load(&self) -> watch::Receiver<usize> {
        self.shared.store.load()
    }

    /// Current counters.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            store: self.shared.store.stats(),
            bytes_sent: self.shared.sent.get(),
            bytes_received: self.shared.received.get(),
            live_bytes: self.shared.live.get(),
        }
    }

    /// Frees requests on completions that arrive outside connections (transfer-engine
    /// notifications), without keeping the server alive.
    pub fn completions(&self) -> Completions {
        Completions(Arc::downgrade(&self.shared))
    }

    /// Accepts connections until the listener fails, serving each on its own task, and expires
    /// leases in the background. Call inside a tokio runtime.
    pub async fn serve<L: Listener>(&self, mut listener: L) -> std::io::Result<()> {
        let reaper = tokio::spawn(reap(Arc::downgrade(&self.shared)));
        let result = loop {
            match listener.accept().await {
                Ok(stream) => _ = tokio::spawn(connection(self.shared.clone(), stream)),
                Err(e) => break Err(e),
            }
        };
        reaper.abort();
        result
    }
}

/// Frees requests of a [`PrefillServer`] as `Complete` messages do; see
/// [`PrefillServer::completions`].
#[derive(Clone)]
pub struct Completions(std::sync::Weak<Shared>);

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.strong_count() > 0 { "Completions" } else { "Completions (server gone)" })
    }
}

impl Completions {
    /// Frees `request`: `Some(true)` if it was held, `None` once the server is gone.
    pub fn complete(&self, request: u64) -> Option<bool> {
        self.0.upgrade().map(|shared| shared.store.remove(request))
    }
}

/// Frees expired requests a few times per lease.
async fn reap(shared: std::sync::Weak<Shared>) {
    let period = match shared.upgrade() {
        Some(s) => (s.config.lease / 4).max(Duration::from_millis(5)),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    loop {
        tick.tick().await;
        match shared.upgrade() {
            Some(s) => _ = s.store.expire(Instant::now()),
            None => return,
        }
    }
}

fn run_engine<E: PrefillEngine>(mut engine: E, queue: std_mpsc::Receiver<Job>, shared: std::sync::Weak<Shared>) {
    let num_layers = engine.shape().num_layers as usize;
    while let Ok(job) = queue.recv() {
        let Some(shared) = shared.upgrade() else { return };
        // Which layers were published, and the first misuse of `publish`.
        let published = std::sync::Mutex::new((vec![false; num_layers], None::<String>));
        let publish = |layer: usize, state: LayerState| {
            let mut guard = published.lock().unwrap_or_else(|p| p.into_inner());
            let (seen, misuse) = &mut *guard;
            match seen.get_mut(layer) {
                Some(false) => seen[layer] = true,
                // Announced already (and maybe pulled), or not a layer: nothing is sent.
                _ => {
                    misuse.get_or_insert(format!("layer {layer} published twice or beyond the {num_layers} layers"));
                    return;
                }
            }
            drop(guard);
            let blob = hold(&shared, EncodedState::new(state)).counted_in(&shared.live);
            let (len, crc, address) = (blob.len() as u64, blob.crc(), blob.address());
            if shared.store.put(job.request, layer, blob) {
                let event = Event::Ready { request: job.request, layer: layer as u32, bytes: len, crc, address };
                _ = job.events.send(event);
            }
        };
        let outcome = engine.prefill(&job.tokens, &publish);
        let (seen, misuse) = published.into_inner().unwrap_or_else(|p| p.into_inner());
        let missing = seen.iter().filter(|&&s| !s).count();
        let event = match (outcome, misuse) {
            (Err(message), _) | (Ok(_), Some(message)) => Err(message),
            (Ok(_), None) if missing > 0 => {
                Err(format!("the engine left {missing} of {num_layers} layers unpublished"))
            }
            (Ok(logits), None) => Ok(Event::Done { request: job.request, logits }),
        }
        // The connection frees a failed request when it reports the failure, in order with the
        // pulls it serves: a pull that arrived before sees the layer, one after is answered by
        // the failure the decode side already has.
        .unwrap_or_else(|message| Event::Failed { request: job.request, message });
        _ = job.events.send(event);
    }
}

/// A layer as the server holds it: placed in readable memory where there is room, else where
/// the engine left its tensors.
fn hold(shared: &Shared, state: EncodedState) -> HeldLayer {
    let block_size = shared.layout.block_size;
    let placement = shared.config.readable.as_ref().and_then(|r| HostBuffer::allocated(state.len(), &r.allocator));
    match placement {
        Some(buffer) => HeldLayer::placed(state, block_size, buffer),
        None => HeldLayer::new(state, block_size),
    }
}

/// Serves one stream until it ends: a connection's control stream (opened by a Hello), or a data
/// stream (opened by an Attach, then only written to, until its connection ends).
async fn connection<S: Stream>(shared: Arc<Shared>, stream: S) {
    let (rd, wr) = tokio::io::split(stream);
    let codec = FrameCodec::new(shared.config.max_payload);
    let mut reader = FrameReader::new(rd, codec, shared.received.clone());
    let (frames_tx, frames) = mpsc::channel(16);
    let read_task = tokio::spawn(async move {
        loop {
            let frame = reader.next().await;
            let stop = matches!(frame, Err(ref e) if !matches!(e, TransferError::Corrupt(_)));
            if frames_tx.send(frame).await.is_err() || stop {
                return;
            }
        }
    });
    let (out, out_rx) = mpsc::channel(8);
    let writer = FrameWriter::new(wr, shared.link.clone(), shared.sent.clone());
    let write_task = tokio::spawn(write_frames(writer, out_rx, shared.config.io_timeout));
    let (events_tx, events) = mpsc::unbounded_channel();
    let mut conn = Connection { shared, codec, out, events_tx, mode: Mode::Pull, session: None, next_stream: 0 };
    // The connection's outcome is reported to the peer in an Error frame where possible; a
    // broken transport has no one left to tell.
    _ = conn.run(frames, events).await;
    if let Some((session, _)) = conn.session.take() {
        conn.shared.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(&session);
    }
    // A data stream's writer lives on in its connection's registry until that connection ends.
    drop(conn);
    _ = write_task.await;
    read_task.abort();
}

struct Connection {
    shared: Arc<Shared>,
    codec: FrameCodec,
    out: mpsc::Sender<Outgoing>,
    events_tx: mpsc::UnboundedSender<Event>,
    mode: Mode,
    /// This connection's session id and attached data streams (after its Hello).
    session: Option<(u64, DataStreams)>,
    /// The data stream that carries the next pulled frame (round robin).
    next_stream: usize,
}

type Frames = mpsc::Receiver<Result<crate::wire::Frame, TransferError>>;

impl Connection {
    async fn send(&self, message: &Message) -> Result<(), TransferError> {
        self.send_bytes(Outgoing::Bytes(message.encode(&self.codec)?)).await
    }

    async fn send_bytes(&self, frame: Outgoing) -> Result<(), TransferError> {
        self.out.send(frame).await.map_err(|_| TransferError::Closed)
    }

    async fn fail(&self, code: ErrorCode, request: u64, message: String) -> Result<(), TransferError> {
        self.send(&Message::Error { code, request, message }).await
    }

    async fn run(
        &mut self,
        mut frames: Frames,
        mut events: mpsc::UnboundedReceiver<Event>,
    ) -> Result<(), TransferError> {
        let first = tokio::time::timeout(self.shared.config.io_timeout, frames.recv())
            .await
            .map_err(|_| TransferError::Timeout(self.shared.config.io_timeout))?;
        match self.decode(first).await? {
            Message::Hello { descriptor, mode, session } if descriptor == self.shared.descriptor => {
                let streams = DataStreams::default();
                let registered = match self.shared.sessions.lock().unwrap_or_else(|p| p.into_inner()).entry(session) {
                    Entry::Occupied(_) => false,
                    Entry::Vacant(slot) => {
                        slot.insert(streams.clone());
                        true
                    }
                };
                if !registered {
                    return self.fail(ErrorCode::Refused, 0, format!("session id {session} is in use")).await;
                }
                self.session = Some((session, streams));
                self.mode = mode;
                let agent = match (mode, &self.shared.config.readable) {
                    (Mode::Read, None) => {
                        let why = "this prefill server has no memory registered for one-sided reads".to_string();
                        return self.fail(ErrorCode::Refused, 0, why).await;
                    }
                    (Mode::Read, Some(readable)) => Some(Message::Agent { metadata: readable.metadata.clone() }),
                    _ => None,
                };
                self.send(&Message::Layout(self.shared.layout)).await?;
                if let Some(agent) = agent {
                    self.send(&agent).await?;
                }
            }
            Message::Attach { session } => return self.attach(session).await,
            Message::Hello { descriptor, .. } => {
                let message = format!(
                    "the decode side expects {descriptor}, this prefill server holds {}",
                    self.shared.descriptor
                );
                return self.fail(ErrorCode::Incompatible, 0, message).await;
            }
            other => return self.fail(ErrorCode::Malformed, 0, format!("expected Hello, got {other:?}")).await,
        }
        loop {
            tokio::select! {
                frame = frames.recv() => {
                    let message = self.decode(frame).await?;
                    self.on_message(message).await?;
                }
                Some(event) = events.recv() => self.on_event(event).await?,
            }
        }
    }

    /// Hands this stream's writer to the connection of `session`, which sends pulled blocks over
    /// it until that connection ends.
    async fn attach(&self, session: u64) -> Result<(), TransferError> {
        let streams = self.shared.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(&session).cloned();
        match streams {
            Some(streams) => {
                streams.lock().unwrap_or_else(|p| p.into_inner()).push(self.out.clone());
                Ok(())
            }
            None => self.fail(ErrorCode::Refused, 0, format!("no open connection has session id {session}")).await,
        }
    }

    /// Where the next frame of pulled blocks goes: the attached data streams in turn, or this
    /// stream when none is attached. Pushed blocks stay on this stream, behind their Ready.
    fn block_stream(&mut self) -> mpsc::Sender<Outgoing> {
        let Some((_, streams)) = &self.session else { return self.out.clone() };
        let streams = streams.lock().unwrap_or_else(|p| p.into_inner());
        if self.mode == Mode::Push || streams.is_empty() {
            return self.out.clone();
        }
        self.next_stream = (self.next_stream + 1) % streams.len();
        streams[self.next_stream].clone()
    }

    /// The next message; a broken frame is reported to the peer and ends the connection.
    async fn decode(&self, frame: Option<Result<crate::wire::Frame, TransferError>>) -> Result<Message, TransferError> {
        let error = match frame.ok_or(TransferError::Closed).and_then(|f| f).map(Message::decode) {
            Ok(Ok(message)) => return Ok(message),
            Ok(Err(e)) => TransferError::from(e),
            Err(e) => e,
        };
        if !matches!(error, TransferError::Closed | TransferError::Io(_) | TransferError::Truncated(_)) {
            self.fail(ErrorCode::Malformed, 0, error.to_string()).await?;
        }
        Err(error)
    }

    async fn on_message(&mut self, message: Message) -> Result<(), TransferError> {
        match message {
            Message::Submit { request, tokens } => {
                let max = self.shared.config.max_prompt_tokens;
                if tokens.is_empty() || tokens.len() > max {
                    let why = format!("prompt of {} tokens (1..={max} accepted)", tokens.len());
                    return self.fail(ErrorCode::Refused, request, why).await;
                }
                if !self.shared.store.insert(request, self.shared.layout.shape.num_layers as usize) {
                    return self.fail(ErrorCode::Refused, request, format!("request id {request} is in use")).await;
                }
                let job = Job { request, tokens, events: self.events_tx.clone() };
                if self.shared.jobs.send(job).is_err() {
                    self.shared.store.remove(request);
                    return self.fail(ErrorCode::Prefill, request, "the prefill engine stopped".into()).await;
                }
                Ok(())
            }
            Message::Pull(ranges) => {
                for range in coalesce(ranges) {
                    self.serve(range).await?;
                }
                Ok(())
            }
            Message::Complete { request } => {
                self.shared.store.remove(request);
                Ok(())
            }
            other => {
                let message = format!("unexpected message from the decode side: {other:?}");
                self.fail(ErrorCode::Malformed, 0, message.clone()).await?;
                Err(TransferError::Protocol(message))
            }
        }
    }

    async fn on_event(&mut self, event: Event) -> Result<(), TransferError> {
        match event {
            Event::Ready { request, layer, bytes, crc, address } => {
                let ready = match (self.mode, address) {
                    (Mode::Read, Some(address)) => Message::ReadyAt { request, layer, bytes, crc, address },
                    _ => Message::Ready { request, layer, bytes, crc },
                };
                self.send(&ready).await?;
                if self.mode == Mode::Push {
                    let count = self.shared.layout.blocks(bytes) as u32;
                    self.serve(BlockRange { request, layer, first: 0, count }).await?;
                }
                Ok(())
            }
            Event::Done { request, logits } => self.send(&Message::Done { request, logits }).await,
            Event::Failed { request, message } => {
                self.shared.store.remove(request);
                self.fail(ErrorCode::Prefill, request, message).await
            }
        }
    }

    /// Sends the blocks of `range` in as few frames as the payload cap allows.
    async fn serve(&mut self, range: BlockRange) -> Result<(), TransferError> {
        let BlockRange { request, layer, .. } = range;
        let Some(blob) = self.shared.store.get(request, layer as usize) else {
            let why =
                format!("layer {layer} of request {request} is not held (unknown, completed, expired or not computed)");
            return self.fail(ErrorCode::UnknownRequest, request, why).await;
        };
        let block_size = self.shared.layout.block_size;
        let per_frame = blocks_per_frame(&self.shared.layout, self.shared.config.max_payload);
        for piece in split(range, per_frame) {
            let Some((start, end)) = span(block_size, blob.len(), piece.first, piece.count) else {
                let why =
                    format!("blocks {}+{} are outside layer {layer} of request {request}", piece.first, piece.count);
                return self.fail(ErrorCode::Refused, request, why).await;
            };
            let block_header = BlockFrame::header(request, layer, piece.first);
            let payload_crc =
                crc_concat(crc32fast::hash(&block_header), blob.range_crc(piece.first, piece.count), end - start);
            let (frame_header, trailer) =
                self.codec.envelope_of(FrameKind::Block, BLOCK_HEADER_LEN + end - start, payload_crc)?;
            let head = [&frame_header[..], &block_header].concat();
            let frame = Outgoing::Scattered { head, body: blob.clone(), start, end, tail: trailer };
            self.block_stream().send(frame).await.map_err(|_| TransferError::Closed)?;
        }
        Ok(())
    }
}
