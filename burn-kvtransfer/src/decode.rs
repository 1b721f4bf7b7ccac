//! The decode side's use of a transfer: rebuilding a request's caches layer by layer as the
//! states arrive (or receiving the states only, to import them on another thread), with a retry
//! on another prefill server when one fails.

use std::future::Future;
use std::time::{Duration, Instant};

use burn::tensor::backend::Backend;
use burn_kvcompress::cache::{CacheGeometry, LayerCaches, LayerState, TransferableCache, TransferableScheme};

use crate::error::TransferError;
use crate::protocol::{PrefillPool, RequestEvent, RequestHandle};
use crate::wire::ModelShape;

/// A request's caches and logits, received.
#[derive(Debug)]
pub struct Received<C> {
    /// One cache per layer, batch 1.
    pub caches: LayerCaches<C>,
    /// Logits of the last prompt position, `[vocab]`.
    pub logits: Vec<f32>,
    /// The server that served it (index in the pool).
    pub server: usize,
    /// Submissions it took (1 without failures).
    pub attempts: usize,
    /// When its parts arrived, counted from the submission that succeeded.
    pub arrivals: Arrivals,
}

/// When a request's parts arrived on the decode side, each counted from its submission: until
/// the last layer, the prefill and the transfer overlap (a layer is sent once computed).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Arrivals {
    /// The first layer's state, received (and, by [`fetch`], imported into its cache).
    pub first_layer: Duration,
    /// The last layer's state, received (and, by [`fetch`], imported into its cache).
    pub last_layer: Duration,
    /// The logits (the request complete).
    pub logits: Duration,
}

/// A request's layer states and logits, received but not imported: host memory only, so it can
/// be received on one thread and imported on the thread that decodes ([`Self::import`]).
#[derive(Debug)]
pub struct ReceivedStates {
    /// One state per layer.
    pub states: Vec<LayerState>,
    /// The model shape the server announced.
    pub shape: ModelShape,
    /// Logits of the last prompt position, `[vocab]`.
    pub logits: Vec<f32>,
    /// The server that served it (index in the pool).
    pub server: usize,
    /// Submissions it took (1 without failures).
    pub attempts: usize,
    /// When its parts arrived, counted from the submission that succeeded.
    pub arrivals: Arrivals,
}

impl ReceivedStates {
    /// Imports every layer into a cache of `scheme` on `device` (on this thread's stream).
    pub fn import<B, S>(self, scheme: &S, device: &B::Device) -> Result<Received<S::Cache>, TransferError>
    where
        B: Backend,
        S: TransferableScheme<B>,
        S::Cache: TransferableCache<B>,
    {
        let mut importing = self.importing();
        while !importing.is_done() {
            importing.import_next::<B, S>(scheme, device)?;
        }
        importing.finish()
    }

    /// The states, to be imported a layer at a time ([`Importing`]).
    pub fn importing<C>(self) -> Importing<C> {
        Importing { caches: Vec::with_capacity(self.states.len()), received: self }
    }

    /// Bytes of every layer's state.
    pub fn bytes(&self) -> usize {
        self.states.iter().map(LayerState::byte_len).sum()
    }
}

/// A request's received states being imported a layer at a time, in layer order: a thread that
/// decodes other requests meanwhile can spread the uploads over its steps instead of stalling
/// them all for the whole cache. Each layer's host copy is freed once it is imported.
#[derive(Debug)]
pub struct Importing<C> {
    received: ReceivedStates,
    /// The layers imported so far, in order.
    caches: Vec<C>,
}

impl<C> Importing<C> {
    /// Whether every layer is in.
    pub fn is_done(&self) -> bool {
        self.caches.len() == self.received.states.len()
    }

    /// Bytes of the next layer's state, if a layer is left.
    pub fn next_layer_bytes(&self) -> Option<usize> {
        self.received.states.get(self.caches.len()).map(LayerState::byte_len)
    }

    /// Imports the next layer into a cache of `scheme` on `device` (on this thread's stream);
    /// returns its state's bytes (0 when every layer was already in).
    pub fn import_next<B, S>(&mut self, scheme: &S, device: &B::Device) -> Result<usize, TransferError>
    where
        B: Backend,
        S: TransferableScheme<B, Cache = C>,
        S::Cache: TransferableCache<B>,
    {
        let layer = self.caches.len();
        let Some(state) = self.received.states.get_mut(layer) else { return Ok(0) };
        let state = std::mem::take(state);
        let cache = import_layer::<B, S>(scheme, layer, self.received.shape.geometry(), &state, device)?;
        self.caches.push(cache);
        Ok(state.byte_len())
    }

    /// The request's caches and logits, every layer imported; an error if some are not.
    pub fn finish(self) -> Result<Received<C>, TransferError> {
        let Self { received, caches } = self;
        if caches.len() != received.states.len() {
            return Err(TransferError::Import(format!(
                "{} of {} layers imported",
                caches.len(),
                received.states.len()
            )));
        }
        Ok(Received {
            caches: LayerCaches::new(caches, 1),
            logits: received.logits,
            server: received.server,
            attempts: received.attempts,
            arrivals: received.arrivals,
        })
    }
}

/// Layer `layer`'s cache of `scheme` rebuilt from `state`.
fn import_layer<B, S>(
    scheme: &S,
    layer: usize,
    geometry: CacheGeometry,
    state: &LayerState,
    device: &B::Device,
) -> Result<S::Cache, TransferError>
where
    B: Backend,
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    scheme
        .import_state(layer, geometry, state, device)
        .map_err(|e| TransferError::Import(format!("layer {layer}: {e}")))
}

