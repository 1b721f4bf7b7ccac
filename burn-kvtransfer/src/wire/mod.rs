//! The wire format: frames of `header | payload | payload checksum`, and the protocol messages
//! they carry.

mod crc;
mod error;
mod frame;
mod message;
mod payload;

pub use crc::{crc_concat, crc_par, crc_suffix};
pub use error::WireError;
pub use frame::{Frame, FrameCodec, FrameKind, HEADER_LEN, MAGIC, TRAILER_LEN, VERSION};
pub use message::{BlockFrame, BlockRange, ErrorCode, Layout, Message, Mode, ModelShape, BLOCK_HEADER_LEN};
pub use payload::{MessageError, PayloadReader, PayloadWriter};
