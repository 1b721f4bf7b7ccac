//! The decode side of one connection: submits prompts, pulls each layer as soon as the prefill
//! server announces it, reassembles and checks it, re-pulls what a corrupt frame lost, and
//! completes the request (freeing the server's memory) once it holds every layer and the logits.
//!
//! Each stream has a reader task that decodes its frames and lands their blocks in their layers
//! ([`Landing`]); one session task owns the requests and hears of everything else.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use burn_kvcompress::cache::{HostAllocator, LayerState};
use tokio::io::AsyncRead;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::blocks::{MisplacedBlocks, Reassembly};
use super::buffers::BufferPool;
use super::landing::{Landed, Landing, Reserved};
use super::reads::{PeerReads, ReadPiece, RemoteReads};
use crate::error::TransferError;
use crate::rate::TokenBucket;
use crate::state_codec::decode_state;
use crate::transport::{write_frames, Connector, FrameReader, FrameWriter, Outgoing, Placed, WireCounter};
use crate::wire::{crc_par, BlockFrame, BlockRange, ErrorCode, FrameCodec, FrameKind, Layout, Message, Mode};
use crate::SchemeDescriptor;

/// How a decode-side connection behaves.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// What this side's caches are (checked by the server).
    pub descriptor: SchemeDescriptor,
    /// Pull (default) or push.
    pub mode: Mode,
    /// Largest frame payload accepted or sent, bytes.
    pub max_payload: u32,
    /// Longest silence from the server while a request is outstanding (also bounds the
    /// handshake).
    pub io_timeout: Duration,
    /// Emulated link rate of this side's writes, Gbit/s.
    pub link_gbps: Option<f64>,
    /// Largest layer state accepted, bytes (a hostile announcement cannot allocate more).
    pub max_layer_bytes: u64,
    /// Re-pulls after corrupt frames before a request fails.
    pub max_repulls: u32,
    /// Idle receive buffers kept for reuse, bytes: a layer's buffer comes back when the caller
    /// drops the last tensor of its state (see [`BufferPool`]). With
    /// `receive_pool_follows_load`, the least the pool may keep.
    pub receive_pool_bytes: usize,
    /// Whether the receive pool may also keep as many bytes as the caller ever held at once
    /// ([`BufferPool::following_load`]), so that requests larger than `receive_pool_bytes` still
    /// land in recycled buffers (a fresh buffer costs a page fault per 4 KiB). Off: the pool
    /// keeps at most `receive_pool_bytes`.
    pub receive_pool_follows_load: bool,
    /// Where new receive buffers are allocated (the global allocator when `None`): the decode
    /// device's page-locked memory
    /// ([`device_host_allocator`](burn_kvcompress::cache::device_host_allocator)) makes importing
    /// a received state one DMA per tensor.
    pub receive_allocator: Option<Arc<dyn HostAllocator>>,
    /// Extra TCP streams that carry pulled blocks beside the control stream (0: everything on
    /// one stream). One stream's frames are read and checked by one core; several streams let
    /// several cores share a fast link.
    pub data_streams: usize,
    /// The transfer engine of `Mode::Read` (required by it): layers are received in its
    /// memory ([`RemoteReads::allocator`], instead of `receive_allocator`'s).
    pub reads: Option<Arc<dyn RemoteReads>>,
}

impl ClientConfig {
    /// Defaults for a descriptor: pull mode, 4 MiB frames, 30 s timeout, 1 GiB layers, 3 re-pulls,
    /// recycled receive buffers up to 256 MiB or the load's peak if larger (from the global
    /// allocator), no data streams.
    pub fn new(descriptor: SchemeDescriptor) -> Self {
        Self {
            descriptor,
            mode: Mode::Pull,
            max_payload: 4 * 1024 * 1024 + 64,
            io_timeout: Duration::from_secs(30),
            link_gbps: None,
            max_layer_bytes: 1 << 30,
            max_repulls: 3,
            receive_pool_bytes: 256 << 20,
            receive_pool_follows_load: true,
            receive_allocator: None,
            data_streams: 0,
            reads: None,
        }
    }
}

