//! Errors of the frame decoder: each names what was wrong with the bytes received.

/// A frame that cannot be accepted. Every variant is detected before the payload is allocated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The stream is not at a frame boundary, or is not this protocol.
    #[error("bad magic {0:02x?}: not a burn-kvtransfer frame")]
    BadMagic([u8; 4]),
    /// The peer speaks another version of the protocol.
    #[error("protocol version {found} is not supported (this side speaks {supported})")]
    UnsupportedVersion {
        /// The version in the frame.
        found: u16,
        /// The version this side speaks.
        supported: u16,
    },
    /// The header's checksum does not match: the header (and its length field) is corrupt.
    #[error("header checksum mismatch: the frame header is corrupt")]
    HeaderChecksum,
    /// An unknown frame kind.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Reserved flag bits are set.
    #[error("reserved flag bits set: {0:#04x}")]
    ReservedFlags(u8),
    /// The declared payload exceeds the receiver's cap.
    #[error("payload of {len} bytes exceeds the cap of {max}")]
    PayloadTooLarge {
        /// The declared length.
        len: u32,
        /// The receiver's cap.
        max: u32,
    },
    /// The payload's checksum does not match: the payload is corrupt.
    #[error("payload checksum mismatch: the frame payload is corrupt")]
    PayloadChecksum,
}
