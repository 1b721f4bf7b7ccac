//! In-process transport: each connection is a pair of in-memory pipes (`tokio::io::duplex`).

use std::io;

use tokio::io::DuplexStream;
use tokio::sync::mpsc;

use super::{Connector, Listener};

/// Pipe buffer per direction, bytes.
const PIPE_BYTES: usize = 1 << 20;

/// A connected listener/connector pair.
pub fn channel() -> (ChannelListener, ChannelConnector) {
    let (tx, rx) = mpsc::unbounded_channel();
    (ChannelListener { incoming: rx }, ChannelConnector { outgoing: tx })
}

/// Accepts in-process connections.
#[derive(Debug)]
pub struct ChannelListener {
    incoming: mpsc::UnboundedReceiver<DuplexStream>,
}

impl Listener for ChannelListener {
    type Stream = DuplexStream;

    async fn accept(&mut self) -> io::Result<DuplexStream> {
        self.incoming.recv().await.ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "no more connectors"))
    }
}

/// Opens in-process connections to its [`ChannelListener`].
#[derive(Debug, Clone)]
pub struct ChannelConnector {
    outgoing: mpsc::UnboundedSender<DuplexStream>,
}

impl Connector for ChannelConnector {
    type Stream = DuplexStream;

    async fn connect(&self) -> io::Result<DuplexStream> {
        let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
        self.outgoing
            .send(theirs)
            .map_err(|_| io::Error::new(io::ErrorKind::ConnectionRefused, "the listener is gone"))?;
        Ok(ours)
    }

    fn peer(&self) -> String {
        "in-process channel".into()
    }
}