/// What a request yields, in order of arrival: every layer once, then the logits last.
#[derive(Debug, Clone, PartialEq)]
pub enum RequestEvent {
    /// A layer's state, checked against its checksum and decoded.
    Layer {
        /// The layer index.
        layer: usize,
        /// The state.
        state: LayerState,
    },
    /// The last prompt position's logits, `[vocab]`; the request is complete.
    Logits(Vec<f32>),
}

type Events = mpsc::UnboundedSender<Result<RequestEvent, TransferError>>;

enum Command {
    Submit { request: u64, tokens: Vec<u32>, events: Events },
}

/// A submitted request: yields its [`RequestEvent`]s.
#[derive(Debug)]
pub struct RequestHandle {
    /// The request id.
    pub request: u64,
    layout: Layout,
    events: mpsc::UnboundedReceiver<Result<RequestEvent, TransferError>>,
    _load: LoadGuard,
}

impl RequestHandle {
    /// The next event; `None` after the logits (or after an error).
    pub async fn next(&mut self) -> Option<Result<RequestEvent, TransferError>> {
        self.events.recv().await
    }

    /// The layout of the server it was submitted to.
    pub fn layout(&self) -> Layout {
        self.layout
    }
}

#[derive(Debug)]
struct LoadGuard(Arc<AtomicUsize>);

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection to one prefill server.
#[derive(Debug)]
pub struct PrefillClient {
    commands: mpsc::UnboundedSender<Command>,
    layout: Layout,
    in_flight: Arc<AtomicUsize>,
    /// Why the connection ended, once it has.
    failure: watch::Receiver<Option<TransferError>>,
    sent: WireCounter,
    received: WireCounter,
    corrupt: WireCounter,
    next_id: AtomicU64,
    salt: u64,
    peer: String,
}

