//! Frames over a byte stream: an incremental reader that validates each header before awaiting
//! its payload, and a writer paced by an optional [`TokenBucket`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::error::TransferError;
use crate::rate::TokenBucket;
use crate::wire::{crc_concat, Frame, FrameCodec, FrameKind, WireError, BLOCK_HEADER_LEN, HEADER_LEN, TRAILER_LEN};

/// Bytes read per system call at least (the buffer grows to the largest frame).
const READ_CHUNK: usize = 256 * 1024;

/// A shared counter (bytes on the wire, corrupt frames).
#[derive(Debug, Default, Clone)]
pub struct WireCounter(Arc<AtomicU64>);

impl WireCounter {
    /// Adds `n`.
    pub fn add(&self, n: usize) {
        self.0.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A frame read by [`FrameReader::next_placed`].
#[derive(Debug)]
pub enum Placed<T> {
    /// A frame read as [`FrameReader::next`] reads it.
    Frame(Frame),
    /// A large Block frame whose data was read straight into `target` and checked against the
    /// frame's checksum.
    Block {
        /// The Block payload's header (request, layer, first block).
        header: [u8; BLOCK_HEADER_LEN],
        /// Where the data went.
        target: T,
        /// CRC-32 of the data.
        data_crc: u32,
    },
}

/// Reads frames from a stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    codec: FrameCodec,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    counter: WireCounter,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// A reader that refuses frames over `codec.max_payload` and counts bytes into `counter`.
    pub fn new(inner: R, codec: FrameCodec, counter: WireCounter) -> Self {
        Self { inner, codec, buf: vec![0; READ_CHUNK], start: 0, end: 0, counter }
    }

    /// The next frame. [`TransferError::Closed`] is a clean end of stream at a frame boundary;
    /// [`TransferError::Corrupt`] means one frame was skipped and reading may go on; any other
    /// error leaves the stream unusable.
    pub async fn next(&mut self) -> Result<Frame, TransferError> {
        loop {
            let available = &self.buf[self.start..self.end];
            let need = match self.codec.frame_len(available)? {
                Some(total) if available.len() >= total => {
                    return match self.codec.decode(available) {
                        Ok(Some((frame, used))) => {
                            self.start += used;
                            Ok(frame)
                        }
                        Err(WireError::PayloadChecksum) => {
                            let kind = Frame::kind_of(available);
                            self.start += total;
                            Err(TransferError::Corrupt(kind))
                        }
                        Err(e) => Err(e.into()),
                        Ok(None) => unreachable!("a whole frame is buffered"),
                    };
                }
                Some(total) if total > READ_CHUNK => return self.read_large(total).await,
                Some(total) => total,
                None => HEADER_LEN,
            };
            self.fill(need).await?;
        }
    }

    /// The next frame, as [`next`](Self::next) reads it, except a Block frame larger than the
    /// read buffer: `place` is shown its Block header and data length and may return where the
    /// data goes (exactly that many bytes). The data is then read into it, without a copy
    /// through a payload vector. A corrupt frame drops the target and is
    /// [`TransferError::Corrupt`], as with `next`.
    pub async fn next_placed<T: AsMut<[u8]>>(
        &mut self,
        place: impl FnOnce(&[u8; BLOCK_HEADER_LEN], usize) -> Option<T>,
    ) -> Result<Placed<T>, TransferError> {
        const WANT: usize = HEADER_LEN + BLOCK_HEADER_LEN;
        loop {
            let available = &self.buf[self.start..self.end];
            match self.codec.frame_len(available)? {
                Some(total) if total <= available.len() || total <= READ_CHUNK => break,
                Some(_) if Frame::kind_of(available) != FrameKind::Block => break,
                Some(total) if available.len() >= WANT => {
                    let header: [u8; BLOCK_HEADER_LEN] = available[HEADER_LEN..WANT].try_into().expect("16 bytes");
                    let data_len = total - WANT - TRAILER_LEN;
                    match place(&header, data_len) {
                        Some(target) => return self.read_placed(header, data_len, target).await,
                        None => break,
                    }
                }
                _ => self.fill(WANT).await?,
            }
        }
        self.next().await.map(Placed::Frame)
    }

    /// Reads the data of the Block frame whose header is buffered into `target`, then its trailer.
    async fn read_placed<T: AsMut<[u8]>>(
        &mut self,
        header: [u8; BLOCK_HEADER_LEN],
        data_len: usize,
        mut target: T,
    ) -> Result<Placed<T>, TransferError> {
        let data = target.as_mut();
        if data.len() != data_len {
            let why = format!("a {}-byte target for {data_len} bytes of Block data", data.len());
            return Err(TransferError::Protocol(why));
        }
        self.start += HEADER_LEN + BLOCK_HEADER_LEN;
        let buffered = (self.end - self.start).min(data_len);
        data[..buffered].copy_from_slice(&self.buf[self.start..self.start + buffered]);
        self.start += buffered;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&data[..buffered]);
        let mut filled = buffered;
        while filled < data_len {
            // Each read is hashed at once, while the kernel's copy of it is still in cache: a
            // pass over the whole frame afterwards would read it back from memory.
            let chunk = (data_len - filled).min(READ_CHUNK);
            let n = self.inner.read(&mut data[filled..filled + chunk]).await?;
            if n == 0 {
                return Err(TransferError::Truncated(HEADER_LEN + BLOCK_HEADER_LEN + filled));
            }
            crc.update(&data[filled..filled + n]);
            self.counter.add(n);
            filled += n;
        }
        while self.end - self.start < TRAILER_LEN {
            self.fill(TRAILER_LEN).await.map_err(|e| match e {
                TransferError::Closed => TransferError::Truncated(HEADER_LEN + BLOCK_HEADER_LEN + data_len),
                other => other,
            })?;
        }
        let trailer = &self.buf[self.start..self.start + TRAILER_LEN];
        self.start += TRAILER_LEN;
        let data_crc = crc.finalize();
        let payload_crc = crc_concat(crc32fast::hash(&header), data_crc, data_len);
        match payload_crc.to_le_bytes() == trailer {
            true => Ok(Placed::Block { header, target, data_crc }),
            false => Err(TransferError::Corrupt(FrameKind::Block)),
        }
    }

