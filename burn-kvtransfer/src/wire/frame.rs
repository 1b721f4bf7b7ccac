//! One frame on the wire, little-endian:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "KVCF"
//!      4     2  version (4)
//!      6     1  kind (FrameKind)
//!      7     1  flags (reserved, 0)
//!      8     4  payload length in bytes
//!     12     4  CRC-32 of bytes 0..12: a corrupt length is caught before anything is allocated
//!     16     n  payload
//!   16+n     4  CRC-32 of the payload
//! ```

use super::WireError;

/// The four bytes every frame starts with.
pub const MAGIC: [u8; 4] = *b"KVCF";
/// The protocol version this crate speaks.
/// Version 4 added one-sided reads: [`Mode::Read`](super::Mode::Read) and the `Agent` and
/// `ReadyAt` messages.
pub const VERSION: u16 = 4;
/// Bytes before the payload.
pub const HEADER_LEN: usize = 16;
/// Bytes after the payload (its checksum).
pub const TRAILER_LEN: usize = 4;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// Connection opening: protocol and scheme descriptor.
    Hello = 1,
    /// KV layout metadata, sent once per connection.
    Layout = 2,
    /// A pull request for blocks.
    Pull = 3,
    /// Block data.
    Block = 4,
    /// A request is complete: the prefill side may free its memory.
    Complete = 5,
    /// An error report from the peer.
    Error = 6,
    /// A prompt to prefill.
    Submit = 7,
    /// One layer of a request is ready to pull.
    Ready = 8,
    /// A request's prefill finished: its last-position logits.
    Done = 9,
    /// Opens a data stream of a connection (instead of a Hello).
    Attach = 10,
    /// The prefill side's transfer-engine (NIXL) agent metadata, for one-sided reads.
    Agent = 11,
    /// One layer of a request is ready to read from the prefill side's registered memory.
    ReadyAt = 12,
}

impl FrameKind {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        Ok(match v {
            1 => Self::Hello,
            2 => Self::Layout,
            3 => Self::Pull,
            4 => Self::Block,
            5 => Self::Complete,
            6 => Self::Error,
            7 => Self::Submit,
            8 => Self::Ready,
            9 => Self::Done,
            10 => Self::Attach,
            11 => Self::Agent,
            12 => Self::ReadyAt,
            other => return Err(WireError::UnknownKind(other)),
        })
    }
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What it carries.
    pub kind: FrameKind,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// CRC-32 of the payload (for a received frame: the one its trailer carried and that was
    /// checked), so what the payload holds can be checked further without hashing it again.
    pub crc: u32,
}

impl Frame {
    /// A frame of `payload`, its checksum computed.
    pub fn new(kind: FrameKind, payload: Vec<u8>) -> Self {
        let crc = crc32fast::hash(&payload);
        Self { kind, payload, crc }
    }

    /// The kind in a header that [`FrameCodec::frame_len`] accepted.
    pub(crate) fn kind_of(header: &[u8]) -> FrameKind {
        FrameKind::from_u8(header[6]).expect("a validated header")
    }
}

/// Encodes frames and decodes them from a byte stream, refusing payloads over `max_payload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCodec {
    /// The largest payload accepted (and produced), bytes.
    pub max_payload: u32,
}

impl FrameCodec {
    /// A codec with a payload cap.
    pub fn new(max_payload: u32) -> Self {
        Self { max_payload }
    }

    /// The bytes of one frame.
    pub fn encode(&self, kind: FrameKind, payload: &[u8]) -> Result<Vec<u8>, WireError> {
        self.encode_parts(kind, &[payload])
    }

    /// The bytes of one frame whose payload is the concatenation of `parts`.
    pub fn encode_parts(&self, kind: FrameKind, parts: &[&[u8]]) -> Result<Vec<u8>, WireError> {
        let (header, trailer) = self.envelope(kind, parts)?;
        let mut out = Vec::with_capacity(HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>() + TRAILER_LEN);
        out.extend_from_slice(&header);
        parts.iter().for_each(|p| out.extend_from_slice(p));
        out.extend_from_slice(&trailer);
        Ok(out)
    }