impl PrefillClient {
    /// Connects, sends the Hello and waits for the server's Layout (or its refusal), then, in
    /// `Mode::Read`, for its agent metadata, and attaches `config.data_streams` data streams.
    pub async fn connect<C: Connector>(connector: &C, config: ClientConfig) -> Result<Self, TransferError> {
        let timeout = config.io_timeout;
        let reads = match (config.mode, &config.reads) {
            (Mode::Read, None) => return Err(TransferError::Protocol("mode Read needs a transfer engine".into())),
            (Mode::Read, Some(reads)) => Some(reads.clone()),
            _ => None,
        };
        let open = || async {
            let opened = tokio::time::timeout(timeout, connector.connect()).await;
            opened.map_err(|_| TransferError::Timeout(timeout))?.map_err(TransferError::from)
        };
        let salt = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ ((std::process::id() as u64) << 32);
        let session = salt.wrapping_add(SESSIONS.fetch_add(1, Ordering::Relaxed).wrapping_mul(0xD6E8_FEB8_6659_FD93));
        let (rd, wr) = tokio::io::split(open().await?);
        let codec = FrameCodec::new(config.max_payload);
        let (sent, received) = (WireCounter::default(), WireCounter::default());
        let mut reader = FrameReader::new(rd, codec, received.clone());
        let mut writer = FrameWriter::new(wr, config.link_gbps.map(TokenBucket::from_gbps), sent.clone());
        let hello = Message::Hello { descriptor: config.descriptor.clone(), mode: config.mode, session };
        writer.send(&hello.encode(&codec)?).await?;
        let layout = match reply(&mut reader, timeout).await? {
            Message::Layout(layout) => layout,
            other => return Err(unexpected("Layout", other)),
        };
        let peer = match reads {
            Some(reads) => {
                let metadata = match reply(&mut reader, timeout).await? {
                    Message::Agent { metadata } => metadata,
                    other => return Err(unexpected("Agent", other)),
                };
                let loading = tokio::task::spawn_blocking(move || reads.connect(&metadata));
                Some(loading.await.map_err(|e| TransferError::Nixl(format!("loading the peer's metadata: {e}")))??)
            }
            None => None,
        };
        let (frames_tx, frames) = mpsc::channel(16);
        let landing = Landing::default();
        for _ in 0..config.data_streams {
            let (rd, wr) = tokio::io::split(open().await?);
            let mut attach = FrameWriter::new(wr, None, sent.clone());
            attach.send(&Message::Attach { session }.encode(&codec)?).await?;
            let reader = FrameReader::new(rd, codec, received.clone());
            // The write half keeps the stream open as long as its reader runs.
            tokio::spawn(read_stream(reader, landing.clone(), frames_tx.clone(), attach));
        }
        tokio::spawn(read_stream(reader, landing.clone(), frames_tx, ()));
        let (out, out_rx) = mpsc::channel(16);
        tokio::spawn(write_frames(writer, out_rx, timeout));
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (failed, failure) = watch::channel(None);
        let corrupt = WireCounter::default();
        let buffers = match config.receive_pool_follows_load {
            true => BufferPool::following_load(config.receive_pool_bytes),
            false => BufferPool::new(config.receive_pool_bytes),
        };
        let allocator = match &config.reads {
            Some(reads) if config.mode == Mode::Read => Some(reads.allocator()),
            _ => config.receive_allocator.clone(),
        };
        let buffers = match allocator {
            Some(allocator) => buffers.allocating_with(allocator),
            None => buffers,
        };
        let (reads_tx, reads_rx) = mpsc::unbounded_channel();
        let session = Session {
            buffers,
            landing,
            codec,
            layout,
            config,
            out,
            requests: HashMap::new(),
            failure: failed,
            corrupt: corrupt.clone(),
            peer,
            reads: reads_tx,
        };
        tokio::spawn(session.run(frames, commands_rx, reads_rx));
        Ok(Self {
            commands,
            layout,
            in_flight: Arc::default(),
            failure,
            sent,
            received,
            corrupt,
            next_id: AtomicU64::new(0),
            salt,
            peer: connector.peer(),
        })
    }

    /// The server's layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Where this client is connected.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Requests submitted and not yet finished (handles alive).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Why the connection ended, if it did.
    pub fn failure(&self) -> Option<TransferError> {
        self.failure.borrow().clone()
    }

    /// Waits until the connection ends; returns why.
    pub async fn closed(&self) -> TransferError {
        let mut failure = self.failure.clone();
        let ended = match failure.wait_for(Option::is_some).await {
            Ok(failure) => failure.clone(),
            // The session task is gone without a word: its runtime shut down.
            Err(_) => None,
        };
        ended.unwrap_or(TransferError::Closed)
    }

    /// Bytes written to the connection so far.
    pub fn bytes_sent(&self) -> u64 {
        self.sent.get()
    }

    /// Bytes read from the connection so far.
    pub fn bytes_received(&self) -> u64 {
        self.received.get()
    }

    /// Corrupt Block frames received (each answered by re-pulls).
    pub fn corrupt_frames(&self) -> u64 {
        self.corrupt.get()
    }

    /// Submits a prompt for prefill.
    pub fn submit(&self, tokens: Vec<u32>) -> Result<RequestHandle, TransferError> {
        if let Some(e) = self.failure() {
            return Err(e);
        }
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let request = self.salt.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let (events, events_rx) = mpsc::unbounded_channel();
        self.commands.send(Command::Submit { request, tokens, events }).map_err(|_| TransferError::Closed)?;
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        let load = LoadGuard(self.in_flight.clone());
        Ok(RequestHandle { request, layout: self.layout, events: events_rx, _load: load })
    }
}