    /// Reads a frame larger than the read buffer straight into its own payload vector (one copy
    /// fewer than going through the buffer).
    async fn read_large(&mut self, total: usize) -> Result<Frame, TransferError> {
        let kind = Frame::kind_of(&self.buf[self.start..self.end]);
        let mut body = Vec::with_capacity(total - HEADER_LEN);
        body.extend_from_slice(&self.buf[self.start + HEADER_LEN..self.end]);
        (self.start, self.end) = (0, 0);
        // `read_buf` fills the vector's spare capacity, which is exactly the rest of the frame:
        // no zeroing, and nothing of the next frame is read.
        while body.len() < body.capacity() {
            let n = self.inner.read_buf(&mut body).await?;
            if n == 0 {
                return Err(TransferError::Truncated(HEADER_LEN + body.len()));
            }
            self.counter.add(n);
        }
        let trailer = body.split_off(body.len() - TRAILER_LEN);
        match self.codec.check_payload(&body, &trailer) {
            Ok(crc) => Ok(Frame { kind, payload: body, crc }),
            Err(_) => Err(TransferError::Corrupt(kind)),
        }
    }

    /// Reads more bytes, making room for a frame of `need` bytes at `start`.
    async fn fill(&mut self, need: usize) -> Result<(), TransferError> {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
        }
        if self.start + need.max(READ_CHUNK) > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            (self.start, self.end) = (0, self.end - self.start);
            if need.max(READ_CHUNK) > self.buf.len() {
                self.buf.resize(need.max(READ_CHUNK), 0);
            }
        }
        let n = self.inner.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(match self.end - self.start {
                0 => TransferError::Closed,
                partial => TransferError::Truncated(partial),
            });
        }
        self.end += n;
        self.counter.add(n);
        Ok(())
    }
}

/// Writes encoded frames to a stream, paced by an optional token bucket.
#[derive(Debug)]
pub struct FrameWriter<W> {
    inner: W,
    limiter: Option<TokenBucket>,
    counter: WireCounter,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// A writer; `limiter` emulates a link rate.
    pub fn new(inner: W, limiter: Option<TokenBucket>, counter: WireCounter) -> Self {
        Self { inner, limiter, counter }
    }

    /// Writes one encoded frame (or any bytes).
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), TransferError> {
        self.send_parts(&[bytes]).await
    }

    /// Writes the concatenation of `parts` (a frame's header, borrowed payload and trailer)
    /// without copying them together.
    pub async fn send_parts(&mut self, parts: &[&[u8]]) -> Result<(), TransferError> {
        for part in parts {
            match &mut self.limiter {
                None => self.inner.write_all(part).await?,
                Some(bucket) => {
                    // A chunk is written once its tokens are paid for: streams sharing the bucket
                    // then never put more than the burst ahead of the link between them.
                    for chunk in part.chunks(bucket.burst()) {
                        let wait = bucket.take(chunk.len());
                        if !wait.is_zero() {
                            tokio::time::sleep(wait).await;
                        }
                        self.inner.write_all(chunk).await?;
                    }
                }
            }
            self.counter.add(part.len());
        }
        Ok(())
    }

    /// Flushes and closes the write side.
    pub async fn shutdown(&mut self) -> Result<(), TransferError> {
        Ok(self.inner.shutdown().await?)
    }
}

/// Bytes read by range without copying (a held layer's parts).
pub trait Slices: Send + Sync {
    /// The slices that make up bytes `[start, end)`.
    fn slices(&self, start: usize, end: usize) -> Vec<&[u8]>;
}

/// A frame queued for a [`write_frames`] task.
pub enum Outgoing {
    /// An encoded frame.
    Bytes(Vec<u8>),
    /// A frame written as `head`, bytes `[start, end)` of `body`, then `tail`: the body is not
    /// copied.
    Scattered {
        /// Frame header and message header.
        head: Vec<u8>,
        /// Where the payload's bulk lives.
        body: Arc<dyn Slices>,
        /// First byte of `body` sent.
        start: usize,
        /// End of the bytes of `body` sent.
        end: usize,
        /// The frame's trailer.
        tail: [u8; TRAILER_LEN],
    },
}

/// Writes queued frames until the queue closes (then shuts the stream down), a write fails, or
/// one frame takes longer than `timeout` to write (a peer that stopped reading).
pub async fn write_frames<W: AsyncWrite + Unpin>(
    mut writer: FrameWriter<W>,
    mut frames: mpsc::Receiver<Outgoing>,
    timeout: Duration,
) {
    while let Some(frame) = frames.recv().await {
        let sent = match &frame {
            Outgoing::Bytes(bytes) => tokio::time::timeout(timeout, writer.send(bytes)).await,
            Outgoing::Scattered { head, body, start, end, tail } => {
                let mut parts: Vec<&[u8]> = vec![head];
                parts.extend(body.slices(*start, *end));
                parts.push(tail);
                tokio::time::timeout(timeout, writer.send_parts(&parts)).await
            }
        };
        if !matches!(sent, Ok(Ok(()))) {
            return;
        }
    }
    _ = writer.shutdown().await;
}
