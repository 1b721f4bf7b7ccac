//! Shared test fixtures: a synthetic prefill engine whose states are real dense-cache states,
//! a server on the in-process channel, and a stream wrapper that injects faults.
#![allow(dead_code)]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use burn_kvcompress::cache::LayerState;
use burn_kvtransfer::{
    engine::{PrefillEngine, SyntheticPrefill},
    protocol::{ClientConfig, PrefillClient, PrefillServer, RequestEvent, RequestHandle, ServerConfig},
    state_codec::encode_state,
    transport::{
        channel::{channel, ChannelConnector},
        Connector,
    },
    wire::ModelShape,
    ModelFingerprint, SchemeDescriptor,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// Small model dimensions: 4 layers, 2 KV heads of 16.
pub const SHAPE: ModelShape = ModelShape { num_layers: 4, kv_heads: 2, heads: 4, head_dim: 16, vocab: 32 };

pub fn descriptor() -> SchemeDescriptor {
    SchemeDescriptor { scheme: "dense".into(), model: ModelFingerprint::of_bytes(b"synthetic model") }
}

pub fn expected_state(shape: ModelShape, tokens: &[u32], layer: usize) -> LayerState {
    SyntheticPrefill::state(shape, tokens, layer)
}

pub fn expected_logits(shape: ModelShape, tokens: &[u32]) -> Vec<f32> {
    SyntheticPrefill::logits(shape, tokens)
}

/// The synthetic engine with the test shape and descriptor.
pub fn engine() -> SyntheticPrefill {
    SyntheticPrefill::new(SHAPE, descriptor())
}

/// Starts `engine` behind an in-process listener; returns the server and a connector.
pub fn start(engine: impl PrefillEngine, config: ServerConfig) -> (PrefillServer, ChannelConnector) {
    let server = PrefillServer::new(engine, config);
    let (listener, connector) = channel();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve(listener).await });
    (server, connector)
}

pub async fn connect<C: Connector>(connector: &C) -> PrefillClient {
    PrefillClient::connect(connector, ClientConfig::new(descriptor())).await.expect("connect")
}

/// Collects a request's layers (by index) and logits.
pub async fn collect(handle: &mut RequestHandle) -> (Vec<Option<burn_kvcompress::cache::LayerState>>, Vec<f32>) {
    let mut layers = vec![None; SHAPE.num_layers as usize];
    loop {
        match handle.next().await.expect("an event").expect("no error") {
            RequestEvent::Layer { layer, state } => {
                assert!(layers[layer].is_none(), "layer {layer} delivered twice");
                layers[layer] = Some(state);
            }
            RequestEvent::Logits(logits) => return (layers, logits),
        }
    }
}

pub fn hash(state: &burn_kvcompress::cache::LayerState) -> [u8; 32] {
    Sha256::digest(encode_state(state)).into()
}

/// Waits until the server holds no request (or panics after `limit`).
pub async fn wait_until_freed(server: &PrefillServer, limit: Duration) {
    let start = tokio::time::Instant::now();
    while server.stats().store.requests > 0 {
        assert!(start.elapsed() < limit, "the server still holds {:?}", server.stats().store);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a [`Faulty`] stream does to the bytes it reads.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Flip the bits of the byte at this offset of the read stream.
    Corrupt(u64),
    /// End the read stream after this many bytes.
    CutAt(u64),
}

/// A stream whose read side suffers a fault.
pub struct Faulty<S> {
    inner: S,
    fault: Fault,
    read: u64,
}

impl<S: AsyncRead + Unpin> AsyncRead for Faulty<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let limit = match this.fault {
            Fault::CutAt(at) if this.read >= at => return Poll::Ready(Ok(())),
            Fault::CutAt(at) => (at - this.read) as usize,
            Fault::Corrupt(_) => usize::MAX,
        };
        let mut tmp = vec![0u8; buf.remaining().min(limit)];
        let mut sub = ReadBuf::new(&mut tmp);
        let poll = Pin::new(&mut this.inner).poll_read(cx, &mut sub);
        if let Poll::Ready(Ok(())) = poll {
            let n = sub.filled().len();
            if let Fault::Corrupt(at) = this.fault {
                if at >= this.read && at < this.read + n as u64 {
                    tmp[(at - this.read) as usize] ^= 0xFF;
                }
            }
            buf.put_slice(&tmp[..n]);
            this.read += n as u64;
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Faulty<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connector whose connections suffer `fault` on the bytes the client reads.
pub struct FaultyConnector {
    pub inner: ChannelConnector,
    pub fault: Fault,
}

impl Connector for FaultyConnector {
    type Stream = Faulty<DuplexStream>;

    async fn connect(&self) -> io::Result<Self::Stream> {
        Ok(Faulty { inner: self.inner.connect().await?, fault: self.fault, read: 0 })
    }

    fn peer(&self) -> String {
        format!("faulty channel ({:?})", self.fault)
    }
}