/// The next message of a handshake; the peer's refusal as its error.
async fn reply<R: AsyncRead + Unpin>(reader: &mut FrameReader<R>, timeout: Duration) -> Result<Message, TransferError> {
    let frame = tokio::time::timeout(timeout, reader.next()).await.map_err(|_| TransferError::Timeout(timeout))??;
    match Message::decode(frame)? {
        Message::Error { code, message, .. } => Err(TransferError::Remote { code, message }),
        message => Ok(message),
    }
}

fn unexpected(expected: &str, got: Message) -> TransferError {
    TransferError::Protocol(format!("expected {expected}, got {got:?}"))
}

/// Connections opened by this process so far (salts session ids).
static SESSIONS: AtomicU64 = AtomicU64::new(0);

/// What a stream's reader passes to the session.
#[derive(Debug)]
enum Arrival {
    /// A message for the session, including Block frames of layers not open in the landing.
    Message(Message),
    /// What landing blocks did to their layer.
    Landed(LayerNews),
}

/// What landed blocks did that the session must act on.
#[derive(Debug)]
enum LayerNews {
    /// They completed the layer.
    Completed { request: u64, layer: u32 },
    /// They do not fit it.
    Misplaced { request: u64, error: MisplacedBlocks },
}

impl Arrival {
    /// What landing `block` gave, if the session must hear of it.
    fn of_landing(block: BlockFrame, landed: Landed) -> Option<Self> {
        let BlockFrame { request, layer, .. } = block;
        match landed {
            Landed::NotOpen => Some(Self::Message(Message::Block(block))),
            Landed::Stored => None,
            Landed::Completed => Some(Self::Landed(LayerNews::Completed { request, layer })),
            Landed::Misplaced(error) => Some(Self::Landed(LayerNews::Misplaced { request, error })),
        }
    }
}

/// Reads one stream until it fails or the session is gone: reads large Block frames straight
/// into their layers, lands other Block frames there, and passes everything else to the session.
/// `keep` lives (holding the stream's write half, say) as long as this runs.
async fn read_stream<R: AsyncRead + Unpin, K>(mut reader: FrameReader<R>, landing: Landing, frames: FramesTx, keep: K) {
    loop {
        let arrival = match reader.next_placed(|header, len| landing.reserve(header, len)).await {
            Ok(Placed::Block { target, data_crc, .. }) => {
                let (request, layer) = (target.request, target.layer);
                match landing.fill(target, data_crc) {
                    Landed::Completed => Ok(Arrival::Landed(LayerNews::Completed { request, layer })),
                    _ => continue,
                }
            }
            Ok(Placed::Frame(frame)) => match Message::decode(frame) {
                Ok(Message::Block(block)) => {
                    let landed = landing.land(&block);
                    match Arrival::of_landing(block, landed) {
                        Some(arrival) => Ok(arrival),
                        None => continue,
                    }
                }
                Ok(message) => Ok(Arrival::Message(message)),
                Err(e) => Err(e.into()),
            },
            Err(e) => Err(e),
        };
        let stop = matches!(arrival, Err(ref e) if !matches!(e, TransferError::Corrupt(_)));
        if frames.send(arrival).await.is_err() || stop {
            drop(keep);
            return;
        }
    }
}

/// Reads a whole layer, announced at `address` in the server's memory, into its reserved place,
/// and tells the session (through `news`) once it is in and hashed, so the session checks it as
/// it checks a pulled layer. A layer that fails its checksum is pulled again as usual.
fn read_layer(
    peer: &dyn PeerReads,
    address: u64,
    mut reserved: Reserved,
    landing: Landing,
    news: mpsc::UnboundedSender<ReadNews>,
) {
    let local = reserved.as_mut();
    let piece = ReadPiece { remote: address, local: local.as_mut_ptr() as usize, len: local.len() };
    let (request, layer) = (reserved.request, reserved.layer);
    peer.read(
        vec![piece],
        Box::new(move |result| {
            let landed = result.map(|()| {
                let crc = crc_par(reserved.as_mut());
                match landing.fill(reserved, crc) {
                    Landed::Completed => Some(LayerNews::Completed { request, layer }),
                    _ => None,
                }
            });
            // The session may be gone (its connection failed meanwhile): nothing to tell.
            _ = news.send(landed);
        }),
    );
}

