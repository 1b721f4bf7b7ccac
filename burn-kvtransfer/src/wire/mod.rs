//! The wire format: frames of `header | payload | payload checksum`.

mod error;
mod frame;

pub use error::WireError;
pub use frame::{Frame, FrameCodec, FrameKind, HEADER_LEN, MAGIC, TRAILER_LEN, VERSION};
