//! # burn-kvtransfer
//!
//! KVDirect-style pull-based transfer of compressed KV between prefill and decode processes.
//!
//! **Status: not implemented yet.** This crate is an empty placeholder in the workspace so that
//! the dependency graph of the design is in place; it exports nothing. The work is tracked in
//! issue 6.