/// Receives a request's layers, passing each to `on_layer` the moment it arrives (with the
/// layer's index), and returns what `on_layer` made of them in layer order, the logits and when
/// they arrived, counted from `submitted`.
async fn receive_layers<T>(
    handle: &mut RequestHandle,
    num_layers: usize,
    submitted: Instant,
    mut on_layer: impl FnMut(usize, LayerState) -> Result<T, TransferError>,
) -> Result<(Vec<T>, Vec<f32>, Arrivals), TransferError> {
    let mut layers: Vec<Option<T>> = (0..num_layers).map(|_| None).collect();
    let mut arrivals = Arrivals::default();
    let mut received = 0;
    while let Some(event) = handle.next().await {
        match event? {
            RequestEvent::Layer { layer, state } => {
                let slot = layers
                    .get_mut(layer)
                    .ok_or_else(|| TransferError::Protocol(format!("layer {layer} of a {num_layers}-layer model")))?;
                *slot = Some(on_layer(layer, state)?);
                arrivals.last_layer = submitted.elapsed();
                if received == 0 {
                    arrivals.first_layer = arrivals.last_layer;
                }
                received += 1;
            }
            RequestEvent::Logits(logits) => {
                let layers = layers.into_iter().collect::<Option<Vec<_>>>();
                let layers = layers.ok_or_else(|| TransferError::Protocol("logits before every layer".into()))?;
                arrivals.logits = submitted.elapsed();
                return Ok((layers, logits, arrivals));
            }
        }
    }
    Err(TransferError::Closed)
}

/// Imports each layer into a cache of `scheme` the moment it arrives (layer 0 is on the device
/// while later layers are still computed or in transit) and returns the caches, the logits and
/// when they arrived, counted from `submitted`.
pub async fn receive_caches<B, S>(
    handle: &mut RequestHandle,
    scheme: &S,
    shape: ModelShape,
    device: &B::Device,
    submitted: Instant,
) -> Result<(LayerCaches<S::Cache>, Vec<f32>, Arrivals), TransferError>
where
    B: Backend,
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let geometry = shape.geometry();
    let import = |layer, state: LayerState| import_layer::<B, S>(scheme, layer, geometry, &state, device);
    let (layers, logits, arrivals) = receive_layers(handle, shape.num_layers as usize, submitted, import).await?;
    Ok((LayerCaches::new(layers, 1), logits, arrivals))
}

/// Prefills `tokens` on the least loaded server of `pool` and receives its layers with
/// `receive` (given the request's handle, the server's model shape and the submission time); a
/// transport failure (server killed, timeout, broken stream) is retried on another server, at
/// most `attempts` submissions in all. Returns what `receive` made, the server and the attempts.
async fn with_retries<T, F, Fut>(
    pool: &PrefillPool,
    tokens: &[u32],
    attempts: usize,
    mut receive: F,
) -> Result<(T, usize, usize), TransferError>
where
    F: FnMut(RequestHandle, ModelShape, Instant) -> Fut,
    Fut: Future<Output = Result<T, TransferError>>,
{
    let mut failed = Vec::new();
    loop {
        let submitted = Instant::now();
        let (server, handle) = pool.submit(tokens.to_vec(), &failed)?;
        let shape = handle.layout().shape;
        match receive(handle, shape, submitted).await {
            Ok(received) => return Ok((received, server, failed.len() + 1)),
            Err(e) if e.is_retryable() && failed.len() + 1 < attempts => failed.push(server),
            Err(e) => return Err(e),
        }
    }
}

/// Prefills `tokens` on the least loaded server of `pool` and receives the caches; a transport
/// failure (server killed, timeout, broken stream) is retried on another server, at most
/// `attempts` submissions in all.
///
/// The caches are imported on the thread that polls this future, as the layers arrive. To
/// decode on another thread, use [`fetch_states`] and import there: CubeCL backends run each
/// thread's work on a stream of their own.
pub async fn fetch<B, S>(
    pool: &PrefillPool,
    tokens: &[u32],
    scheme: &S,
    device: &B::Device,
    attempts: usize,
) -> Result<Received<S::Cache>, TransferError>
where
    B: Backend,
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let receive = |mut handle: RequestHandle, shape, submitted| async move {
        receive_caches::<B, S>(&mut handle, scheme, shape, device, submitted).await
    };
    let ((caches, logits, arrivals), server, attempts) = with_retries(pool, tokens, attempts, receive).await?;
    Ok(Received { caches, logits, server, attempts, arrivals })
}

/// [`fetch`] without the import: the layer states in host memory, for
/// [`ReceivedStates::import`] on the thread that decodes.
pub async fn fetch_states(
    pool: &PrefillPool,
    tokens: &[u32],
    attempts: usize,
) -> Result<ReceivedStates, TransferError> {
    let receive = |mut handle: RequestHandle, shape: ModelShape, submitted| async move {
        let (states, logits, arrivals) =
            receive_layers(&mut handle, shape.num_layers as usize, submitted, |_, s| Ok(s)).await?;
        Ok((states, shape, logits, arrivals))
    };
    let ((states, shape, logits, arrivals), server, attempts) = with_retries(pool, tokens, attempts, receive).await?;
    Ok(ReceivedStates { states, shape, logits, server, attempts, arrivals })
}
