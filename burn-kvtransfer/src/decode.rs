//! The decode side's use of a transfer: rebuilding a request's caches layer by layer as the
//! states arrive, with a retry on another prefill server when one fails.

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
}

/// Imports each layer into a cache of `scheme` the moment it arrives (layer 0 is on the device
/// while later layers are still computed or in transit) and returns the caches and logits.
pub async fn receive_caches<B, S>(
    handle: &mut RequestHandle,
    scheme: &S,
    shape: ModelShape,
    device: &B::Device,
) -> Result<(LayerCaches<S::Cache>, Vec<f32>), TransferError>
where
    B: Backend,
    S: TransferableScheme<B>,
    S::Cache: TransferableCache<B>,
{
    let geometry = shape.geometry();
    let mut layers: Vec<Option<S::Cache>> = (0..shape.num_layers).map(|_| None).collect();
    while let Some(event) = handle.next().await {
        match event? {
            RequestEvent::Layer { layer, state } => {
                let cache = scheme
                    .import_state(layer, geometry, &state, device)
                    .map_err(|e| TransferError::Import(format!("layer {layer}: {e}")))?;
                layers[layer] = Some(cache);
            }
            RequestEvent::Logits(logits) => {
                let layers = layers.into_iter().collect::<Option<Vec<_>>>();
                let layers = layers.ok_or_else(|| TransferError::Protocol("logits before every layer".into()))?;
                return Ok((LayerCaches::new(layers, 1), logits));
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
        let (server, mut handle) = pool.submit(tokens.to_vec(), &failed)?;
        let shape = pool.clients()[server].layout().shape;
        match receive_caches::<B, S>(&mut handle, scheme, shape, device).await {
            Ok((caches, logits)) => return Ok(Received { caches, logits, server, attempts: failed.len() + 1 }),
            Err(e) if e.is_retryable() && failed.len() + 1 < attempts => failed.push(server),
            Err(e) => return Err(e),
        }
    }
}
