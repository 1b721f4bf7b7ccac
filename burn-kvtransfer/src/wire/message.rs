//! The protocol's messages and their payload layouts (all little-endian). Each message is one
//! frame; the frame kind says which message the payload holds.
//!
//! ```text
//! Hello     scheme: str, model: [u8; 32], mode: u8, session: u64   decode -> prefill, first frame
//! Agent     metadata: bytes                              prefill -> decode, after Layout (mode Read)
//! Attach    session: u64                                    decode -> prefill, first frame of a data stream
//! Layout    block_size, num_layers, kv_heads, heads, head_dim, vocab: u32   prefill -> decode, once
//! Submit    request: u64, tokens: u32 count + u32 each       decode -> prefill
//! Ready     request: u64, layer: u32, bytes: u64, crc: u32  prefill -> decode, per layer
//! ReadyAt   request: u64, layer: u32, bytes: u64, crc: u32, address: u64   instead of Ready (mode Read)
//! Done      request: u64, logits: u32 count + f32 each      prefill -> decode, after the last layer
//! Pull      ranges: u32 count + (request u64, layer u32, first u32, count u32) each
//! Block     request: u64, layer: u32, first: u32, then the blocks' bytes to the end
//! Complete  request: u64                                    decode -> prefill: free it
//! Error     code: u8, request: u64, message: str           either way
//! ```

use burn_kvcompress::{cache::CacheGeometry, model::ModelConfig};

use super::{crc_suffix, Frame, FrameCodec, FrameKind, MessageError, PayloadReader, PayloadWriter, WireError};
use crate::descriptor::{ModelFingerprint, SchemeDescriptor};

/// Who starts block transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The decode side pulls each layer once it is announced (KVDirect's default).
    Pull = 0,
    /// The prefill side sends each layer's blocks as soon as it is computed (for comparison).
    Push = 1,
    /// The decode side reads each layer announced by a `ReadyAt` from the prefill side's
    /// registered memory with one-sided reads (NIXL), and pulls the layers announced by a plain
    /// `Ready` (those the prefill side could not place there) as in `Pull`. The prefill side
    /// answers the Hello with its agent metadata after the Layout; the decode side's completion
    /// of a request travels as a transfer-engine notification instead of a `Complete`.
    Read = 2,
}

/// The model dimensions a request's KV state has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Layers per request.
    pub num_layers: u32,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Query heads.
    pub heads: u32,
    /// Dimension of one head.
    pub head_dim: u32,
    /// Logits per request (the vocabulary size).
    pub vocab: u32,
}

impl ModelShape {
    /// The shape of a model.
    pub fn of(config: &ModelConfig) -> Self {
        let c = |v: usize| v as u32;
        Self {
            num_layers: c(config.num_layers),
            kv_heads: c(config.num_kv_heads),
            heads: c(config.num_heads),
            head_dim: c(config.head_dim),
            vocab: c(config.vocab_size),
        }
    }

    /// The cache geometry of one sequence.
    pub fn geometry(&self) -> CacheGeometry {
        CacheGeometry {
            batch: 1,
            kv_heads: self.kv_heads as usize,
            heads: self.heads as usize,
            head_dim: self.head_dim as usize,
        }
    }
}

/// The KV layout of a prefill server, sent once per connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes per block (the last block of a layer may be shorter).
    pub block_size: u32,
    /// The model's dimensions.
    pub shape: ModelShape,
}

impl Layout {
    /// Blocks that hold `bytes` bytes.
    pub fn blocks(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block_size as u64)
    }
}

/// A contiguous run of blocks of one request's layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockRange {
    /// The request.
    pub request: u64,
    /// The layer.
    pub layer: u32,
    /// First block.
    pub first: u32,
    /// Number of blocks.
    pub count: u32,
}

/// Why a peer reports an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The peers' scheme descriptors differ.
    Incompatible = 1,
    /// A frame could not be decoded (includes an unsupported protocol version).
    Malformed = 2,
    /// The request is unknown (never submitted, completed, or its lease expired).
    UnknownRequest = 3,
    /// Prefill failed.
    Prefill = 4,
    /// The request was refused (duplicate id, prompt too long, wrong message order).
    Refused = 5,
}

impl ErrorCode {
    fn from_u8(v: u8) -> Result<Self, MessageError> {
        Ok(match v {
            1 => Self::Incompatible,
            2 => Self::Malformed,
            3 => Self::UnknownRequest,
            4 => Self::Prefill,
            5 => Self::Refused,
            other => {
                return Err(MessageError::Invalid { field: "error code", reason: format!("unknown code {other}") })
            }
        })
    }
}