/// One request being received.
struct Pending {
    events: Events,
    layers: Vec<LayerSlot>,
    delivered: usize,
    logits: Option<Vec<f32>>,
    repulls: u32,
}

#[derive(PartialEq)]
enum LayerSlot {
    Waiting,
    /// Open in the landing.
    Receiving,
    Delivered,
}

/// The connection's state, owned by one task.
struct Session {
    codec: FrameCodec,
    layout: Layout,
    config: ClientConfig,
    out: mpsc::Sender<Outgoing>,
    requests: HashMap<u64, Pending>,
    failure: watch::Sender<Option<TransferError>>,
    corrupt: WireCounter,
    /// Where layers are received.
    buffers: BufferPool,
    /// The layers being received, shared with the stream readers.
    landing: Landing,
    /// Reads from the server's memory (mode Read).
    peer: Option<Arc<dyn PeerReads>>,
    /// Where reads report what they landed (from the engine's thread).
    reads: mpsc::UnboundedSender<ReadNews>,
}

/// What a one-sided read did: landed blocks (`None`: nothing the session must act on), or
/// failed.
type ReadNews = Result<Option<LayerNews>, TransferError>;

type Frames = mpsc::Receiver<Result<Arrival, TransferError>>;
type FramesTx = mpsc::Sender<Result<Arrival, TransferError>>;

