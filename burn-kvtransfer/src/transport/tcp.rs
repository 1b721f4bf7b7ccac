//! TCP transport (tokio), with Nagle's algorithm off.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

use super::{Connector, Listener};

/// Accepts TCP connections.
#[derive(Debug)]
pub struct TcpServer {
    listener: TcpListener,
}

impl TcpServer {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(addr: &str) -> io::Result<Self> {
        Ok(Self { listener: TcpListener::bind(addr).await? })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

impl Listener for TcpServer {
    type Stream = TcpStream;

    async fn accept(&mut self) -> io::Result<TcpStream> {
        let (stream, _) = self.listener.accept().await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }
}

/// Connects to a TCP address.
#[derive(Debug, Clone)]
pub struct TcpConnector {
    /// `host:port`.
    pub addr: String,
}

impl Connector for TcpConnector {
    type Stream = TcpStream;

    async fn connect(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::connect(&self.addr).await?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    fn peer(&self) -> String {
        format!("tcp://{}", self.addr)
    }
}
