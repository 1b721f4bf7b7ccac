//! The decode side's use of a transfer: rebuilding a request's caches layer by layer as the
//! states arrive, with a retry on another prefill server when one fails.

use std::time::{Duration, Instant};

use burn::tensor::backend::Backend;
use burn_kvcompress::cache::{LayerCaches, TransferableCache, TransferableScheme};

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
    /// The first layer's state, imported into its cache.
    pub first_layer: Duration,
    /// The last layer's state, imported into its cache.
    pub last_layer: Duration,
    /// The logits (the request complete).
    pub logits: Duration,
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
    let mut layers: Vec<Option<S::Cache>> = (0..shape.num_layers).map(|_| None).collect();
    let mut arrivals = Arrivals::default();
    let mut imported = 0;
    while let Some(event) = handle.next().await {
        match event? {
            RequestEvent::Layer { layer, state } => {
                let cache = scheme
                    .import_state(layer, geometry, &state, device)
                    .map_err(|e| TransferError::Import(format!("layer {layer}: {e}")))?;
                layers[layer] = Some(cache);
                arrivals.last_layer = submitted.elapsed();
                if imported == 0 {
                    arrivals.first_layer = arrivals.last_layer;
                }
                imported += 1;
            }
            RequestEvent::Logits(logits) => {
                let layers = layers.into_iter().collect::<Option<Vec<_>>>();
                let layers = layers.ok_or_else(|| TransferError::Protocol("logits before every layer".into()))?;
                arrivals.logits = submitted.elapsed();
                return Ok((LayerCaches::new(layers, 1), logits, arrivals));
            }
        }
    }
    Err(TransferError::Closed)
}

/// Prefills `tokens` on the least loaded server of `pool` and receives the caches; a transport
/// failure (server killed, timeout, broken stream) is retried on another server, at most
/// `attempts` submissions in all.
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
    let mut failed = Vec::new();
    loop {
        let submitted = Instant::now();
        let (server, mut handle) = pool.submit(tokens.to_vec(), &failed)?;
        let shape = pool.clients()[server].layout().shape;
        match receive_caches::<B, S>(&mut handle, scheme, shape, device, submitted).await {
            Ok((caches, logits, arrivals)) => {
                return Ok(Received { caches, logits, server, attempts: failed.len() + 1, arrivals })
            }
            Err(e) if e.is_retryable() && failed.len() + 1 < attempts => failed.push(server),
            Err(e) => return Err(e),
        }
    }
}