impl Session {
    async fn run(
        mut self,
        mut frames: Frames,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut reads: mpsc::UnboundedReceiver<ReadNews>,
    ) {
        let timeout = self.config.io_timeout;
        let mut deadline = Instant::now() + timeout;
        // Whether the client is still there to submit requests.
        let mut submitting = true;
        let error = loop {
            let waiting = !self.requests.is_empty();
            if !submitting && !waiting {
                // The client was dropped (a pool let the server go) and its last request is
                // over: the connection closes instead of idling until the runtime ends.
                break TransferError::Closed;
            }
            tokio::select! {
                command = commands.recv(), if submitting => match command {
                    Some(Command::Submit { request, tokens, events }) => {
                        if self.requests.is_empty() {
                            deadline = Instant::now() + timeout;
                        }
                        if let Err(e) = self.submit(request, tokens, events).await {
                            break e;
                        }
                    }
                    None => submitting = false,
                },
                frame = frames.recv() => {
                    deadline = Instant::now() + timeout;
                    let result = match frame {
                        None => Err(TransferError::Closed),
                        Some(Err(TransferError::Corrupt(FrameKind::Block))) => {
                            self.corrupt.add(1);
                            self.repull_all().await
                        }
                        Some(Err(e)) => Err(e),
                        Some(Ok(Arrival::Message(message))) => self.on_message(message).await,
                        Some(Ok(Arrival::Landed(news))) => self.on_landed(news).await,
                    };
                    if let Err(e) = result {
                        break e;
                    }
                }
                Some(news) = reads.recv() => {
                    deadline = Instant::now() + timeout;
                    let result = match news {
                        Ok(Some(news)) => self.on_landed(news).await,
                        Ok(None) => Ok(()),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = result {
                        break e;
                    }
                }
                _ = tokio::time::sleep_until(deadline), if waiting => break TransferError::Timeout(timeout),
            }
        };
        self.failure.send_replace(Some(error.clone()));
        for (_, pending) in self.requests.drain() {
            _ = pending.events.send(Err(error.clone()));
        }
    }

    async fn send(&self, message: &Message) -> Result<(), TransferError> {
        self.out.send(Outgoing::Bytes(message.encode(&self.codec)?)).await.map_err(|_| TransferError::Closed)
    }

    async fn submit(&mut self, request: u64, tokens: Vec<u32>, events: Events) -> Result<(), TransferError> {
        let layers = (0..self.layout.shape.num_layers).map(|_| LayerSlot::Waiting).collect();
        self.requests.insert(request, Pending { events, layers, delivered: 0, logits: None, repulls: 0 });
        self.send(&Message::Submit { request, tokens }).await
    }

    /// Fails one request (the connection goes on) and tells the server to free it now rather
    /// than when its lease ends.
    async fn fail(&mut self, request: u64, error: TransferError) -> Result<(), TransferError> {
        if let Some(pending) = self.requests.remove(&request) {
            self.landing.close(request);
            _ = pending.events.send(Err(error));
            self.release(request).await?;
        }
        Ok(())
    }

    /// Tells the server to free `request`: a Complete, or in mode Read a notification through
    /// the transfer engine.
    async fn release(&self, request: u64) -> Result<(), TransferError> {
        match &self.peer {
            Some(peer) => {
                peer.complete(request);
                Ok(())
            }
            None => self.send(&Message::Complete { request }).await,
        }
    }

    async fn on_message(&mut self, message: Message) -> Result<(), TransferError> {
        match message {
            Message::Ready { request, layer, bytes, crc } => self.on_ready(request, layer, bytes, crc, None).await,
            Message::ReadyAt { request, layer, bytes, crc, address } => {
                self.on_ready(request, layer, bytes, crc, Some(address)).await
            }
            Message::Block(block) => {
                let landed = self.landing.land(&block);
                match Arrival::of_landing(block, landed) {
                    // Blocks of a delivered layer (after a re-pull) or never announced.
                    Some(Arrival::Message(_)) | None => Ok(()),
                    Some(Arrival::Landed(news)) => self.on_landed(news).await,
                }
            }
            Message::Done { request, logits } => {
                if logits.len() != self.layout.shape.vocab as usize {
                    let why = format!("{} logits, the layout says {}", logits.len(), self.layout.shape.vocab);
                    return Err(TransferError::Protocol(why));
                }
                if let Some(pending) = self.requests.get_mut(&request) {
                    pending.logits = Some(logits);
                }
                self.finish_if_done(request).await
            }
            Message::Error { code, request, message } if request != 0 && code != ErrorCode::Malformed => {
                self.fail(request, TransferError::Remote { code, message }).await
            }
            Message::Error { code, message, .. } => Err(TransferError::Remote { code, message }),
            other => Err(TransferError::Protocol(format!("unexpected message from the prefill side: {other:?}"))),
        }
    }

    /// Opens an announced layer and starts its transfer: a one-sided read from `address` where
    /// the server placed it in readable memory and this side's buffer is readable too, else a
    /// pull (in push mode the server sends it unasked).
    async fn on_ready(
        &mut self,
        request: u64,
        layer: u32,
        bytes: u64,
        crc: u32,
        address: Option<u64>,
    ) -> Result<(), TransferError> {
        if bytes > self.config.max_layer_bytes {
            let why =
                format!("layer {layer} announced at {bytes} bytes, over the cap of {}", self.config.max_layer_bytes);
            return self.fail(request, TransferError::Protocol(why)).await;
        }
        let Some(pending) = self.requests.get_mut(&request) else { return Ok(()) };
        let Some(slot) = pending.layers.get_mut(layer as usize) else {
            return Err(TransferError::Protocol(format!("layer {layer} is beyond the layout")));
        };
        if *slot != LayerSlot::Waiting {
            return self.fail(request, TransferError::Protocol(format!("layer {layer} announced twice"))).await;
        }
        *slot = LayerSlot::Receiving;
        let buffer = self.buffers.take(bytes as usize);
        // A buffer of the pool's allocator lies in the engine's memory; one of the global
        // allocator (that allocator was full) cannot be read into.
        let readable = buffer.is_allocated();
        self.landing.open(request, layer, Reassembly::new(buffer, self.layout.block_size, crc));
        let read = match (&self.peer, address) {
            (Some(peer), Some(address)) if readable => {
                self.landing.reserve_piece(request, layer, 0, bytes as usize).map(|r| (peer, address, r))
            }
            _ => None,
        };
        if let Some((peer, address, reserved)) = read {
            read_layer(peer.as_ref(), address, reserved, self.landing.clone(), self.reads.clone());
        } else if self.config.mode != Mode::Push {
            let count = self.layout.blocks(bytes) as u32;
            self.send(&Message::Pull(vec![BlockRange { request, layer, first: 0, count }])).await?;
        }
        Ok(())
    }

    /// Acts on what landed blocks did: delivers a completed layer, fails a request whose blocks
    /// do not fit.
    async fn on_landed(&mut self, news: LayerNews) -> Result<(), TransferError> {
        match news {
            LayerNews::Completed { request, layer } => self.on_complete(request, layer).await,
            LayerNews::Misplaced { request, error } => {
                self.fail(request, TransferError::Protocol(error.to_string())).await
            }
        }
    }

    /// Checks a layer that its last blocks completed and delivers it, or re-pulls it whole when
    /// its checksum is wrong.
    async fn on_complete(&mut self, request: u64, layer: u32) -> Result<(), TransferError> {
        let Some(pending) = self.requests.get_mut(&request) else { return Ok(()) };
        let Some(mut received) = self.landing.take(request, layer) else { return Ok(()) };
        if received.checksum() != received.crc {
            received.reset();
            self.landing.open(request, layer, received);
            return self.repull(request).await;
        }
        pending.layers[layer as usize] = LayerSlot::Delivered;
        match decode_state(self.buffers.share(received.into_buffer())) {
            Ok(state) => {
                pending.delivered += 1;
                _ = pending.events.send(Ok(RequestEvent::Layer { layer: layer as usize, state }));
                self.finish_if_done(request).await
            }
            Err(e) => self.fail(request, e.into()).await,
        }
    }

    /// Sends the logits and a Complete once every layer is delivered.
    async fn finish_if_done(&mut self, request: u64) -> Result<(), TransferError> {
        let done = self.requests.get(&request).is_some_and(|p| p.logits.is_some() && p.delivered == p.layers.len());
        if !done {
            return Ok(());
        }
        if let Some(Pending { events, logits: Some(logits), .. }) = self.requests.remove(&request) {
            self.landing.close(request);
            self.release(request).await?;
            _ = events.send(Ok(RequestEvent::Logits(logits)));
        }
        Ok(())
    }

    /// Pulls again every block of `request` not received yet.
    async fn repull(&mut self, request: u64) -> Result<(), TransferError> {
        let Some(pending) = self.requests.get_mut(&request) else { return Ok(()) };
        let ranges: Vec<BlockRange> = pending
            .layers
            .iter()
            .enumerate()
            .filter(|(_, slot)| **slot == LayerSlot::Receiving)
            .map(|(l, _)| (l, self.landing.missing(request, l as u32)))
            .flat_map(|(l, runs)| {
                runs.into_iter().map(move |(first, count)| BlockRange { request, layer: l as u32, first, count })
            })
            .collect();
        if ranges.is_empty() {
            return Ok(());
        }
        pending.repulls += 1;
        if pending.repulls > self.config.max_repulls {
            let attempts = pending.repulls - 1;
            return self.fail(request, TransferError::TooManyRepulls { request, attempts }).await;
        }
        self.send(&Message::Pull(ranges)).await
    }

    /// After a corrupt frame (whose ids are unknown), re-pulls what every request misses.
    async fn repull_all(&mut self) -> Result<(), TransferError> {
        let ids: Vec<u64> = self.requests.keys().copied().collect();
        for request in ids {
            self.repull(request).await?;
        }
        Ok(())
    }
}
