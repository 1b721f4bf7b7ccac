//! Transports: byte streams between a decode and a prefill process, behind the [`Listener`] and
//! [`Connector`] traits. [`tcp`] is the default; [`channel`] connects tasks of one process (tests).
//! [`FrameReader`] and [`FrameWriter`] speak frames over any of them.

pub mod channel;
mod framed;
pub mod tcp;

use std::future::Future;
use std::io;

use tokio::io::{AsyncRead, AsyncWrite};

pub use framed::{write_frames, FrameReader, FrameWriter, Outgoing, Placed, Slices, WireCounter};

/// A bidirectional byte stream.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// The serving end of a transport: accepts connections.
pub trait Listener: Send + 'static {
    /// The stream of an accepted connection.
    type Stream: Stream;

    /// Waits for the next connection.
    fn accept(&mut self) -> impl Future<Output = io::Result<Self::Stream>> + Send;
}

/// The connecting end of a transport.
pub trait Connector: Send + Sync + 'static {
    /// The stream of a connection.
    type Stream: Stream;

    /// Opens a connection.
    fn connect(&self) -> impl Future<Output = io::Result<Self::Stream>> + Send;

    /// Where it connects, for messages.
    fn peer(&self) -> String;
}