    /// The header and trailer of a frame whose payload is the concatenation of `parts`, without
    /// copying the payload: a writer sends `header`, the parts, then `trailer`.
    pub fn envelope(
        &self,
        kind: FrameKind,
        parts: &[&[u8]],
    ) -> Result<([u8; HEADER_LEN], [u8; TRAILER_LEN]), WireError> {
        let mut crc = crc32fast::Hasher::new();
        parts.iter().for_each(|p| crc.update(p));
        self.envelope_of(kind, parts.iter().map(|p| p.len()).sum(), crc.finalize())
    }

    /// The header and trailer of a frame whose payload of `total` bytes has the CRC-32 `crc`
    /// (known without reading the payload, e.g. combined from its blocks' checksums).
    pub fn envelope_of(
        &self,
        kind: FrameKind,
        total: usize,
        crc: u32,
    ) -> Result<([u8; HEADER_LEN], [u8; TRAILER_LEN]), WireError> {
        let len = u32::try_from(total)
            .ok()
            .filter(|&l| l <= self.max_payload)
            .ok_or(WireError::PayloadTooLarge { len: total.min(u32::MAX as usize) as u32, max: self.max_payload })?;
        let mut header = [0u8; HEADER_LEN];
        header[0..4].copy_from_slice(&MAGIC);
        header[4..6].copy_from_slice(&VERSION.to_le_bytes());
        header[6] = kind as u8;
        header[8..12].copy_from_slice(&len.to_le_bytes());
        let header_crc = crc32fast::hash(&header[..12]);
        header[12..16].copy_from_slice(&header_crc.to_le_bytes());
        Ok((header, crc.to_le_bytes()))
    }

    /// Checks a payload against the trailer that followed it; returns its CRC-32.
    pub fn check_payload(&self, payload: &[u8], trailer: &[u8]) -> Result<u32, WireError> {
        let crc = crc32fast::hash(payload);
        match crc.to_le_bytes() == trailer {
            true => Ok(crc),
            false => Err(WireError::PayloadChecksum),
        }
    }

    /// Validates the header at the start of `buf` and returns the whole frame's length in bytes
    /// (`Ok(None)` while fewer than [`HEADER_LEN`] bytes are there). Every header error, a
    /// length over the cap included, is reported here, before the payload is awaited.
    pub fn frame_len(&self, buf: &[u8]) -> Result<Option<usize>, WireError> {
        if buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let magic: [u8; 4] = buf[0..4].try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(WireError::BadMagic(magic));
        }
        let stored_crc = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes"));
        if crc32fast::hash(&buf[..12]) != stored_crc {
            return Err(WireError::HeaderChecksum);
        }
        let version = u16::from_le_bytes([buf[4], buf[5]]);
        if version != VERSION {
            return Err(WireError::UnsupportedVersion { found: version, supported: VERSION });
        }
        FrameKind::from_u8(buf[6])?;
        if buf[7] != 0 {
            return Err(WireError::ReservedFlags(buf[7]));
        }
        let len = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
        if len > self.max_payload {
            return Err(WireError::PayloadTooLarge { len, max: self.max_payload });
        }
        Ok(Some(HEADER_LEN + len as usize + TRAILER_LEN))
    }

    /// Decodes the frame at the start of `buf`: `Ok(None)` while `buf` holds only part of it,
    /// `Ok(Some((frame, bytes_used)))` once whole. The header is validated as soon as its 16 bytes
    /// are there, so a corrupt or hostile length fails before the payload is awaited or allocated.
    pub fn decode(&self, buf: &[u8]) -> Result<Option<(Frame, usize)>, WireError> {
        let Some(total) = self.frame_len(buf)? else {
            return Ok(None);
        };
        if buf.len() < total {
            return Ok(None);
        }
        let kind = FrameKind::from_u8(buf[6])?;
        let payload = &buf[HEADER_LEN..total - TRAILER_LEN];
        let crc = self.check_payload(payload, &buf[total - TRAILER_LEN..total])?;
        Ok(Some((Frame { kind, payload: payload.to_vec(), crc }, total)))
    }
}