/// One protocol message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Opens a connection: what the decode side expects, and the transfer mode.
    Hello {
        /// The decode side's descriptor.
        descriptor: SchemeDescriptor,
        /// Pull or push.
        mode: Mode,
        /// An id chosen by the decode side under which it may attach data streams.
        session: u64,
    },
    /// Opens a data stream of the connection whose Hello carried `session`: pulled blocks are
    /// spread over the connection's data streams, so several cores copy and check them at once.
    Attach {
        /// The connection's session id.
        session: u64,
    },
    /// The prefill side's layout (accepts the Hello).
    Layout(Layout),
    /// The prefill side's transfer-engine (NIXL) agent metadata: its name, backends and
    /// registered memory; sent once per connection, after the Layout, in mode Read.
    Agent {
        /// The serialized metadata, opaque to the protocol.
        metadata: Vec<u8>,
    },
    /// A prompt to prefill under a request id chosen by the decode side.
    Submit {
        /// The request id.
        request: u64,
        /// Prompt tokens.
        tokens: Vec<u32>,
    },
    /// A layer of a request is ready.
    Ready {
        /// The request.
        request: u64,
        /// The layer.
        layer: u32,
        /// Serialized size of the layer's state.
        bytes: u64,
        /// CRC-32 of the serialized state.
        crc: u32,
    },
    /// A layer of a request is ready, and its serialized state lies at `address` in the memory
    /// the prefill side's agent registered (mode Read): the decode side reads it from there.
    ReadyAt {
        /// The request.
        request: u64,
        /// The layer.
        layer: u32,
        /// Serialized size of the layer's state.
        bytes: u64,
        /// CRC-32 of the serialized state.
        crc: u32,
        /// Where the state's first byte lies in the prefill side's address space.
        address: u64,
    },
    /// Prefill of a request finished (sent after its last `Ready`).
    Done {
        /// The request.
        request: u64,
        /// Logits of the last prompt position, `[vocab]`.
        logits: Vec<f32>,
    },
    /// Blocks the decode side wants.
    Pull(Vec<BlockRange>),
    /// Contiguous blocks of one layer.
    Block(BlockFrame),
    /// The decode side holds the whole request: the prefill side frees it.
    Complete {
        /// The request.
        request: u64,
    },
    /// An error report.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// The request it concerns, 0 for the connection.
        request: u64,
        /// Human-readable details.
        message: String,
    },
}

/// Bytes of a Block payload before the data.
pub const BLOCK_HEADER_LEN: usize = 16;

/// A received Block message; the payload is kept whole to avoid a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockFrame {
    /// The request.
    pub request: u64,
    /// The layer.
    pub layer: u32,
    /// Index of the first block.
    pub first: u32,
    payload: Vec<u8>,
    data_crc: u32,
}

impl BlockFrame {
    /// The blocks' bytes.
    pub fn data(&self) -> &[u8] {
        &self.payload[BLOCK_HEADER_LEN..]
    }

    /// CRC-32 of [`data`](Self::data), derived from the frame's checksum (not hashed again).
    pub fn data_crc(&self) -> u32 {
        self.data_crc
    }

    /// Encodes a Block frame from borrowed data.
    pub fn encode(codec: &FrameCodec, request: u64, layer: u32, first: u32, data: &[u8]) -> Result<Vec<u8>, WireError> {
        codec.encode_parts(FrameKind::Block, &[&Self::header(request, layer, first), data])
    }

    /// `(request, layer, first)` from the payload bytes before the data.
    pub fn parse_header(header: &[u8; BLOCK_HEADER_LEN]) -> (u64, u32, u32) {
        let request = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let layer = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        (request, layer, u32::from_le_bytes(header[12..].try_into().expect("4 bytes")))
    }

    /// The payload bytes before the data.
    pub fn header(request: u64, layer: u32, first: u32) -> [u8; BLOCK_HEADER_LEN] {
        let mut header = [0u8; BLOCK_HEADER_LEN];
        header[..8].copy_from_slice(&request.to_le_bytes());
        header[8..12].copy_from_slice(&layer.to_le_bytes());
        header[12..].copy_from_slice(&first.to_le_bytes());
        header
    }
}

impl Message {
    /// Encodes the message as one frame.
    pub fn encode(&self, codec: &FrameCodec) -> Result<Vec<u8>, WireError> {
        let mut w = PayloadWriter::new();
        let kind = match self {
            Self::Hello { descriptor, mode, session } => {
                w.str(&descriptor.scheme);
                w.bytes(&descriptor.model.0).u8(*mode as u8).u64(*session);
                FrameKind::Hello
            }
            Self::Attach { session } => {
                w.u64(*session);
                FrameKind::Attach
            }
            Self::Agent { metadata } => {
                w.bytes(metadata);
                FrameKind::Agent
            }
            Self::Layout(Layout { block_size, shape: s }) => {
                for v in [*block_size, s.num_layers, s.kv_heads, s.heads, s.head_dim, s.vocab] {
                    w.u32(v);
                }
                FrameKind::Layout
            }
            Self::Submit { request, tokens } => {
                w.u64(*request).u32(tokens.len() as u32);
                tokens.iter().for_each(|&t| _ = w.u32(t));
                FrameKind::Submit
            }
            Self::Ready { request, layer, bytes, crc } => {
                w.u64(*request).u32(*layer).u64(*bytes).u32(*crc);
                FrameKind::Ready
            }
            Self::ReadyAt { request, layer, bytes, crc, address } => {
                w.u64(*request).u32(*layer).u64(*bytes).u32(*crc).u64(*address);
                FrameKind::ReadyAt
            }
            Self::Done { request, logits } => {
                w.u64(*request).u32(logits.len() as u32);
                logits.iter().for_each(|&x| _ = w.u32(x.to_bits()));
                FrameKind::Done
            }
            Self::Pull(ranges) => {
                w.u32(ranges.len() as u32);
                for r in ranges {
                    w.u64(r.request).u32(r.layer).u32(r.first).u32(r.count);
                }
                FrameKind::Pull
            }
            Self::Block(b) => return BlockFrame::encode(codec, b.request, b.layer, b.first, b.data()),
            Self::Complete { request } => {
                w.u64(*request);
                FrameKind::Complete
            }
            Self::Error { code, request, message } => {
                w.u8(*code as u8).u64(*request).str(message);
                FrameKind::Error
            }
        };
        codec.encode(kind, &w.finish())
    }

