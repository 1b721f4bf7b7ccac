//! # burn-kvtransfer
//!
//! KVDirect-style pull-based transfer of compressed KV caches from a prefill process to a decode
//! process (`shared/specs/kvdirect.md`).
//!
//! **Status: the frame codec only; issue 6 is open.** [`wire`] frames bytes with a versioned,
//! checksummed header and a size cap, and decodes them incrementally from a byte stream with typed
//! errors. Not yet: the scheme descriptor and layout metadata, transports, the pull protocol,
//! the prefill server and decode worker.

pub mod wire;