    /// Parses a decoded frame. Every count and length is checked against the payload's size.
    pub fn decode(frame: Frame) -> Result<Self, MessageError> {
        let mut r = PayloadReader::new(&frame.payload);
        let message = match frame.kind {
            FrameKind::Hello => {
                let scheme = r.str("scheme")?;
                let model: [u8; 32] = r
                    .bytes("model")?
                    .try_into()
                    .map_err(|_| MessageError::Invalid { field: "model", reason: "not 32 bytes".into() })?;
                let mode = match r.u8("mode")? {
                    0 => Mode::Pull,
                    1 => Mode::Push,
                    2 => Mode::Read,
                    m => return Err(MessageError::Invalid { field: "mode", reason: format!("unknown mode {m}") }),
                };
                let session = r.u64("session")?;
                Self::Hello { descriptor: SchemeDescriptor { scheme, model: ModelFingerprint(model) }, mode, session }
            }
            FrameKind::Attach => Self::Attach { session: r.u64("session")? },
            FrameKind::Agent => Self::Agent { metadata: r.bytes("metadata")?.to_vec() },
            FrameKind::Layout => {
                let mut f = |name| r.u32(name);
                let layout = Layout {
                    block_size: f("block_size")?,
                    shape: ModelShape {
                        num_layers: f("num_layers")?,
                        kv_heads: f("kv_heads")?,
                        heads: f("heads")?,
                        head_dim: f("head_dim")?,
                        vocab: f("vocab")?,
                    },
                };
                if layout.block_size == 0 {
                    return Err(MessageError::Invalid { field: "block_size", reason: "zero".into() });
                }
                Self::Layout(layout)
            }
            FrameKind::Submit => {
                let request = r.u64("request")?;
                let n = r.count("tokens", 4)?;
                let tokens = (0..n).map(|_| r.u32("token")).collect::<Result<_, _>>()?;
                Self::Submit { request, tokens }
            }
            FrameKind::Ready => Self::Ready {
                request: r.u64("request")?,
                layer: r.u32("layer")?,
                bytes: r.u64("bytes")?,
                crc: r.u32("crc")?,
            },
            FrameKind::ReadyAt => Self::ReadyAt {
                request: r.u64("request")?,
                layer: r.u32("layer")?,
                bytes: r.u64("bytes")?,
                crc: r.u32("crc")?,
                address: r.u64("address")?,
            },
            FrameKind::Done => {
                let request = r.u64("request")?;
                let n = r.count("logits", 4)?;
                let logits = (0..n).map(|_| r.u32("logit").map(f32::from_bits)).collect::<Result<_, _>>()?;
                Self::Done { request, logits }
            }
            FrameKind::Pull => {
                let n = r.count("ranges", 20)?;
                let ranges = (0..n)
                    .map(|_| {
                        Ok(BlockRange {
                            request: r.u64("request")?,
                            layer: r.u32("layer")?,
                            first: r.u32("first")?,
                            count: r.u32("count")?,
                        })
                    })
                    .collect::<Result<_, MessageError>>()?;
                Self::Pull(ranges)
            }
            FrameKind::Block => {
                let (request, layer, first) = (r.u64("request")?, r.u32("layer")?, r.u32("first")?);
                let header_crc = crc32fast::hash(&frame.payload[..BLOCK_HEADER_LEN]);
                let data_crc = crc_suffix(frame.crc, header_crc, frame.payload.len() - BLOCK_HEADER_LEN);
                return Ok(Self::Block(BlockFrame { request, layer, first, payload: frame.payload, data_crc }));
            }
            FrameKind::Complete => Self::Complete { request: r.u64("request")? },
            FrameKind::Error => Self::Error {
                code: ErrorCode::from_u8(r.u8("code")?)?,
                request: r.u64("request")?,
                message: r.str("message")?,
            },
        };
        r.end()?;
        Ok(message)
    }
}
